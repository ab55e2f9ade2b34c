#!/usr/bin/env bash
# hack/kind/node-image.sh VERSION: the kind node image for one Kubernetes release, offline.
#   1. Kubernetes binaries (kubeadm, kubelet, kubectl, kube-proxy, the control plane) and etcd,
#      built from the release's k8s.io/kubernetes Go module (e2e/kind/k8s/<minor>, or e2e/cluster);
#   2. the images kubeadm expects (`kubeadm config images list`), each a static binary on a tiny
#      rootfs, kube-proxy on the node base (it needs iptables/nftables/conntrack), and kind's extra
#      image names (kindnetd, local-path) as placeholders: the cluster uses neither;
#   3. `kind build node-image --type file` from a server tarball in the release layout, on our node
#      base image; kind's local-path storage manifest removed (its images are placeholders).
# -> dra-fake-kind/node:<version>. Needs hack/kind/tools.sh and hack/kind/node-base.sh first.
LOG_NAME=kind-node
# shellcheck source=hack/kind/lib.sh
source "$(dirname "$0")/lib.sh"
read -r module version < <(k8s_module "${1:?usage: node-image.sh VERSION (e.g. 1.33 or 1.33.13)}") \
  || die "no pinned Kubernetes release for $1; pinned: $(k8s_versions | tr '\n' ' ')"
minor=$(minor_of "$version")
base=$(cat "$KIND_WORK/node-base-image" 2>/dev/null || true)
if [ -z "$base" ] || ! image_exists "$base"; then die "build the node base first (hack/kind/node-base.sh)"; fi
out=$KIND_WORK/k8s/$version; bin=$out/bin; mkdir -p "$bin"

# 1. binaries
major=${version#v}; major=${major%%.*}
ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$version -X k8s.io/component-base/version.gitMajor=$major -X k8s.io/component-base/version.gitMinor=${minor#*.} -X k8s.io/component-base/version.gitTreeState=clean"
targets=(kubeadm kubelet kubectl kube-proxy kube-apiserver kube-controller-manager kube-scheduler etcd)
bin_key=$(key "$version" "$(go version)" "$ldflags" "$(files_key "$module/go.mod" "$module/go.sum")")
if ! fresh "k8s-$version" "$bin_key"; then
  (cd "$module" && go mod download)
  for t in "${targets[@]}"; do
    pkg=k8s.io/kubernetes/cmd/$t; [ "$t" = etcd ] && pkg=go.etcd.io/etcd/server/v3
    t0=$(date +%s)
    (cd "$module" && CGO_ENABLED=0 go build -v -trimpath -ldflags "$ldflags" -o "$bin/$t" "$pkg" 2> "$bin/.$t.log") \
      || { grep -v '^[a-z0-9./_-]*$' "$bin/.$t.log" >&2 || cat "$bin/.$t.log" >&2; die "go build $pkg failed"; }
    log "$t $version: $(wc -l < "$bin/.$t.log") packages compiled, $(( $(date +%s) - t0 ))s"
  done
  stamp "k8s-$version" "$bin_key"
fi

node_image=$IMAGE_PREFIX/node:$version
node_key=$(key "$bin_key" "$base" "$(cat "$KIND_WORK/stamps/tool-coredns" "$KIND_WORK/stamps/tool-pause")" \
  "$(files_key "$0" "$REPO/hack/kind/archive.py")")
if image_exists "$node_image" && fresh "node-$version" "$node_key"; then log "$node_image is up to date"; exit 0; fi

# 2. the images kubeadm will ask for: exactly its names, no pulls
mapfile -t wanted < <("$bin/kubeadm" config images list --kubernetes-version "$version" 2>/dev/null)
[ "${#wanted[@]}" -ge 6 ] || die "kubeadm config images list gave: ${wanted[*]}"
kind_mod=$(go_mod_dir "sigs.k8s.io/kind@$KIND_VERSION"); kind_src=$kind_mod/pkg/build/nodeimage
mapfile -t kind_extra < <(grep -hoE '"[a-z0-9.-]+/kindest/[a-z-]+:[^"]+"' "$kind_src"/const_cni.go "$kind_src"/const_storage.go | tr -d '"')
[ "${#kind_extra[@]}" = 3 ] || die "kind $KIND_VERSION extra images not found in $kind_src"
# The registry that short names (busybox) stand for: the one kind's own references name.
default_registry=${kind_extra[0]%%/*}
work=$(mktemp -d "$KIND_WORK/node-build.XXXX"); trap 'rm -rf "$work"' EXIT

tiny_image() { # NAME BINARY DEST-IN-IMAGE ENTRYPOINT-JSON
  local root=$work/root-${1//[\/:]/_}
  mkdir -p "$root/usr/local/bin" "$root/etc" "$root/tmp" "$root/var/lib" "$root/$(dirname "$3")"
  chmod 1777 "$root/tmp"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n' > "$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' > "$root/etc/group"
  echo 'hosts: files dns' > "$root/etc/nsswitch.conf"
  install -m 0755 "$2" "$root/$3"
  tar -C "$root" --numeric-owner -c . | docker import --change 'ENV PATH=/usr/local/bin:/usr/bin:/bin' \
    --change "ENTRYPOINT $4" - "$1" >/dev/null
}
component_tags=(); extra_tags=()
for ref in "${wanted[@]}"; do
  name=${ref##*/}; name=${name%%:*}
  case $name in
    kube-apiserver|kube-controller-manager|kube-scheduler)
      tiny_image "$ref" "$bin/$name" "usr/local/bin/$name" "[\"/usr/local/bin/$name\"]"; component_tags+=("$ref") ;;
    etcd) tiny_image "$ref" "$bin/etcd" usr/local/bin/etcd '["/usr/local/bin/etcd"]'; extra_tags+=("$ref") ;;
    coredns) tiny_image "$ref" "$KIND_BIN/coredns" coredns '["/coredns"]'; extra_tags+=("$ref") ;;
    pause) tiny_image "$ref" "$KIND_BIN/pause" pause '["/pause"]'; extra_tags+=("$ref"); pause_ref=$ref ;;
    kube-proxy)
      mkdir -p "$work/kube-proxy"; cp "$bin/kube-proxy" "$work/kube-proxy/"
      printf 'FROM %s\nCOPY kube-proxy /usr/local/bin/kube-proxy\nENTRYPOINT []\nCMD []\n' "$base" > "$work/kube-proxy/Dockerfile"
      docker_build -q -t "$ref" "$work/kube-proxy" >/dev/null; proxy_ref=$ref ;;
    *) die "kubeadm wants an image this script does not know: $ref" ;;
  esac
