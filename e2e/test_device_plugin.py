"""Device-plugin mode on a real kubelet (issue 16; docs/classic-requests.md): kind's third worker
runs `dra-fake device-plugin` from the chart (pool `classic`): an H100 shared by time-slicing with
4 replicas and an A100 with pre-created MIG devices under the mixed strategy. The kubelet's device
manager advertises, allocates and admits; containerd starts the containers; NVIDIA's names, IDs and
env; nvidia-smi inside the pod; a GpuFault takes a device out of allocatable; the node label
nvidia.com/device-plugin.config switches the plugin's config.

The per-node config also runs on either bed as a process of the test machine against the real API
server, for a Node object of its own (no kubelet), with a stand-in for the kubelet's registration
(e2e/standin_kubelet.py): every registration it makes is seen (the harness's dra-kubelet has no
device manager)."""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from dra_fake.gpu.inventory import build_inventory, parse_config
from dra_fake.gpu.profiles import load_profiles
from e2e.faultcli import GROUP, PLURAL, VERSION, inject
from e2e.kindcluster.cluster import CLASSIC, CLASSIC_INVENTORY, POOL_LABEL
from e2e.kube import Kube, poll, workload_container
from e2e.localcluster.processes import spawn
from e2e.standin_kubelet import StandInKubelet
from e2e.testbed import TestBed

REPO = Path(__file__).resolve().parents[1]
CONFIG_LABEL = "nvidia.com/device-plugin.config"
kind_classic = pytest.mark.needs("device-plugin")


@pytest.fixture(scope="module")
def classic(kube: Kube) -> str:
    [node] = [n.metadata.name for n in kube.core.list_node(label_selector=f"{POOL_LABEL}={CLASSIC}").items]
    return str(node)


def allocatable(kube: Kube, node: str) -> dict[str, str]:
    status = kube.core.read_node(node).status
    return {k: v for k, v in (status.allocatable or {}).items() if k.startswith("nvidia.com/")}


def gpu_pod(name: str, node: str, resource: str = "nvidia.com/gpu", count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
            "terminationGracePeriodSeconds": 1,
            "containers": [workload_container() | {"resources": {"limits": {resource: str(count)}}}],
        },
    }


@kind_classic
def test_the_node_advertises_nvidias_resources(kube: Kube, classic: str) -> None:
    want = {"nvidia.com/gpu": "4", "nvidia.com/mig-1g.5gb": "2", "nvidia.com/mig-3g.20gb": "1"}
    assert poll(
        "device-plugin resources allocatable", lambda: allocatable(kube, classic) == want and want, 120
    )
    assert not kube.slices(node=classic), "one mode per node: no ResourceSlices of the classic node"
    labels = kube.core.read_node(classic).metadata.labels
    assert labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"  # GFD beside the plugin
    assert (labels["nvidia.com/gpu.replicas"], labels["nvidia.com/gpu.sharing-strategy"]) == (
        "4",
        "time-slicing",
    )
    assert labels["nvidia.com/mig.strategy"] == "mixed" and labels["nvidia.com/mig-1g.5gb.count"] == "2"


@kind_classic
def test_time_slicing_four_pods_share_the_gpu_and_a_fifth_pends(
    kube: Kube, bed: TestBed, ns: str, classic: str
) -> None:
    for i in range(4):
        kube.create(gpu_pod(f"share-{i}", classic), ns)
    for i in range(4):
        kube.wait_running(ns, f"share-{i}", timeout=120)
    kube.create(gpu_pod("fifth", classic), ns)

    pending = poll("the fifth pod Unschedulable", lambda: kube.unschedulable(ns, "fifth"), 60)
    assert "Insufficient nvidia.com/gpu" in pending
    uuids = set()
    for i in range(4):
        ctr = bed.container(ns, f"share-{i}")
        uuids.add(ctr.env()["NVIDIA_VISIBLE_DEVICES"])
        listed = ctr.nvidia_smi("-L")
        assert listed.code == 0 and listed.output.startswith("GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-"), (
            listed.output
        )
        assert ctr.env()["NVIDIA_VISIBLE_DEVICES"] in listed.output
    assert len(uuids) == 1  # four replicas of one GPU


