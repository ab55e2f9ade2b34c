#!/usr/bin/env bash
# hack/kind/kwok-image.sh: dra-fake-kind/kwok:<KWOK version>, KWOK's controller for kind clusters
# (docs/local-cluster.md#kwok-on-kind-or-any-cluster), offline: the static binary hack/kwok-build.sh
# builds from the pinned Go module (e2e/cluster/kwok), alone in an image, where KWOK's own image has
# it (/usr/local/bin/kwok, the entrypoint), so the same manifests run either image.
LOG_NAME=kind-images
# shellcheck source=hack/kind/lib.sh
source "$(dirname "$0")/lib.sh"
"$REPO/hack/kwok-build.sh" >/dev/null
binary=$REPO/e2e/cluster/bin/kwok
version=$(awk '$1 == "require" && $2 == "sigs.k8s.io/kwok" {print $3}' "$REPO/e2e/cluster/kwok/go.mod")
[ -n "$version" ] || die "no sigs.k8s.io/kwok in e2e/cluster/kwok/go.mod"
image=$IMAGE_PREFIX/kwok:$version
image_key=$(files_key "$0" "$binary")
if image_exists "$image" && fresh image-kwok "$image_key"; then
  log "$image is up to date"; exit 0
fi
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/usr/local/bin" "$work/tmp"; chmod 1777 "$work/tmp"
install -m 0755 "$binary" "$work/usr/local/bin/kwok"
tar -C "$work" --numeric-owner --owner=0 --group=0 -c . \
  | docker import --change 'ENTRYPOINT ["/usr/local/bin/kwok"]' --change 'USER 65532:65532' - "$image" >/dev/null
stamp image-kwok "$image_key"
log "built $image ($(docker run --rm "$image" --version 2>&1 | head -1))"
