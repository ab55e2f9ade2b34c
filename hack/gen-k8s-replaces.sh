#!/usr/bin/env bash
# Regenerate the replace block of a Go module that builds k8s.io/kubernetes commands, for a release.
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with local
# paths; outside its own repository we must replace each with its published v0.Y.Z.
# Usage: hack/gen-k8s-replaces.sh [vX.Y.Z [MODULE_DIR]]
#   default: the pin in e2e/cluster/K8S_VERSION, module e2e/cluster (the local control plane);
#   e2e/kind/k8s/<minor> are the modules of the kind node images (hack/kind/gen-k8s-module.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mod=$(cd "${2:-$here/e2e/cluster}" && pwd)
version=${1:-$(cat "$mod/K8S_VERSION")}
echo "$version" > "$mod/K8S_VERSION"
staging="v0.${version#v1.}"
export GOTOOLCHAIN=local GOFLAGS=-mod=mod
gomod=$(cd "$mod" && go mod download -json "k8s.io/kubernetes@$version" | python3 -c 'import json,sys; print(json.load(sys.stdin)["GoMod"])')
cd "$mod"
# Drop every existing k8s.io replace, then add one per staging module of this release.
for old in $(go mod edit -json | python3 -c 'import json,sys; [print(r["Old"]["Path"]) for r in (json.load(sys.stdin).get("Replace") or []) if r["Old"]["Path"].startswith("k8s.io/")]'); do
  go mod edit -dropreplace "$old"
done
served() { local out; out=$(cd / && go mod download -json "$1" 2>/dev/null || true); [[ $out == *'"Zip"'* && $out != *'"Error"'* ]]; }
count=0
# shellcheck disable=SC2013  # module paths have no spaces
for name in $(awk '/=> \.\/staging\/src\/k8s.io\//{print $1}' "$gomod" | sort -u); do
  want=$staging
  # The module proxy here refuses a few staging modules at some patch releases (e.g.
  # k8s.io/endpointslice v0.32.13): take the newest served patch of the same minor instead.
  if ! served "$name@$want"; then
    want=$(cd / && { go list -m -versions "$name" 2>/dev/null || true; } | tr ' ' '\n' | grep "^${staging%.*}\." | sort -V \
      | while read -r v; do served "$name@$v" && echo "$v"; done | tail -1) || true
    # None served: keep the release's version; harmless unless a build needs that module.
    if [ -n "$want" ]; then echo "warning: $name@$staging is not served; using $want" >&2; else want=$staging; fi
  fi
  go mod edit -replace "$name=$name@$want"
  count=$((count + 1))
done
go mod edit -require "k8s.io/kubernetes@$version"
echo "replaced $count staging modules with $staging for k8s.io/kubernetes $version in ${mod#"$here"/}"
