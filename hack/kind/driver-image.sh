#!/usr/bin/env bash
# hack/kind/driver-image.sh [TAG]: the images a kind cluster of ours runs, offline.
#   dra-fake:<TAG> (default kind)  the driver, from the repository's Dockerfile, on a Debian bookworm
#                                  Python base built here (PYTHON_IMAGE build argument; users keep the
#                                  public python:3.11-slim default), wheels from the host's pip
#                                  (PIP_OFFLINE: the build container has no package index);
#                                  The native stage builds on a debootstrapped gcc image
#                                  (NATIVE_IMAGE) for the same reason.
#   dra-fake-shell:e2e             what test and demo pods run: Debian's static busybox (a POSIX sh
#                                  for the injected nvidia-smi, and sleep).
LOG_NAME=kind-images
# shellcheck source=hack/kind/lib.sh
source "$(dirname "$0")/lib.sh"
tag=${1:-kind}
PYTHON=${PYTHON:-python3}
[ "$(id -u)" = 0 ] || die "needs root (debootstrap)"

mirror=$(grep -rhoE '^(URIs:|deb) *https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
  | head -1 | awk '{print $2}') || true

# A Debian image from debootstrap: NAME PACKAGES
debian_image() {
  local name=$1 packages=$2 root=$KIND_WORK/rootfs/${1//[\/:]/_}
  if image_exists "$name" && fresh "image-$name" "$(key "$DEBIAN_SUITE" "$packages")"; then return 0; fi
  log "debootstrap $DEBIAN_SUITE minbase + $packages"
  rm -rf "$root"; mkdir -p "$(dirname "$root")"
  debootstrap --variant=minbase --include="$packages" "$DEBIAN_SUITE" "$root" ${mirror:+"$mirror"} \
    > "$root.log" 2>&1 || { tail -20 "$root.log"; die "debootstrap failed"; }
  rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
  tar -C "$root" --numeric-owner -c . | docker import --change 'CMD ["/bin/sh"]' - "$name" >/dev/null
  rm -rf "$root" "$root.log"
  stamp "image-$name" "$(key "$DEBIAN_SUITE" "$packages")"
  log "built $name"
}

debian_image "$PYTHON_BASE" python3,python3-venv,ca-certificates
# The Dockerfile's native stage (libnvidia-ml.so.1, nvidia-smi) needs a C toolchain; its default
# base installs one with apt, which has no package index here.
debian_image "$NATIVE_BASE" gcc,libc6-dev,make

# Wheels of the driver and its dependencies (and setuptools for its build), for an offline pip.
wheels=$REPO/build/wheels
wheel_key=$(files_key "$REPO/pyproject.toml")
if ! fresh wheels "$wheel_key" || [ -z "$(ls "$wheels" 2>/dev/null)" ]; then
  log "pip wheel (the driver's dependencies)"
  rm -rf "$wheels"; mkdir -p "$wheels"
  "$PYTHON" -m pip wheel -q --wheel-dir "$wheels" "$REPO" "setuptools>=68" wheel >/dev/null
  rm -f "$wheels"/dra_fake-*.whl   # the image builds the driver from the source it copies
  stamp wheels "$wheel_key"
fi

log "docker build dra-fake:$tag (Dockerfile, PYTHON_IMAGE=$PYTHON_BASE, NATIVE_IMAGE=$NATIVE_BASE)"
docker_build -q -t "dra-fake:$tag" "${OFFLINE_BUILD_ARGS[@]}" \
  --build-arg VERSION="$(git -C "$REPO" describe --tags --always --dirty 2>/dev/null || echo dev)" \
  --build-arg REVISION="$(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)" "$REPO" >/dev/null
docker image prune -f --filter label=org.opencontainers.image.title=dra-fake >/dev/null  # superseded builds
log "built dra-fake:$tag"

# The workload shell: Debian's busybox-static, its applets as symlinks.
shell=dra-fake-shell:e2e
if ! image_exists "$shell" || ! fresh image-shell "$(files_key "$0")"; then
  work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
  (cd "$work" && apt-get download -q busybox-static >/dev/null 2>&1) \
    || { apt-get update -qq >/dev/null && (cd "$work" && apt-get download -q busybox-static >/dev/null); } \
    || die "apt-get download busybox-static failed"
  dpkg-deb -x "$work"/busybox-static_*.deb "$work/deb"
  root=$work/root; mkdir -p "$root/bin" "$root/etc" "$root/tmp" "$root/root"; chmod 1777 "$root/tmp"
  install -m 0755 "$work/deb/bin/busybox" "$root/bin/busybox"
  for applet in $("$root/bin/busybox" --list-full); do
    mkdir -p "$root/$(dirname "$applet")"; [ -e "$root/$applet" ] || ln -s /bin/busybox "$root/$applet"
  done
  printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' > "$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
  tar -C "$root" --numeric-owner -c . | docker import --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin' \
    --change 'CMD ["sh"]' - "$shell" >/dev/null
  stamp image-shell "$(files_key "$0")"
  log "built $shell ($(docker run --rm "$shell" sh -c 'busybox | head -1'))"
fi

# The NVML consumers (e2e/test_nvml.py): nvidia-ml-py, gpustat, nvitop and a go-nvml program on the
# Python base. The wheels' versions are pinned in hack/nvml/consumers.txt.
consumers=dra-fake-nvml-consumers:e2e
consumers_key=$(files_key "$REPO/hack/nvml/consumers.txt" "$REPO/hack/kind/nvml-consumers/Dockerfile" \
  "$REPO/hack/nvml/gonvml/main.go" "$REPO/hack/nvml/gonvml/go.mod" "$REPO/hack/nvml/probe.py")
if ! image_exists "$consumers" || ! fresh image-consumers "$consumers_key"; then
  cwork=$(mktemp -d)
  log "pip download the NVML consumers; go build hack/nvml/gonvml"
  "$PYTHON" -m pip wheel -q --no-deps -w "$cwork/wheels" -r "$REPO/hack/nvml/consumers.txt" >/dev/null
  (cd "$REPO/hack/nvml/gonvml" && CGO_ENABLED=1 CGO_CFLAGS=-Wno-deprecated-declarations go build -trimpath -o "$cwork/gonvml" .)
  cp "$REPO/hack/kind/nvml-consumers/Dockerfile" "$REPO/hack/nvml/probe.py" "$cwork/"
  docker_build -q -t "$consumers" --build-arg BASE="$PYTHON_BASE" "$cwork" >/dev/null
  rm -rf "$cwork"
  stamp image-consumers "$consumers_key"
  log "built $consumers"
fi
