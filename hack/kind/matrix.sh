#!/usr/bin/env bash
# hack/kind/matrix.sh [VERSION...] (make kind-matrix): for each release (default: every pinned one)
# a fresh 3-worker kind cluster, the e2e suite, the cluster deleted; one row per lane appended to
# .kind/matrix.tsv and the markdown table for docs/kind.md printed at the end.
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
  t0=$(date +%s)
  "$PY" -m e2e.kindcluster up --k8s "$v" --nodes 3 > "$KIND_WORK/matrix-$v.log" 2>&1 || { log "$v: cluster failed"; continue; }
  up=$(( $(date +%s) - t0 ))
  kubeconfig=$("$PY" -m e2e.kindcluster kubeconfig --k8s "$v")
  status=0
  KUBECONFIG=$kubeconfig "$REPO/.venv/bin/pytest" -q -p no:cacheprovider "$REPO/e2e" >> "$KIND_WORK/matrix-$v.log" 2>&1 || status=$?
  total=$(( $(date +%s) - t0 ))
  summary=$(grep -E '^[0-9]+ (passed|failed)|(passed|failed).* in ' "$KIND_WORK/matrix-$v.log" | tail -1)
  api=$(grep -oE 'resource.k8s.io [a-z0-9, ]+' "$KIND_WORK/matrix-$v.log" | tail -1)
  printf '%s\t%s\t%s\t%s\t%ss\t%ss\t%s\t%s\n' "$(date -u +%F)" "$commit" "$v" "${api#resource.k8s.io }" "$up" "$total" "$status" "$summary" >> "$out"
  log "$v: exit $status, $summary (cluster up ${up}s, lane ${total}s)"
  "$PY" -m e2e.kindcluster down --k8s "$v" >/dev/null
done
echo; echo "| date | commit | Kubernetes | resource.k8s.io | cluster up | lane | exit | result |"
echo "| --- | --- | --- | --- | --- | --- | --- | --- |"
sed 's/\t/ | /g; s/^/| /; s/$/ |/' "$out"
