#!/usr/bin/env bash
# hack/kind/matrix.sh [VERSION...] (make kind-matrix): for each release (default: every pinned one)
# a fresh 3-worker kind cluster, the e2e suite, the cluster deleted; one row per lane appended to
# .kind/matrix.tsv in the columns of docs/results/kind-matrix.tsv (copy them there; make generate).
LOG_NAME=kind-matrix
# shellcheck source=hack/kind/lib.sh
source "$(dirname "$0")/lib.sh"
PY=${PYTHON:-$REPO/.venv/bin/python}
[ $# -gt 0 ] || mapfile -t versions < <("$PY" -m e2e.kindcluster versions)
[ $# -eq 0 ] || versions=("$@")
out=$KIND_WORK/matrix.tsv
commit=$(git -C "$REPO" rev-parse --short HEAD)$(git -C "$REPO" diff --quiet || echo -dirty)
for v in "${versions[@]}"; do
  "$REPO/hack/kind/images.sh" "$v" >/dev/null
  PYTHON=$PY "$REPO/hack/kind/previous-release.sh"  # the upgrade test's release (built the first time only)
  t0=$(date +%s)
  "$PY" -m e2e.kindcluster up --k8s "$v" --nodes 3 > "$KIND_WORK/matrix-$v.log" 2>&1 || { log "$v: cluster failed"; continue; }
  up=$(( $(date +%s) - t0 ))
  kubeconfig=$("$PY" -m e2e.kindcluster kubeconfig --k8s "$v")
  status=0
  KUBECONFIG=$kubeconfig "$REPO/.venv/bin/pytest" -q -p no:cacheprovider "$REPO/e2e" >> "$KIND_WORK/matrix-$v.log" 2>&1 || status=$?
  total=$(( $(date +%s) - t0 ))
  summary=$(grep -E '(passed|failed).* in [0-9.]+s' "$KIND_WORK/matrix-$v.log" | tail -1)
  # A row in the columns of docs/results/kind-matrix.tsv (e2e/kindcluster/matrix.py).
  if ! head -1 "$out" 2>/dev/null | grep -q '^kubernetes'; then  # new, or rows in an older format
    [ ! -s "$out" ] || mv "$out" "$out.old"
    head -1 "$REPO/docs/results/kind-matrix.tsv" > "$out"
  fi
  "$PY" -m e2e.kindcluster matrix-row "$v" "$(date -u +%F)" "$commit" 3 "$up" "$total" "$KIND_WORK/matrix-$v.log" >> "$out" ||
    log "$v: no pytest summary, no row"
  log "$v: exit $status, $summary (cluster up ${up}s, lane ${total}s)"
  "$PY" -m e2e.kindcluster down --k8s "$v" >/dev/null
done
echo; echo "$out (copy the rows into docs/results/kind-matrix.tsv, then make generate):"
cat "$out"
