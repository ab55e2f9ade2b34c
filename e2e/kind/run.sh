#!/usr/bin/env bash
# e2e/kind/run.sh VERSION: the e2e suite on a kind cluster of the public kindest/node image for
# Kubernetes VERSION (1.32, 1.33, ... or a full 1.34.0), for machines with internet access.
# Offline (no registry), use make kind-images / kind-up / e2e-kind instead (docs/kind.md).
#   KIND_NODE_IMAGE=kindest/node:vX.Y.Z   node image (default: python -m e2e.kindcluster public-image MINOR)
#   KEEP=1                                 leave the cluster running
# Needs docker, Go (kind and helm are built from their Go modules) and Python 3.11+ with the
# project installed (pip install -e '.[dev]').
set -euo pipefail
cd "$(dirname "$0")/../.."
version=${1:?usage: e2e/kind/run.sh VERSION (e.g. 1.32, 1.34, 1.36.1)}
minor=$(echo "$version" | cut -d. -f1,2)
PYTHON=${PYTHON:-python3}
# The node image of a minor: the public one our kind configs name (e2e/kindcluster/versions.py).
if [ "$version" != "$minor" ]; then image=kindest/node:v$version; else image=$("$PYTHON" -m e2e.kindcluster public-image "$minor"); fi
image=${KIND_NODE_IMAGE:-$image}
tag=${image##*:}
full=${tag#v}

hack/kind/tools.sh kind >/dev/null   # built from its Go module into .kind/bin
hack/install-tools.sh helm kubeconform
export PATH=$PWD/.kind/bin:$PATH

echo "== images: the driver (make image) and the workload shell (busybox)"
make image IMAGE=dra-fake:kind
docker pull -q busybox:1.36 && docker tag busybox:1.36 dra-fake-shell:e2e
echo "== KWOK's image for e2e/test_kwok.py (its static binary from its Go module, as offline)"
hack/kind/kwok-image.sh

cluster=dra-fake-$minor
export KUBECONFIG=$PWD/.kind/$minor/kubeconfig
cleanup() {
  status=$?
  if [ "$status" -ne 0 ]; then kind export logs ".kind/$minor/logs" --name "$cluster" || true; fi
  if [ -z "${KEEP:-}" ]; then kind delete cluster --name "$cluster" || true; fi
  exit "$status"
}
trap cleanup EXIT

echo "== kind cluster $cluster ($image), chart installed with Helm"
"$PYTHON" -m e2e.kindcluster up --k8s "$full" --nodes 2 --node-image "$image"

echo "== e2e suite (KUBECONFIG=$KUBECONFIG)"
"$PYTHON" -m pytest -q -p no:cacheprovider e2e
