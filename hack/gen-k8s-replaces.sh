#!/usr/bin/env bash
# Regenerate the replace block of e2e/cluster/go.mod for the pinned Kubernetes release.
# k8s.io/kubernetes requires its staging modules at v0.0.0 and replaces them with local
# paths; outside its own repository we must replace each with its published v0.Y.Z.
# Usage: hack/gen-k8s-replaces.sh [vX.Y.Z]   (default: the pin in e2e/cluster/K8S_VERSION)
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mod="$here/e2e/cluster"
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
count=0
for name in $(awk '/=> \.\/staging\/src\/k8s.io\//{print $1}' "$gomod" | sort -u); do
  go mod edit -replace "$name=$name@$staging"
  count=$((count + 1))
done
go mod edit -require "k8s.io/kubernetes@$version"
echo "replaced $count staging modules with $staging for k8s.io/kubernetes $version"
