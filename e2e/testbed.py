"""Where the e2e suite runs: the local harness, a kind cluster of ours, or any KUBECONFIG cluster.

This module is the protocol: what a test bed offers (TestBed), what a container got (Container), and
the assertions every bed shares (what a container must see). The beds: e2e/harnessbed.py (the local
harness), e2e/kindbed.py (a kind cluster of ours, or any other cluster through its API server only);
conftest's `bed` fixture picks one.

Tests ask the test bed for what differs between them:
- `workers`: the GPU nodes in topology order (first: 8 x H100; second: MIG GPUs);
- `container(...)`: what a container got: its environment, `nvidia-smi`, a directory listing. On
  kind that is a real container (exec through the API server); on the harness, which runs no
  containers, it is what the kubelet's CDI library injected (the harness's pod record), with our
  nvidia-smi (the mounted binary) run against the mounted files;
- node files (CDI specs, checkpoints) and node processes (kill a plugin or an IMEX daemon, restart
  the kubelet);
- `driver_namespace`: where the driver's ComputeDomain daemons run.

Tests declare what they need with `@pytest.mark.needs(...)`; conftest deselects (does not skip)
the tests a bed or the server cannot run, so a skip in CI is always a failure.
"""

from __future__ import annotations

import contextlib
import re
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from dra_fake.fleet.workload import WorkloadProfile
from e2e.kube import Kube, poll
from e2e.localcluster.values import Values

GPU_DRIVER = "gpu.nvidia.com"
CD_DRIVER = "compute-domain.nvidia.com"
# Paths on a real node (kind): the chart's defaults.
NODE_CDI_ROOT = "/var/run/cdi"
NODE_PLUGINS_DIR = "/var/lib/kubelet/plugins"


@dataclass(frozen=True)
class Exec:
    code: int
    output: str


class Container(ABC):
    @abstractmethod
    def env(self) -> dict[str, str]:
        """Environment variables the container runtime set (CDI edits included)."""

    @abstractmethod
    def run(self, *argv: str) -> Exec:
        """Run `nvidia-smi ...` or `ls ...` in the container (exit code, stdout + stderr)."""

    def nvidia_smi(self, *args: str) -> Exec:
        return self.run("nvidia-smi", *args)


