#!/usr/bin/env bash
# make chart-check: the chart's quality gates (docs/chart.md); `lint` (make chart-lint) stops after 4.
#  1. helm and kubeconform built from their Go modules (hack/install-tools.sh, into .tools/bin);
#  2. helm lint (default values and charts/dra-fake/ci/*.yaml) for a 1.32 and the latest server;
#  3. tests/test_chart*.py: what helm template renders for 1.32 (v1beta1), 1.33 and the latest;
#  4. shellcheck (native/ build scripts, hack/ scripts, e2e/kind/run.sh, .ci/run), hadolint (Dockerfile),
#     actionlint (GitHub workflows; shellcheck on their run: steps);
#  5. e2e/rbac/: a local control plane gets the rendered objects; kubeconform validates every
#     rendered object against strict schemas generated from that API server (and CRDs); the GPU
#     plugins run with the chart's ServiceAccount token and RBAC; the admission policy is enforced.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
start=$(date +%s)
hack/install-tools.sh helm kubeconform actionlint hadolint shellcheck
export HELM=$PWD/.tools/bin/helm KUBECONFORM=$PWD/.tools/bin/kubeconform DRA_FAKE_REQUIRE_TOOLS=1
chart=charts/dra-fake
for kube in 1.32.0 1.37.0; do
  for values in "" "$chart"/ci/*.yaml; do
    echo "== helm lint --kube-version $kube ${values:+-f $values}"
    "$HELM" lint --strict "$chart" -n dra-fake --kube-version "$kube" ${values:+-f "$values"}
  done
done
T=$PWD/.tools/bin
echo "== shellcheck, hadolint, actionlint"
"$T/shellcheck" -s sh native/gen-stubs.sh native/check-glibc.sh
"$T/shellcheck" hack/chart-check.sh hack/install-tools.sh hack/gen-k8s-replaces.sh hack/kwok-build.sh hack/release.sh hack/kind/*.sh e2e/kind/run.sh .ci/run
"$T/hadolint" Dockerfile
"$T/actionlint" -shellcheck "$T/shellcheck" .github/workflows/*.yaml
if [ "${1:-}" = lint ]; then echo "== chart lint passed in $(( $(date +%s) - start ))s"; exit 0; fi
export LOCAL_CLUSTER_DIR=${LOCAL_CLUSTER_DIR:-$PWD/.local-cluster-chart}
"$PYTHON" -m pytest -q -p no:cacheprovider tests/test_chart*.py e2e/rbac
echo "== chart-check passed in $(( $(date +%s) - start ))s"