done
# containerd's sandbox image in kind's config (pause:3.10), and kind's own images: placeholders.
sandbox=$(grep -oE 'sandbox_image = "[^"]+"' "$kind_mod/images/base/files/etc/containerd/config.toml" | cut -d'"' -f2)
[ -n "$sandbox" ] || die "no sandbox_image in kind's containerd config"
for ref in "$sandbox" "${kind_extra[@]}"; do
  docker tag "$pause_ref" "$ref"; extra_tags+=("$ref")
done
log "images for $version: ${wanted[*]##*/} + ${#kind_extra[@]} kind placeholders"

# 3. server tarball in the release layout -> kind build node-image --type file
tb=$work/tarball/kubernetes; mkdir -p "$tb/server/bin"
echo "$version" > "$tb/version"
cp "$bin/kubeadm" "$bin/kubelet" "$bin/kubectl" "$tb/server/bin/"
for ref in "${component_tags[@]}"; do
  name=${ref##*/}; docker save -o "$tb/server/bin/${name%%:*}.tar" "$ref"
done
docker save -o "$work/extra.tar" "$proxy_ref" "${extra_tags[@]}"
python3 "$REPO/hack/kind/archive.py" "$work/extra.tar" "$tb/server/bin/kube-proxy.tar" "$default_registry" > "$work/archive.txt"
rm -f "$work/extra.tar"
tar -C "$work/tarball" -czf "$work/kubernetes-server-$version.tar.gz" kubernetes
rm -rf "$work/tarball"
log "kind build node-image $version"
TMPDIR=$work "$KIND_BIN/kind" build node-image --type file --base-image "$base" --image "$node_image-raw" \
  "$work/kubernetes-server-$version.tar.gz" > "$work/build.log" 2>&1 || { cat "$work/build.log" >&2; die "kind build node-image failed"; }
printf 'FROM %s\nRUN rm -f /kind/manifests/default-storage.yaml\n' "$node_image-raw" > "$work/Dockerfile"
docker_build -q -t "$node_image" "$work" >/dev/null
docker rmi "$node_image-raw" >/dev/null
# The component images now live inside the node image; drop the docker copies.
docker rmi "${wanted[@]}" "${extra_tags[@]}" >/dev/null 2>&1 || true
stamp "node-$version" "$node_key"
log "built $node_image ($(docker image inspect -f '{{.Size}}' "$node_image" | awk '{printf "%d MB", $1/1e6}'))"