@kind_classic
def test_mixed_strategy_mig_resource(kube: Kube, bed: TestBed, ns: str, classic: str) -> None:
    kube.create(gpu_pod("mig", classic, "nvidia.com/mig-3g.20gb"), ns)
    kube.wait_running(ns, "mig", timeout=120)
    ctr = bed.container(ns, "mig")
    mig = ctr.env()["NVIDIA_VISIBLE_DEVICES"]
    assert mig.startswith("MIG-")
    listed = ctr.nvidia_smi("-L")
    assert listed.code == 0, listed.output
    assert listed.output.splitlines()[0].startswith("GPU 0: NVIDIA A100-SXM4-40GB (UUID: GPU-")
    assert listed.output.splitlines()[1].strip().startswith("MIG 3g.20gb") and mig in listed.output


@pytest.fixture
def fault(kube: Kube, bed: TestBed, classic: str) -> Iterator[list[str]]:
    """GpuFaults of a test; afterwards deleted and the device plugin restarted, since its health,
    like NVIDIA's, never turns healthy again while it runs."""
    names: list[str] = []
    yield names
    for name in names:
        with contextlib.suppress(ApiException):
            kube.custom.delete_cluster_custom_object(GROUP, VERSION, PLURAL, name)
    for pod in kube.core.list_namespaced_pod(
        bed.driver_namespace, label_selector="app.kubernetes.io/component=device-plugin",
        field_selector=f"spec.nodeName={classic}",
    ).items:  # fmt: skip
        kube.core.delete_namespaced_pod(pod.metadata.name, bed.driver_namespace)
    poll(
        "the MIG device allocatable again",
        lambda: allocatable(kube, classic).get("nvidia.com/mig-1g.5gb") == "2",
        120,
    )


@kind_classic
def test_an_unhealthy_device_leaves_allocatable(
    kube: Kube, kubeconfig: Path, ns: str, classic: str, fault: list[str]
) -> None:
    inventory = build_inventory(parse_config(CLASSIC_INVENTORY, "classic"), classic, load_profiles())
    mig = next(
        d for d in sorted(inventory.devices.values(), key=lambda d: d.name) if d.name.endswith("1g5gb-19-0")
    )
    name = f"{ns}-dp-xid"
    fault.append(name)
    inject(kubeconfig, classic, str(mig.uuid), "xid", name, "--xid", "79")
    got = poll(
        "one MIG device unhealthy",
        lambda: (a := allocatable(kube, classic)).get("nvidia.com/mig-1g.5gb") == "1" and a,
        60,
    )
    assert got["nvidia.com/gpu"] == "4"  # the H100's replicas untouched
    capacity = kube.core.read_node(classic).status.capacity or {}
    assert capacity["nvidia.com/mig-1g.5gb"] == "2"  # still there, not allocatable


def set_label(kube: Kube, node: str, value: str | None) -> None:
    kube.core.patch_node(node, {"metadata": {"labels": {CONFIG_LABEL: value}}})


@pytest.fixture
def relabel(kube: Kube, classic: str) -> Iterator[None]:
    """The classic node's config label removed afterwards, and its default config (ts-4) back."""
    yield
    set_label(kube, classic, None)
    poll(
        "the default config's 4 replicas",
        lambda: allocatable(kube, classic).get("nvidia.com/gpu") == "4",
        120,
    )


