#!/usr/bin/env bash
# The kind node base image, offline: a Debian bookworm rootfs (debootstrap, kind's package list)
# with kind's own base files taken from the kind Go module (entrypoint, systemd units, containerd
# config), kind's Dockerfile steps replayed, our containerd/runc/crictl, and a containerd CNI
# template that replaces kindnetd (which cannot be built from the module proxy). -> image
# dra-fake-kind/node-base:<key>. Needs root (debootstrap, chroot) and docker.
LOG_NAME=kind-node-base
# shellcheck source=hack/kind/lib.sh
source "$(dirname "$0")/lib.sh"
[ "$(id -u)" = 0 ] || die "needs root (debootstrap and chroot)"
command -v debootstrap >/dev/null || die "needs debootstrap (apt-get install debootstrap)"

kind_files=$(go_mod_dir "sigs.k8s.io/kind@$KIND_VERSION")/images/base/files
packages=systemd,systemd-sysv,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod
packages+=,libseccomp2,pigz,fuse-overlayfs,nfs-common,open-iscsi,e2fsprogs,bash,ca-certificates
packages+=,curl,jq,procps,containernetworking-plugins
here=$(dirname "$0")
k=$(key "$DEBIAN_SUITE" "$packages" "$KIND_VERSION" "$(cat "$KIND_WORK"/stamps/tool-{containerd,runc,crictl})" \
  "$(files_key "$0" "$here/cni-template.json")")
image=$IMAGE_PREFIX/node-base:$k
if image_exists "$image"; then log "$image is up to date"; echo "$image" > "$KIND_WORK/node-base-image"; exit 0; fi

rootfs=$KIND_WORK/rootfs/node-base
# The debootstrap result only depends on the suite and the package list: keep it between builds.
deb_key=$(key "$DEBIAN_SUITE" "$packages")
if ! fresh debootstrap-node "$deb_key" || [ ! -x "$rootfs/usr/bin/apt-get" ]; then
  rm -rf "$rootfs.raw"; mkdir -p "$(dirname "$rootfs")"
  mirror=$(grep -rhoE '^(URIs:|deb) *https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
    | head -1 | awk '{print $2}') || true
  log "debootstrap $DEBIAN_SUITE (minbase + kind's packages) from ${mirror:-the default mirror}"
  debootstrap --variant=minbase --include="$packages" "$DEBIAN_SUITE" "$rootfs.raw" ${mirror:+"$mirror"} \
    > "$KIND_WORK/debootstrap-node.log" 2>&1 || { tail -20 "$KIND_WORK/debootstrap-node.log"; die "debootstrap failed"; }
  rm -rf "$rootfs.raw"/var/cache/apt/archives/*.deb "$rootfs.raw"/var/lib/apt/lists/*
  stamp debootstrap-node "$deb_key"
  rm -rf "$rootfs.clean"; mv "$rootfs.raw" "$rootfs.clean"
fi
[ -d "$rootfs.clean" ] || die "missing $rootfs.clean (rm -rf .kind/stamps/debootstrap-node and retry)"
log "customizing the rootfs as kind's base Dockerfile does"
rm -rf "$rootfs"; cp -a "$rootfs.clean" "$rootfs"
R=$rootfs
install -m 0755 "$kind_files"/usr/local/bin/* "$R/usr/local/bin/"
mkdir -p "$R/kind/bin" "$R/LICENSES" "$R/etc/containerd" "$R/etc/default" "$R/etc/sysctl.d" \
  "$R/etc/systemd/system/kubelet.service.d" "$R/etc/kubernetes/manifests" "$R/opt/cni/bin"
install -m 0644 "$kind_files/kind/README.txt" "$R/kind/"
install -m 0755 "$kind_files"/kind/bin/* "$R/kind/bin/"
install -m 0644 "$kind_files/LICENSES/README.txt" "$R/LICENSES/"
install -m 0644 "$kind_files/etc/crictl.yaml" "$R/etc/"
install -m 0644 "$kind_files/etc/containerd/config.toml" "$R/etc/containerd/"
install -m 0644 "$kind_files/etc/default/kubelet" "$R/etc/default/"
install -m 0644 "$kind_files"/etc/sysctl.d/* "$R/etc/sysctl.d/"
install -m 0644 "$kind_files"/etc/systemd/system/*.service "$kind_files"/etc/systemd/system/*.slice "$R/etc/systemd/system/"
install -m 0644 "$kind_files"/etc/systemd/system/kubelet.service.d/* "$R/etc/systemd/system/kubelet.service.d/"
chmod 755 "$R/kind" "$R/kind/bin"
find "$R/lib/systemd/system/sysinit.target.wants/" -name systemd-tmpfiles-setup.service -delete
rm -f "$R"/lib/systemd/system/multi-user.target.wants/* "$R"/etc/systemd/system/*.wants/* \
  "$R"/lib/systemd/system/local-fs.target.wants/* "$R"/lib/systemd/system/sockets.target.wants/*udev* \
  "$R"/lib/systemd/system/sockets.target.wants/*initctl* "$R"/lib/systemd/system/basic.target.wants/*
grep -q '^ReadKMsg=no' "$R/etc/systemd/journald.conf" || echo "ReadKMsg=no" >> "$R/etc/systemd/journald.conf"
ln -sf /usr/lib/systemd/systemd "$R/sbin/init"
chroot "$R" systemctl enable kubelet.service containerd.service undo-mount-hacks.service >/dev/null 2>&1
chroot "$R" systemctl mask systemd-binfmt.service >/dev/null 2>&1
install -m 0755 "$KIND_BIN/containerd" "$KIND_BIN/ctr" "$KIND_BIN/containerd-shim-runc-v2" "$KIND_BIN/crictl" "$R/usr/local/bin/"
install -m 0755 "$KIND_BIN/runc" "$R/usr/local/sbin/runc"
for p in host-local loopback ptp portmap; do install -m 0755 "$R/usr/lib/cni/$p" "$R/opt/cni/bin/"; done
install -m 0644 "$here/cni-template.json" "$R/etc/containerd/cni-template.json"
"$KIND_BIN/ctr" oci spec \
  | jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
  | jq 'del(.process.rlimits)' > "$R/etc/containerd/cri-base.json"

log "importing $image"
# docker import cannot set STOPSIGNAL; the legacy builder adds it in a one-line build.
tar -C "$R" --numeric-owner -c . | docker import --change 'ENV container=docker' \
  --change 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]' - "$image-raw" >/dev/null
ctx=$(mktemp -d); printf 'FROM %s\nSTOPSIGNAL SIGRTMIN+3\n' "$image-raw" > "$ctx/Dockerfile"
docker_build -q -t "$image" "$ctx" >/dev/null
rm -rf "$ctx" "$R"; docker rmi "$image-raw" >/dev/null
echo "$image" > "$KIND_WORK/node-base-image"
log "built $image"
