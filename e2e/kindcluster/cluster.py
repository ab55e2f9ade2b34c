"""A kind cluster of one pinned release with dra-fake installed by Helm, as users run it.

`up`: kind create cluster from the offline node image (make kind-images), routes between nodes
(kindnetd's job, see config.py), our images loaded, `helm install charts/dra-fake` with the chart's
own ServiceAccounts and RBAC, then wait until every worker's GPU ResourceSlices are published.
State lives in .kind/<minor>/ (kubeconfig, kind config, Helm values).

Default topology without an inventory file: worker 1 (and 3, 4, ...) the chart's default 8 x H100,
worker 2 examples/inventory/mixed-mig.yaml (pre-created and dynamic MIG; dynamic only where the
release has partitionable devices), as the local e2e cluster and `make demo` have it.
"""

from __future__ import annotations

import copy
import json
import logging
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from dra_fake.core.featuregates import gate_map
from e2e.kindcluster.config import HostFacts, dump, kind_config, scheduler_file
from e2e.kindcluster.versions import REPO, Release, partitionable_devices
from e2e.localcluster.values import TEST_BED_VALUES

log = logging.getLogger("kindcluster")

ROOT = REPO / ".kind"
KIND = ROOT / "bin" / "kind"
HELM = REPO / ".tools" / "bin" / "helm"
NODE_IMAGE = "dra-fake-kind/node"
DRIVER_IMAGE = ("dra-fake", "kind")
SHELL_IMAGE = "dra-fake-shell:e2e"
# NVML consumers for e2e/test_nvml.py: nvidia-ml-py, gpustat, nvitop, a go-nvml program.
NVML_CONSUMERS_IMAGE = "dra-fake-nvml-consumers:e2e"
RELEASE = "dra-fake"
NAMESPACE = "dra-fake"
POOL_LABEL = "dra-fake.dev/gpu-pool"  # h100 | mig | classic: which inventory a worker has
CLASSIC = "classic"  # the third worker: its GPUs through the device plugin (e2e/test_device_plugin.py)
# The classic worker's GPUs under NVIDIA's device plugin: an H100 shared by time-slicing (4 replicas)
# and an A100 with pre-created MIG devices, the mixed MIG strategy exposing them by profile.
CLASSIC_INVENTORY: dict[str, Any] = {
    "gpus": [
        {"profile": "h100-sxm5-80gb"},
        {
            "profile": "a100-sxm4-40gb",
            "mig": "static",
            "migDevices": [
                {"profile": "1g.5gb", "start": 0},
                {"profile": "1g.5gb", "start": 1},
                {"profile": "3g.20gb", "start": 4},
            ],
        },
    ]
}


def _time_slicing(replicas: int) -> dict[str, Any]:
    return {
        "version": "v1",
        "sharing": {"timeSlicing": {"resources": [{"name": "nvidia.com/gpu", "replicas": replicas}]}},
    }


# NVIDIA's chart's named configs: ts-4 by default, ts-2 where the node label asks for it.
CLASSIC_DEVICE_PLUGIN: dict[str, Any] = {
    "migStrategy": "mixed",
    "config": {"default": "ts-4", "map": {"ts-4": _time_slicing(4), "ts-2": _time_slicing(2)}},
}
MIG_INVENTORY = REPO / "examples" / "inventory" / "mixed-mig.yaml"
GPU_DRIVER = "gpu.nvidia.com"


def user_helm_args(values: Path | None, feature_gates: str) -> list[str]:
    """The user's values for helm, after ours: a values file, then each gate of FEATURE_GATES
    ("A=true,B=false") as --set featureGates.A=true; Helm merges maps, so the gates add to ours."""
    args = ["--values", str(values)] if values else []
    for name, on in gate_map(feature_gates).items():
        args += ["--set", f"featureGates.{name}={str(on).lower()}"]
    return args


def run(*cmd: str | Path, timeout: float = 600, input: bytes | None = None, check: bool = True) -> str:
    """Run a command; on failure raise with its output (which is otherwise only logged at debug)."""
    args = [str(c) for c in cmd]
    log.debug("$ %s", " ".join(args))
    proc = subprocess.run(args, input=input, capture_output=True, timeout=timeout)
    out = proc.stdout.decode(errors="replace")
    if check and proc.returncode != 0:
        raise RuntimeError(
            f"{' '.join(args)} failed ({proc.returncode}):\n{out}{proc.stderr.decode(errors='replace')}"
        )
    return out


def helm_binary() -> Path | str:
    """Ours (make tools builds it into .tools/bin), else one on PATH."""
    helm = HELM if HELM.exists() else shutil.which("helm")
    if not helm:
        raise RuntimeError("helm not found: make tools (builds it into .tools/bin)")
    return helm


