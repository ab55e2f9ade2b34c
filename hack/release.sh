#!/usr/bin/env bash
# make release VERSION=x.y.z: the versioned artifacts of a release, into dist/<version>/
# (docs/release.md; .github/workflows/release.yaml runs it on a tag vX.Y.Z):
#   dra-fake-<version>.image.tar   the image dra-fake:<version> (docker save; Dockerfile, plain build)
#   dra-fake-<version>.tgz         the chart, helm package with version and appVersion <version>
#   PUSH                           the commands that publish both to an OCI registry
#   NOTES.md                       the release's CHANGELOG.md entry (required)
#   SHA256SUMS                     of the files above (sha256sum -c SHA256SUMS)
# REGISTRY=host/path: also push the image (<REGISTRY>/dra-fake:<version>) and the chart
# (oci://<REGISTRY>/charts); otherwise nothing leaves this machine. SKIP_IMAGE=1: the chart and
# the rest only (a machine without docker). HELM, CONTAINER_TOOL: which helm and docker (default:
# .tools/bin/helm, else helm on PATH; docker, else podman).
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-${VERSION:-}}
[[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.-]+)?$ ]] ||
  { echo "release: VERSION must be x.y.z (or x.y.z-pre), not '$version'" >&2; exit 2; }
TOOL=${CONTAINER_TOOL:-$(command -v docker || command -v podman || true)}
out=${DIST:-dist}/$version
name=dra-fake-$version

# The changelog entry: "## <version>" up to the next "## " heading, not empty.
notes=$(awk -v v="$version" '
  /^## / { on = ($2 == v || $2 == "[" v "]") ; next }
  on' CHANGELOG.md | sed '/^[[:space:]]*$/d')
[ -n "$notes" ] || { echo "release: CHANGELOG.md has no entry '## $version' (or it is empty)" >&2; exit 1; }

rm -rf "$out" && mkdir -p "$out"
printf '%s\n' "$notes" > "$out/NOTES.md"
revision=$(git rev-parse HEAD 2>/dev/null || echo unknown)

if [ -z "${HELM:-}" ]; then  # the pinned one (hack/install-tools.sh helm), else the user's
  if [ -x .tools/bin/helm ]; then HELM=$PWD/.tools/bin/helm; else HELM=$(command -v helm || true); fi
fi
[ -n "$HELM" ] || { echo "release: no helm (hack/install-tools.sh helm builds it)" >&2; exit 1; }
"$HELM" package charts/dra-fake --version "$version" --app-version "$version" -d "$out" >/dev/null
files=("$name.tgz" NOTES.md)
if [ -z "${SKIP_IMAGE:-}" ]; then
  [ -n "$TOOL" ] || { echo "release: no docker or podman (SKIP_IMAGE=1 for the chart alone)" >&2; exit 1; }
  "$TOOL" build -t "dra-fake:$version" --build-arg VERSION="$version" --build-arg REVISION="$revision" .
  "$TOOL" save -o "$out/$name.image.tar" "dra-fake:$version"
  files+=("$name.image.tar")
fi

image=${REGISTRY:+$REGISTRY/}dra-fake:$version
cat > "$out/PUSH" <<PUSH
# Publish dra-fake $version (REGISTRY=<host/path> make release VERSION=$version runs these):
docker load -i $name.image.tar
docker tag dra-fake:$version \${REGISTRY}/dra-fake:$version
docker push \${REGISTRY}/dra-fake:$version
helm push $name.tgz oci://\${REGISTRY}/charts
# Install from the registry:
helm install dra-fake oci://\${REGISTRY}/charts/dra-fake --version $version -n dra-fake --create-namespace --set image.repository=\${REGISTRY}/dra-fake
PUSH
files+=(PUSH)
(cd "$out" && sha256sum "${files[@]}" > SHA256SUMS)

if [ -n "${REGISTRY:-}" ]; then
  [ -z "${SKIP_IMAGE:-}" ] && "$TOOL" tag "dra-fake:$version" "$image" && "$TOOL" push "$image"
  "$HELM" push "$out/$name.tgz" "oci://$REGISTRY/charts"
fi
echo "release $version (commit $revision) in $out:"
(cd "$out" && cat SHA256SUMS)
[ -n "${REGISTRY:-}" ] && echo "pushed $image and oci://$REGISTRY/charts/dra-fake:$version" ||
  echo "nothing pushed (REGISTRY unset); to publish: $out/PUSH"
