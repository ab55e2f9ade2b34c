#!/usr/bin/env bash
# e2e/kind/run.sh VERSION: a kind cluster for Kubernetes VERSION (1.32, 1.33, 1.34, ... or a full
# 1.34.0), the image built and loaded, the chart installed, the e2e suite run against it.
#   KIND_NODE_IMAGE=kindest/node:vX.Y.Z   node image (default: the table below)
#   KEEP=1                                 leave the cluster running
# Needs docker (or podman), Go (kind and helm are built from their Go modules) and Python 3.11+.
set -euo pipefail
cd "$(dirname "$0")/../.."
version=${1:?usage: e2e/kind/run.sh VERSION (e.g. 1.32, 1.34, 1.36.1)}
minor=$(echo "$version" | cut -d. -f1,2)
case $minor in
  1.32) config=e2e/kind/cluster-1.32.yaml ;;
  1.33) config=e2e/kind/cluster-1.33.yaml ;;
  1.3[4-9]) config=e2e/kind/cluster-1.34plus.yaml ;;
  *) echo "run.sh: Kubernetes $version is not supported (1.32+)" >&2; exit 2 ;;
esac
# Node images published with kind releases (override with KIND_NODE_IMAGE for others).
declare -A NODE_IMAGE=(
  [1.32]=v1.32.2 [1.33]=v1.33.1 [1.34]=v1.34.0 [1.35]=v1.35.0 [1.36]=v1.36.1
)
if [ "$version" != "$minor" ]; then tag=v$version; else tag=${NODE_IMAGE[$minor]:-}; fi
image=${KIND_NODE_IMAGE:-kindest/node:${tag:?no default node image for $minor: set KIND_NODE_IMAGE}}

KIND_VERSION=v0.33.0
work=e2e/kind/.work; mkdir -p "$work"
export PATH=$PWD/.tools/bin:$PATH
hack/install-tools.sh helm
[ -x .tools/bin/kind ] || GOBIN=$PWD/.tools/bin GOFLAGS=-buildvcs=false go install "sigs.k8s.io/kind@$KIND_VERSION"
engine=$(command -v docker || command -v podman) || { echo "run.sh: needs docker or podman" >&2; exit 1; }
[ "$(basename "$engine")" = podman ] && export KIND_EXPERIMENTAL_PROVIDER=podman

cluster=dra-fake-${minor/./-}
export KUBECONFIG=$PWD/$work/kubeconfig-$minor
cleanup() {
  status=$?
  if [ "$status" -ne 0 ]; then kind export logs "$work/logs-$minor" --name "$cluster" || true; fi
  if [ -z "${KEEP:-}" ]; then kind delete cluster --name "$cluster" || true; fi
  exit "$status"
}
trap cleanup EXIT

echo "== kind cluster $cluster ($image, $config)"
kind delete cluster --name "$cluster" >/dev/null 2>&1 || true
kind create cluster --name "$cluster" --image "$image" --config "$config" --wait 120s

echo "== image"
make image IMAGE=dra-fake:e2e
# Imported with ctr on every node (kind load fails on some containerd configurations).
for node in $(kind get nodes --name "$cluster"); do
  "$engine" save dra-fake:e2e | "$engine" exec -i "$node" ctr --namespace=k8s.io images import -
done

echo "== chart"
helm install dra-fake charts/dra-fake -n dra-fake --create-namespace --wait --timeout 180s \
  --set image.repository=dra-fake --set image.tag=e2e --set image.pullPolicy=Never

echo "== e2e suite (KUBECONFIG=$KUBECONFIG: harness-only tests are skipped)"
PYTHON=${PYTHON:-python3}
"$PYTHON" -m pytest -q -p no:cacheprovider e2e --ignore=e2e/test_rbac.py
