#!/usr/bin/env python3
"""Rewrite a multi-image `docker save` archive so that `kind build node-image --type file` takes
every image in it as already built (and does not try to pull any of them).

kind reads the tags of kube-proxy.tar from the first metadata member of the archive it meets
(`repositories` or `manifest.json`; pkg/build/nodeimage/internal/container/docker/archive.go in
sigs.k8s.io/kind v0.33.0) and compares them with kubeadm's image names, which are fully qualified
(<registry>/kindest/kindnetd:...). So: `repositories` goes first and names every image with its
fully qualified reference. Usage: archive.py SRC.tar DST.tar REGISTRY (the registry short names
stand for; node-image.sh takes it from kind's own image references)
"""

from __future__ import annotations

import io
import json
import sys
import tarfile


def qualified(repo: str, registry: str) -> str:
    """docker's short names (busybox, kindest/kindnetd) -> REGISTRY/library/busybox, ..."""
    first, _, rest = repo.partition("/")
    if not rest:
        return f"{registry}/library/{repo}"
    if "." in first or ":" in first or first == "localhost":
        return repo
    return f"{registry}/{repo}"


def main(src: str, dst: str, registry: str) -> None:
    with tarfile.open(src) as archive:
        manifest = json.load(archive.extractfile("manifest.json"))  # type: ignore[arg-type]
        repositories: dict[str, dict[str, str]] = {}
        # From manifest.json: docker leaves tags that share an image out of `repositories`.
        for image in manifest:
            layer_id = image["Layers"][-1].split("/")[0]
            for ref in image.get("RepoTags") or []:
                repo, _, tag = ref.rpartition(":")
                repositories.setdefault(qualified(repo, registry), {})[tag] = layer_id
        data = json.dumps(repositories, sort_keys=True).encode()
        with tarfile.open(dst, "w") as out:
            info = tarfile.TarInfo("repositories")
            info.size, info.mode = len(data), 0o644
            out.addfile(info, io.BytesIO(data))
            for member in archive:
                if member.name != "repositories":
                    out.addfile(member, archive.extractfile(member) if member.isfile() else None)
    for repo, tags in sorted(repositories.items()):
        print(" ".join(f"{repo}:{tag}" for tag in sorted(tags)))


if __name__ == "__main__":
    main(*sys.argv[1:4])