def mig_inventory(release: Release) -> dict[str, Any]:
    """The MIG worker's inventory: without partitionable devices (1.32), its static-MIG GPUs only."""
    doc: dict[str, Any] = yaml.safe_load(MIG_INVENTORY.read_text())
    if not partitionable_devices(release):
        doc["gpus"] = [g for g in doc["gpus"] if g.get("mig") != "dynamic"]
    return doc


class KindCluster:
    def __init__(self, release: Release, root: Path = ROOT, node_image: str | None = None) -> None:
        """node_image: a public kindest/node image (it has kindnetd) instead of ours (make kind-images)."""
        self.release = release
        self.name = f"dra-fake-{release.short}"
        self.dir = root / release.short
        self.node_image = node_image or f"{NODE_IMAGE}:{release.tag}"
        self.offline = node_image is None

    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    # ---- queries --------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.name in run(KIND, "get", "clusters").split()

    def nodes(self) -> list[str]:
        return sorted(run(KIND, "get", "nodes", "--name", self.name).split())

    def workers(self) -> list[str]:
        """Worker node names in kind's order (worker, worker2, ...)."""
        names = [n for n in self.nodes() if not n.endswith("-control-plane")]
        return sorted(names, key=lambda n: int(n.rsplit("worker", 1)[1] or 1))

    def classic_workers(self) -> list[str]:
        out = self.kubectl("get", "nodes", "-l", f"{POOL_LABEL}={CLASSIC}", "-o", "name")
        return [line.removeprefix("node/") for line in out.split()]

    def kubectl(self, *args: str, timeout: float = 120) -> str:
        return run(self.kubectl_path(), "--kubeconfig", self.kubeconfig, *args, timeout=timeout)

    def kubectl_path(self) -> Path:
        return ROOT / "k8s" / self.release.tag / "bin" / "kubectl"

    # ---- lifecycle ------------------------------------------------------------------------
    def up(
        self,
        workers: int = 2,
        inventory: Path | None = None,
        values: Path | None = None,
        feature_gates: str = "",
    ) -> None:
        """`values` and `feature_gates`: the user's, on top of ours (`helm install -f ours -f values
        --set featureGates.A=true`); the local cluster takes the same (e2e/localcluster/values.py)."""
        t0 = time.monotonic()
        images = (
            (self.node_image, ":".join(DRIVER_IMAGE), SHELL_IMAGE, NVML_CONSUMERS_IMAGE)
            if self.offline
            else (":".join(DRIVER_IMAGE), SHELL_IMAGE, NVML_CONSUMERS_IMAGE)
        )
        for image in images:
            if subprocess.run(["docker", "image", "inspect", image], capture_output=True).returncode:
                raise RuntimeError(f"image {image} is missing: make kind-images K8S={self.release.short}")
        self.dir.mkdir(parents=True, exist_ok=True)
        labels = [self._worker_labels(i, inventory) for i in range(1, workers + 1)]
        scheduler_dir = self.dir / "scheduler"
        scheduler_dir.mkdir(exist_ok=True)
        (scheduler_dir / "kube-scheduler.yaml").write_text(scheduler_file())
        config = kind_config(
            self.release,
            labels,
            HostFacts.detect(),
            offline=self.offline,
            scheduler_dir=scheduler_dir.resolve(),
        )
        config_path = self.dir / "kind-config.yaml"
        config_path.write_text(dump(config))
        if self.exists():
            log.info("deleting the existing cluster %s", self.name)
            self.down()
        log.info("kind create cluster %s (%s, %d worker(s))", self.name, self.node_image, workers)
        run(
            KIND,
            "create",
            "cluster",
            "--name",
            self.name,
            "--image",
            self.node_image,
            "--config",
            config_path,
            "--kubeconfig",
            self.kubeconfig,
            "--wait",
            "0s",
            timeout=600,
        )
        self.wait_nodes_ready()
        if self.offline:  # public node images route with kindnetd
            self.add_routes()
        log.info("loading images %s, %s, %s", ":".join(DRIVER_IMAGE), SHELL_IMAGE, NVML_CONSUMERS_IMAGE)
        run(
            KIND,
            "load",
            "docker-image",
            "--name",
            self.name,
            ":".join(DRIVER_IMAGE),
            SHELL_IMAGE,
            NVML_CONSUMERS_IMAGE,
            timeout=600,
        )
        self.helm_install(inventory, workers, user=user_helm_args(values, feature_gates))
        self.wait_slices()
        log.info("cluster %s ready in %.0fs", self.name, time.monotonic() - t0)

    def down(self) -> None:
        run(KIND, "delete", "cluster", "--name", self.name, timeout=300)

    def _worker_labels(self, index: int, inventory: Path | None) -> dict[str, str]:
        if inventory:
            return {POOL_LABEL: "custom"}
        return {POOL_LABEL: {2: "mig", 3: CLASSIC}.get(index, "h100")}

    def wait_nodes_ready(self, timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while True:
            nodes = json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
            not_ready = [
                n["metadata"]["name"]
                for n in nodes
                if not any(
                    c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", [])
                )
                or not n["spec"].get("podCIDR")
            ]
            if nodes and not not_ready:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes not Ready after {timeout:.0f}s: {not_ready}")
            time.sleep(1)

    def add_routes(self) -> None:
        """A route on every node to every other node's pod CIDR (what kindnetd would do)."""
        nodes = json.loads(self.kubectl("get", "nodes", "-o", "json"))["items"]
        table = [
            (
                n["metadata"]["name"],
                next(a["address"] for a in n["status"]["addresses"] if a["type"] == "InternalIP"),
                n["spec"]["podCIDR"],
            )
            for n in nodes
        ]
        for node, _, _ in table:
            for other, ip, cidr in table:
                if other != node:
                    run("docker", "exec", node, "ip", "route", "replace", cidr, "via", ip)

    # ---- the driver -----------------------------------------------------------------------
    def helm_values(self, inventory: Path | None, workers: int) -> dict[str, Any]:
        values: dict[str, Any] = {
            "image": {"repository": DRIVER_IMAGE[0], "tag": DRIVER_IMAGE[1], "pullPolicy": "Never"},
            **copy.deepcopy(TEST_BED_VALUES),  # as the local cluster's
            # the tests scrape :9400 from the node containers (gpu_metrics), not from a Prometheus
            "networkPolicy": {"extraFrom": [{"ipBlock": {"cidr": "0.0.0.0/0"}}]},
        }
        if inventory:
            values["inventory"] = {"config": yaml.safe_load(inventory.read_text())}
        elif workers >= 2:
            values["nodePools"] = [
                {
                    "name": "mig",
                    "nodeSelector": {POOL_LABEL: "mig"},
                    "inventory": {"config": mig_inventory(self.release)},
                }
            ]
            if workers >= 3:
                values["nodePools"].append(
                    {
                        "name": CLASSIC,
                        "nodeSelector": {POOL_LABEL: CLASSIC},
                        "inventory": {"config": CLASSIC_INVENTORY},
                        "mode": "device-plugin",
                    }
                )
                values["devicePlugin"] = CLASSIC_DEVICE_PLUGIN
        return values

    def helm_install(
        self, inventory: Path | None, workers: int, *, upgrade: bool = False, user: Sequence[str] = ()
    ) -> None:
        """`helm install` (or `upgrade`) of charts/dra-fake, as a user would run it."""
        values_path = self.dir / "values.yaml"
        values_path.write_text(yaml.safe_dump(self.helm_values(inventory, workers), sort_keys=False))
        self.helm(
            "upgrade" if upgrade else "install",
            RELEASE,
            str(REPO / "charts" / "dra-fake"),
            "--namespace",
            NAMESPACE,
            *([] if upgrade else ["--create-namespace"]),
            "--values",
            str(values_path),
            *user,
            "--wait",
            "--timeout",
            "5m",
        )

    def helm(self, *args: str, timeout: float = 600) -> str:
        log.info("helm %s", " ".join(a for a in args[:3]))
        return run(helm_binary(), "--kubeconfig", self.kubeconfig, *args, timeout=timeout)

    def wait_slices(self, timeout: float = 180) -> None:
        """Every DRA worker has published its GPU ResourceSlices (the classic one registers with its
        kubelet instead: helm's --wait waited for its plugin)."""
        deadline = time.monotonic() + timeout
        workers = set(self.workers()) - set(self.classic_workers())
        while True:
            out = self.kubectl(
                "get",
                "resourceslices",
                "-o",
                'jsonpath={range .items[*]}{.spec.driver} {.spec.nodeName}{"\\n"}{end}',
            )
            published = {line.split()[1] for line in out.splitlines() if line.split()[:1] == [GPU_DRIVER]}
            if workers <= published:
                return
            if time.monotonic() > deadline:
                pods = self.kubectl("get", "pods", "-A", "-o", "wide")
                raise RuntimeError(
                    f"no ResourceSlices from {sorted(workers - published)} after {timeout:.0f}s\n{pods}"
                )
            time.sleep(1)
