"""The kind cluster configuration for a release, on this host (pure, apart from HostFacts.detect).

Offline node images (make kind-images) carry no kindnetd: the default CNI is off and each node's
containerd renders a ptp + host-local conflist from its pod CIDR (hack/kind/cni-template.json);
e2e.kindcluster.cluster adds the routes between nodes. Public kindest/node images keep kindnetd.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from e2e.kindcluster.versions import Release, feature_gates, runtime_config

CAP_SYS_RESOURCE = 24
CNI_TEMPLATE = "/etc/containerd/cni-template.json"  # installed by hack/kind/node-base.sh


@dataclass(frozen=True)
class HostFacts:
    cgroup_v1: bool  # kubelets of 1.35+ refuse cgroup v1 unless failCgroupV1: false
    can_lower_oom_score: bool  # CAP_SYS_RESOURCE: without it no process may set a negative oom_score_adj

    @classmethod
    def detect(
        cls, proc: Path = Path("/proc/self/status"), cgroup: Path = Path("/sys/fs/cgroup")
    ) -> HostFacts:
        bounding = 0
        for line in proc.read_text().splitlines():
            if line.startswith("CapBnd:"):
                bounding = int(line.split()[1], 16)
        return cls(
            cgroup_v1=not (cgroup / "cgroup.controllers").exists(),
            can_lower_oom_score=bool(bounding >> CAP_SYS_RESOURCE & 1),
        )


def containerd_patch(host: HostFacts, offline: bool) -> str:
    lines = [
        '[plugins."io.containerd.grpc.v1.cri"]',
        # CDI: the driver's claims are CDI devices (on by default in containerd 2.x; explicit
        # for node images with containerd 1.7).
        "  enable_cdi = true",
        '  cdi_spec_dirs = ["/etc/cdi", "/var/run/cdi"]',
    ]
    if not host.can_lower_oom_score:
        # The kubelet gives critical pods oom_score_adj -997; without CAP_SYS_RESOURCE containerd
        # must clamp instead of failing every such container (kind does this in user namespaces).
        lines.append("  restrict_oom_score_adj = true")
    if offline:
        lines += ['[plugins."io.containerd.grpc.v1.cri".cni]', f'  conf_template = "{CNI_TEMPLATE}"']
    return "\n".join(lines)


def kind_config(
    release: Release,
    workers: list[dict[str, str]],
    host: HostFacts,
    *,
    offline: bool,
) -> dict[str, Any]:
    """One control plane and a worker per entry of `workers` (its node labels)."""
    config: dict[str, Any] = {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "featureGates": feature_gates(release),
        "nodes": [{"role": "control-plane"}] + [{"role": "worker", "labels": dict(w)} for w in workers],
        "containerdConfigPatches": [containerd_patch(host, offline)],
    }
    if runtime := runtime_config(release):
        config["runtimeConfig"] = runtime
    if offline:
        config["networking"] = {"disableDefaultCNI": True}
    if host.cgroup_v1 and release.minor >= 35:
        config["kubeadmConfigPatches"] = ["kind: KubeletConfiguration\nfailCgroupV1: false\n"]
    return config


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (containerd and kubeadm patches) as literal blocks, as people write them."""


_Dumper.add_representer(
    str,
    lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None),
)


def dump(config: dict[str, Any]) -> str:
    return yaml.dump(config, Dumper=_Dumper, sort_keys=False)