@kind_classic
def test_node_label_switches_the_config(kube: Kube, bed: TestBed, classic: str, relabel: None) -> None:
    """The chart's configs (e2e/kindcluster: default ts-4, and ts-2): the label picks ts-2, the
    plugin restarts with it and re-registers; an unknown name is refused and the config kept."""
    set_label(kube, classic, "ts-2")
    poll("ts-2's 2 replicas", lambda: allocatable(kube, classic).get("nvidia.com/gpu") == "2", 120)
    assert allocatable(kube, classic)["nvidia.com/mig-3g.20gb"] == "1"  # the rest of the node as it was
    set_label(kube, classic, "nope")
    [pod] = kube.core.list_namespaced_pod(
        bed.driver_namespace, label_selector="app.kubernetes.io/component=device-plugin",
        field_selector=f"spec.nodeName={classic}",
    ).items  # fmt: skip

    def refused() -> bool:
        log = kube.core.read_namespaced_pod_log(pod.metadata.name, bed.driver_namespace)
        return "specified config nope does not exist" in log

    poll("the plugin refusing the unknown config", refused, 60)
    assert allocatable(kube, classic).get("nvidia.com/gpu") == "2"


@pytest.fixture
def probe_node(kube: Kube) -> Iterator[str]:
    """A Node object no kubelet runs (tainted, so no pod is scheduled there)."""
    name = "device-plugin-probe"
    taint = {"key": "dra-fake.dev/device-plugin-probe", "effect": "NoSchedule"}
    kube.core.create_node({"metadata": {"name": name}, "spec": {"taints": [taint]}})
    try:
        yield name
    finally:
        kube.core.delete_node(name)


@pytest.mark.needs("node", reason="creates a Node object for the plugin it starts: a cluster of ours")
def test_node_label_picks_the_config_and_relabelling_switches(
    kubeconfig: Path, kube: Kube, probe_node: str, tmp_path: Path
) -> None:
    """`dra-fake device-plugin` for a node with 8 x H100 and three named configs: the label's config
    is what it registers; relabelling restarts it with the new one; an unknown name is logged with
    NVIDIA's config-manager's error and the config kept; without the label the `named` fallback
    applies."""
    node = probe_node
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "default").write_text("version: v1\n")
    replicas = "version: v1\nsharing: {timeSlicing: {%sresources: [{name: nvidia.com/gpu, replicas: %d}]}}\n"
    (configs / "ts-4").write_text(replicas % ("", 4))
    (configs / "shared-2").write_text(replicas % ("renameByDefault: true, ", 2))
    short = Path(tempfile.mkdtemp(prefix="dpl", dir="/tmp"))  # unix socket paths are short
    kubelet = StandInKubelet(short)
    set_label(kube, node, "ts-4")
    args = [
        sys.executable, "-m", "dra_fake", "device-plugin", f"--node-name={node}",
        f"--kubeconfig={kubeconfig}", f"--kubelet-socket={short / 'kubelet.sock'}",
        f"--kubelet-registrar-directory-path={short / 'registry'}", f"--cdi-root={short / 'cdi'}",
        f"--data-dir={short / 'data'}", f"--config-file-srcdir={configs}",
        "--fallback-strategies=named,single",
    ]  # fmt: skip
    proc = spawn("device-plugin-config-label", args, tmp_path / "logs", cwd=REPO)

    def registered(resource: str, devices: int) -> bool:
        proc.check_alive()
        return kubelet.registrations()[-1:] == [(resource, devices)]

    try:
        poll("ts-4: 8 GPUs x 4 replicas", lambda: registered("nvidia.com/gpu", 32), 90)
        set_label(kube, node, "shared-2")
        poll(
            "shared-2: nvidia.com/gpu.shared, 2 replicas", lambda: registered("nvidia.com/gpu.shared", 16), 90
        )
        count = len(kubelet.registrations())
        set_label(kube, node, "nope")
        poll(
            "config-manager's error for an unknown config",
            lambda: "specified config nope does not exist" in Path(proc.log).read_text(),
            60,
        )
        assert len(kubelet.registrations()) == count and registered("nvidia.com/gpu.shared", 16)
        set_label(kube, node, None)
        poll("no label: the config named default", lambda: registered("nvidia.com/gpu", 8), 90)
        assert proc.alive()  # restarted in place, never exited
    finally:
        proc.stop()
        kubelet.stop()
        shutil.rmtree(short, ignore_errors=True)
