#!/usr/bin/env bash
# hack/kind/previous-release.sh (make e2e-kind): the files of the release this commit upgrades from
# (e2e/test_release_upgrade.py, docs/release.md), built when they are missing: the newest tag
# vX.Y.Z before HEAD checked out in a temporary git worktree, its own `make release` there, its
# dist/<version>/ written into this checkout's dist/ (git-ignored). Offline: the image is built on
# the bases make kind-images built (hack/kind/docker-offline.sh), so docker's cache serves the
# layers the tag shares with this commit. A clone without tags builds the commit CHANGELOG.md
# records for the release. Nothing to do without a release (the test is deselected with that
# reason) or when DRA_FAKE_PREVIOUS_RELEASE_DIR names the files' place.
LOG_NAME=previous-release
# shellcheck source=hack/kind/lib.sh
source "$(dirname "$0")/lib.sh"
PYTHON=${PYTHON:-python3}
[ -z "${DRA_FAKE_PREVIOUS_RELEASE_DIR:-}" ] || exit 0
missing=$(cd "$REPO" && "$PYTHON" -m e2e.releases missing) || die "e2e.releases failed"
[ -n "$missing" ] || exit 0
read -r tag ref <<< "$missing"  # ref: the tag, or in a clone without tags the commit CHANGELOG.md records
version=${tag#v}
work=$(mktemp -d)
cleanup() { git -C "$REPO" worktree remove --force "$work/src" >/dev/null 2>&1 || true; rm -rf "$work"; }
trap cleanup EXIT
log "make release VERSION=$version at $tag ($ref; a worktree in $work/src) into dist/$version"
git -C "$REPO" worktree add --quiet --detach "$work/src" "$ref"
# The wheels of the tag's dependencies for the offline pip (driver-image.sh does the same for HEAD).
mkdir -p "$work/src/build"
"$PYTHON" -m pip wheel -q --wheel-dir "$work/src/build/wheels" "$work/src" "setuptools>=68" wheel >/dev/null
rm -f "$work/src/build/wheels"/dra_fake-*.whl
CONTAINER_TOOL=$REPO/hack/kind/docker-offline.sh DIST=$REPO/dist \
  make -C "$work/src" --no-print-directory release VERSION="$version" > "$work/release.log" 2>&1 ||
  { tail -30 "$work/release.log" >&2; die "make release VERSION=$version at $tag failed"; }
log "built dist/$version:"; (cd "$REPO/dist/$version" && cat SHA256SUMS)
