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

from e2e.kindcluster.versions import (
    PUBLIC_NODE_IMAGES,
    REPO,
    Release,
    feature_gates,
    public_node_image,
    runtime_config,
)
from e2e.localcluster.controlplane import scheduler_config

CAP_SYS_RESOURCE = 24
CNI_TEMPLATE = "/etc/containerd/cni-template.json"  # installed by hack/kind/node-base.sh
# kube-scheduler's configuration file in the control-plane node, a mount of the host directory the
# cluster writes it to: DynamicResources' bindingTimeout shortened as on the local cluster, so the
# attach timeout of fabric-attached GPUs is testable (e2e/test_attach.py). From 1.36, where binding
# conditions are on by default and kind writes kubeadm's v1beta4 (extraArgs a list of name/value).
SCHEDULER_DIR = "/etc/kubernetes/dra-fake"
SCHEDULER_CONFIG = f"{SCHEDULER_DIR}/kube-scheduler.yaml"
SCHEDULER_CONFIG_SINCE = 36


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
    image: str | None = None,
    scheduler_dir: Path | None = None,
) -> dict[str, Any]:
    """One control plane and a worker per entry of `workers` (its node labels); `image`: every
    node's image, named in the config (else kind's default or --image); `scheduler_dir`: the host
    directory holding scheduler_file()'s kube-scheduler.yaml (1.36+, else unused)."""
    control_plane: dict[str, Any] = {"role": "control-plane"}
    patches = []
    if scheduler_dir is not None and release.minor >= SCHEDULER_CONFIG_SINCE:
        control_plane["extraMounts"] = [
            {"hostPath": str(scheduler_dir), "containerPath": SCHEDULER_DIR, "readOnly": True}
        ]
        patches.append(scheduler_patch())
    nodes: list[dict[str, Any]] = [control_plane]
    nodes += [{"role": "worker", "labels": dict(w)} for w in workers]
    if image:
        nodes = [{**node, "image": image} for node in nodes]
    config: dict[str, Any] = {
        "kind": "Cluster",
        "apiVersion": "kind.x-k8s.io/v1alpha4",
        "featureGates": feature_gates(release),
        "nodes": nodes,
        "containerdConfigPatches": [containerd_patch(host, offline)],
    }
    if runtime := runtime_config(release):
        config["runtimeConfig"] = runtime
    if offline:
        config["networking"] = {"disableDefaultCNI": True}
    if host.cgroup_v1 and release.minor >= 35:
        config["kubeadmConfigPatches"] = ["kind: KubeletConfiguration\nfailCgroupV1: false\n"]
    if patches:
        config["kubeadmConfigPatchesJSON6902"] = patches
    return config


def scheduler_patch() -> dict[str, Any]:
    """kubeadm's ClusterConfiguration: the scheduler reads SCHEDULER_CONFIG, mounted from the node.
    A JSON patch appends to extraArgs, which a merge patch would replace (dropping feature-gates)."""
    ops = [
        {
            "op": "add",
            "path": "/scheduler/extraArgs/-",
            "value": {"name": "config", "value": SCHEDULER_CONFIG},
        },
        {
            "op": "add",
            "path": "/scheduler/extraVolumes",
            "value": [
                {
                    "name": "dra-fake-scheduler",
                    "hostPath": SCHEDULER_DIR,
                    "mountPath": SCHEDULER_DIR,
                    "readOnly": True,
                    "pathType": "Directory",
                }
            ],
        },
    ]
    return {
        "group": "kubeadm.k8s.io",
        "version": "v1beta4",
        "kind": "ClusterConfiguration",
        "patch": dump(ops),
    }


def scheduler_file() -> str:
    """kube-scheduler.yaml for SCHEDULER_DIR: kubeadm's kubeconfig and leader election, the local
    cluster's bindingTimeout."""
    return dump(scheduler_config("/etc/kubernetes/scheduler.conf", leader_elect=True))


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (containerd and kubeadm patches) as literal blocks, as people write them."""


_Dumper.add_representer(
    str,
    lambda d, v: d.represent_scalar("tag:yaml.org,2002:str", v, style="|" if "\n" in v else None),
)


def dump(config: object) -> str:
    return yaml.dump(config, Dumper=_Dumper, sort_keys=False)


# ---- examples/kind/: the kind config of each release that the README's kind path uses -----------

EXAMPLES = REPO / "examples" / "kind"
# A user's host: cgroup v2 and docker's usual capabilities (HostFacts.detect shows this host's).
USER_HOST = HostFacts(cgroup_v1=False, can_lower_oom_score=True)
GPU_WORKER = {"nvidia.com/gpu.present": "true"}


def example_path(minor: int) -> Path:
    return EXAMPLES / f"kind-1.{minor}.yaml"


def example(minor: int) -> str:
    """examples/kind/kind-1.<minor>.yaml: the public node image of the release, one GPU worker."""
    image = public_node_image(minor)
    release = Release.parse(image.rpartition(":")[2])
    header = (
        f"# kind cluster for Kubernetes 1.{minor} with the DRA settings dra-fake needs (README.md,\n"
        '# "On your kind cluster"). Generated from e2e/kindcluster/config.py by make generate.\n'
    )
    if minor >= 35:  # what kind_config adds where HostFacts.detect finds cgroup v1
        header += (
            "# On a cgroup v1 host add kubeadmConfigPatches: KubeletConfiguration failCgroupV1: false.\n"
        )
    return header + dump(kind_config(release, [GPU_WORKER], USER_HOST, offline=False, image=image))


def write_examples() -> list[Path]:
    EXAMPLES.mkdir(parents=True, exist_ok=True)
    paths = []
    for minor in sorted(PUBLIC_NODE_IMAGES):
        path = example_path(minor)
        path.write_text(example(minor))
        paths.append(path)
    return paths