class TestBed(ABC):
    name: str
    capabilities: frozenset[str]
    driver_namespace: str

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    @property
    def workers(self) -> list[str]:
        """GPU nodes, first the 8 x H100 one, then the MIG one (e2e topology, docs/kind.md)."""
        nodes = {s["spec"]["nodeName"] for s in self.kube.slices(driver=GPU_DRIVER)}
        return sorted(nodes, key=self._order)

    def _order(self, node: str) -> tuple[int, str]:
        return (0, node)

    @abstractmethod
    def container(self, ns: str, pod: str, container: str = "ctr") -> Container: ...

    @abstractmethod
    def cdi_devices(self, ns: str, pod: str) -> dict[str, list[str]]:
        """Per container with any, the CDI device IDs the kubelet gave the runtime (GetResources)."""

    @abstractmethod
    def read_node_file(self, node: str, path: str) -> str | None:
        """A file on the node, by its path there (NODE_CDI_ROOT, NODE_PLUGINS_DIR); None if absent."""

    @abstractmethod
    def write_node_file(self, node: str, path: str, content: str) -> None: ...

    @abstractmethod
    def node_files(self, node: str, directory: str) -> list[str]:
        """Names in a directory of the node."""

    @abstractmethod
    def crash_plugin(
        self, node: str, driver: str = GPU_DRIVER, meanwhile: Callable[[], None] | None = None
    ) -> None:
        """SIGKILL the driver's kubelet plugin on the node, run `meanwhile` (e.g. delete a pod while
        it is down: on kind the kubelet may have restarted it by then), wait until it serves again."""

    @abstractmethod
    def plugin_values(self, node: str, values: Values) -> contextlib.AbstractContextManager[None]:
        """For the block, the node's GPU plugin runs with these chart values on top of the bed's, then
        as before. The harness restarts that node's plugin; on kind the chart's values are the
        release's, so `helm upgrade --reuse-values` rolls every node's plugins, `helm rollback`
        after. Returns once the new plugins are Ready; their slices may still be on the way."""

    @abstractmethod
    def plugin_checkpoint(self, node: str, driver: str = GPU_DRIVER) -> dict[str, Any]:
        """Claim UID -> entry of the driver's checkpoint on the node, its journal applied."""

    @abstractmethod
    def gpu_metrics(self, node: str) -> str:
        """The node's dcgm-exporter-compatible /metrics, as a scrape of it gets them."""

    @abstractmethod
    def plugin_thread_cpus(self, node: str, driver: str = GPU_DRIVER) -> list[str]:
        """The CPUs each thread of the driver's kubelet plugin on the node may run on
        (`Cpus_allowed_list` of /proc/<pid>/task/<tid>/status, one entry per thread)."""

    @abstractmethod
    def crash_imex_daemon(self, node: str, cd_uid: str) -> None:
        """SIGKILL the IMEX daemon of a ComputeDomain on the node (it is restarted)."""

    @abstractmethod
    def stop_controller(self) -> None: ...

    @abstractmethod
    def start_controller(self) -> None: ...

    def start_kwok(self, profile: WorkloadProfile) -> None:
        """KWOK's controller playing the kubelet of the fleet's nodes (labelled dra-fake.dev/fleet)
        with `profile`'s Stages, replacing a running one: the harness's process, on kind a Deployment
        of the offline image (e2e/kindcluster/kwok.py). Returns once it manages the nodes."""
        raise NotImplementedError(f"no KWOK on the {self.name} test bed")

    def stop_kwok(self) -> None:
        raise NotImplementedError(f"no KWOK on the {self.name} test bed")

    def restart_kubelet(self, node: str) -> None:
        """Restart the node's kubelet (the harness's node process; on kind the node's kubelet
        service): at start its DRA manager deletes every ResourceSlice of the node."""
        raise NotImplementedError(f"no kubelet of ours on the {self.name} test bed")

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and let it start again (the harness's process; on kind the control
        plane's static pod, whose container the kubelet restarts); returns once it serves."""
        raise NotImplementedError(f"no API server of ours on the {self.name} test bed")


# ---- what a container must see ------------------------------------------------------------------

UUID_RE = re.compile(r"\(UUID: ((?:GPU|MIG)-[^)]+)\)")


def pod_claims(pod: dict[str, Any], container: str | None = None) -> list[str]:
    """ResourceClaim names a pod (or one of its containers) uses: named, generated from a template, or
    created by the scheduler for its extended resources."""
    generated = {
        s["name"]: s.get("resourceClaimName") for s in pod["status"].get("resourceClaimStatuses") or []
    }
    wanted = None
    if container is not None:
        [ctr] = [c for c in pod["spec"]["containers"] if c["name"] == container]
        wanted = {c["name"] for c in (ctr.get("resources") or {}).get("claims") or []}
    names = []
    for ref in pod["spec"].get("resourceClaims") or []:
        if wanted is not None and ref["name"] not in wanted:
            continue
        name = ref.get("resourceClaimName") or generated.get(ref["name"])
        if name:
            names.append(name)
    extended = pod["status"].get("extendedResourceClaimStatus")  # `nvidia.com/gpu: N` served by DRA
    if extended and any(container in (None, m["containerName"]) for m in extended["requestMappings"]):
        names.append(extended["resourceClaimName"])
    return names


def expected_gpus(kube: Kube, ns: str, claims: list[str]) -> tuple[set[str], set[str], int]:
    """(GPU UUIDs, known MIG UUIDs, MIG device count) that nvidia-smi -L must show for the claims."""
    results = [
        r
        for name in claims
        for r in kube.claim(ns, name)["status"]["allocation"]["devices"]["results"]
        if r["driver"] == GPU_DRIVER
    ]

    def published() -> dict[tuple[str, str], dict[str, Any]] | None:
        # Polled: a kubelet wipes a node's slices when its plugin re-registers (restart, upgrade),
        # and the plugin publishes them again.
        devices = {
            (s["spec"]["pool"]["name"], d["name"]): d
            for s in kube.slices(driver=GPU_DRIVER)
            for d in s["spec"]["devices"]
        }
        return devices if all((r["pool"], r["device"]) in devices for r in results) else None

    devices = poll("the allocated devices in ResourceSlices", published, 60)
    gpus: set[str] = set()
    migs: set[str] = set()
    mig_count = 0
    for result in results:
        device = devices[(result["pool"], result["device"])]
        attrs = {k: next(iter(v.values())) for k, v in device["attributes"].items()}
        if attrs.get("type") == "mig":
            mig_count += 1
            gpus.add(str(attrs["parentUUID"]))
            if "uuid" in attrs:  # pre-created; a dynamic MIG device gets its UUID at prepare
                migs.add(str(attrs["uuid"]))
        else:
            gpus.add(str(attrs["uuid"]))
    return gpus, migs, mig_count


def assert_sees_its_gpus(bed: TestBed, ns: str, pod_name: str, container: str = "ctr") -> str:
    """Inside the container: `nvidia-smi -L` names exactly the GPUs and MIG devices allocated to its
    claims, and the environment of the claims' CDI specs is set. Returns what nvidia-smi printed."""
    kube = bed.kube
    pod = kube.pod(ns, pod_name)
    claims = pod_claims(pod, container)
    gpus, migs, mig_count = expected_gpus(kube, ns, claims)
    view = bed.container(ns, pod_name, container)
    result = view.nvidia_smi("-L")
    assert result.code == 0, f"nvidia-smi -L in {ns}/{pod_name}/{container}: {result.output}"
    printed = UUID_RE.findall(result.output)
    assert {u for u in printed if u.startswith("GPU-")} == gpus, result.output
    printed_migs = [u for u in printed if u.startswith("MIG-")]
    assert len(printed_migs) == mig_count and migs <= set(printed_migs), result.output
    assert_device_nodes(bed, view, gpu_minors(kube, ns, claims))
    if "node" in bed.capabilities:
        env = view.env()
        node = pod["spec"]["nodeName"]
        for name in claims:
            uid = kube.claim(ns, name)["metadata"]["uid"]
            text = bed.read_node_file(node, f"{NODE_CDI_ROOT}/k8s.gpu.nvidia.com-claim_{uid}.yaml")
            assert text, f"no CDI spec of claim {name} on {node}"
            spec = yaml.safe_load(text)
            wanted = list(spec.get("containerEdits", {}).get("env", []))
            for device in spec["devices"]:
                wanted += device.get("containerEdits", {}).get("env", [])
            missing = [e for e in wanted if env.get(e.split("=", 1)[0]) != e.split("=", 1)[1]]
            assert not missing, f"CDI environment missing in {ns}/{pod_name}/{container}: {missing}"
    return result.output


def gpu_minors(kube: Kube, ns: str, claims: list[str]) -> set[int]:
    """Minors of the GPUs the claims were allocated (a MIG device's parent): device names are
    gpu-<minor>[-mig-...] (docs/inventory.md)."""
    return {
        int(r["device"].split("-")[1])
        for name in claims
        for r in kube.claim(ns, name)["status"]["allocation"]["devices"]["results"]
        if r["driver"] == GPU_DRIVER
    }


def nvidia_nodes(view: Container) -> set[str]:
    listing = view.run("ls", "/dev")
    return {n for n in listing.output.split() if n.startswith("nvidia")}


def assert_device_nodes(bed: TestBed, view: Container, minors: set[int]) -> None:
    """NVIDIA's device nodes, exactly the allocated GPUs' (these hosts have no NVIDIA driver:
    docs/prepare.md); in a real container, opening one reaches no device."""
    wanted = {f"nvidia{m}" for m in minors} | {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}
    assert nvidia_nodes(view) == wanted
    if "kind" in bed.capabilities:
        opened = view.run("cat", f"/dev/nvidia{min(minors)}")
        assert opened.code != 0 and "No such device or address" in opened.output, opened.output


def assert_sees_no_gpu(bed: TestBed, ns: str, pod_name: str, container: str) -> None:
    """A container without a claim has no nvidia-smi, no device node and none of the driver's
    environment."""
    view = bed.container(ns, pod_name, container)
    result = view.nvidia_smi("-L")
    assert result.code == 127, f"{container} without a claim ran nvidia-smi: {result.output}"
    assert nvidia_nodes(view) == set()
    leaked = [k for k in view.env() if k.startswith(("NVIDIA_", "DRA_FAKE_"))]
    assert not leaked, f"{container} without a claim has {leaked}"


def cpus_allowed(status: str) -> str:
    """The `Cpus_allowed_list` line of a /proc status file."""
    return next(
        line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list:")
    )
