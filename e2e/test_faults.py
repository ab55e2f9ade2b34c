"""Simulated GPU faults end to end (issue 14; docs/faults.md): `dra-fake fault inject` creates a
GpuFault, the node's GPU plugin (NVMLDeviceHealthCheck on) taints the device in its ResourceSlice
as NVIDIA's plugin does, the scheduler keeps new claims off it unless they tolerate the taint, the
kubelet's device health stream marks the running pod's device Unhealthy, and `fault clear` (with
recovery `clear`) makes the device schedulable and healthy again."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import published
from e2e.faultcli import GROUP, PLURAL, VERSION, fault_cli, inject
from e2e.kube import Kube, poll
from e2e.testbed import Exec, TestBed
from e2e.workloads import devices_of, pod, running_on_one_gpu, template, unschedulable

XID_TAINT = "gpu.nvidia.com/xid"


def taints(kube: Kube, node: str, device: str) -> list[dict[str, Any]]:
    return list(published(kube, node)[device].get("taints") or [])


def fault_status(kube: Kube, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = kube.custom.get_cluster_custom_object(GROUP, VERSION, PLURAL, name)  # type: ignore[assignment]
    return dict(obj.get("status") or {})


def uuid_template(name: str, uuid: str, tolerate: bool = False) -> str:
    """A claim for the one GPU with this UUID; optionally tolerating NVIDIA's Xid taint."""
    doc = yaml.safe_load(
        template(name, "gpu.nvidia.com", selector=f'device.attributes["gpu.nvidia.com"].uuid == "{uuid}"')
    )
    if tolerate:
        doc["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
            {"key": XID_TAINT, "operator": "Exists", "effect": "NoSchedule"}
        ]
    return yaml.safe_dump(doc)


def health_of(kube: Kube, ns: str, name: str) -> list[tuple[str, str]]:
    """(resourceID, health) of every device of the pod's first container, from its status."""
    statuses = kube.pod(ns, name)["status"].get("containerStatuses") or [{}]
    return [
        (r["resourceID"], r["health"])
        for entry in statuses[0].get("allocatedResourcesStatus") or []
        for r in entry.get("resources") or []
    ]


@pytest.mark.needs("device-taints")
def test_xid_taints_the_device_new_claims_avoid_it_and_clear_restores_it(
    kube: Kube, kubeconfig: Path, ns: str, full_gpu_node: str, faults: list[str]
) -> None:
    device = sorted(published(kube, full_gpu_node), key=lambda n: int(n.split("-")[1]))[-1]
    uuid = published(kube, full_gpu_node)[device]["attributes"]["uuid"]["string"]
    name = f"{ns}-xid"
    faults.append(name)
    out = inject(kubeconfig, full_gpu_node, uuid, "xid", name, "--xid", "79")
    assert out == f"gpufault.{GROUP}/{name} created\n"

    tainted = poll(f"{device} tainted", lambda: taints(kube, full_gpu_node, device), 60)
    assert [{k: v for k, v in t.items() if k != "timeAdded"} for t in tainted] == [
        {"key": XID_TAINT, "value": "79", "effect": "NoSchedule"}
    ]
    status = poll(
        "fault Active",
        lambda: fault_status(kube, name).get("phase") == "Active" and fault_status(kube, name),
        30,
    )
    assert status["message"] == f"on {device}" and status["node"] == full_gpu_node
    listed = fault_cli(kubeconfig, "list")
    assert any(
        line.split()[:6] == [name, full_gpu_node, uuid, "xid", "xid=79", "Active"]
        for line in listed.splitlines()
    ), listed
    others = [n for n, d in published(kube, full_gpu_node).items() if n != device and d.get("taints")]
    assert not others, f"an Xid taints only its device, not {others}"

    kube.apply_yaml(uuid_template("plain", uuid), ns)
    kube.create(pod("avoids", "plain", full_gpu_node), ns)
    assert "cannot allocate all claims" in unschedulable(kube, ns, "avoids")
    kube.apply_yaml(uuid_template("tolerant", uuid, tolerate=True), ns)
    kube.create(pod("tolerates", "tolerant", full_gpu_node), ns)
    kube.wait_running(ns, "tolerates")
    assert devices_of(kube, ns, "tolerates") == [device]

    assert (
        fault_cli(kubeconfig, "clear", "--node", full_gpu_node, "--device", uuid)
        == f"gpufault.{GROUP}/{name} deleted\n"
    )
    poll(f"{device} untainted", lambda: not taints(kube, full_gpu_node, device), 60)
    kube.delete_pod(ns, "tolerates")
    kube.wait_running(ns, "avoids")
    assert devices_of(kube, ns, "avoids") == [device]


@pytest.mark.needs("device-health")
def test_a_lost_gpu_shows_unhealthy_in_the_pod_status_until_cleared(
    kube: Kube, kubeconfig: Path, ns: str, full_gpu_node: str, faults: list[str]
) -> None:
    device = running_on_one_gpu(kube, ns, full_gpu_node, "holder")
    healthy = poll("device health in the pod status", lambda: health_of(kube, ns, "holder"), 60)
    [(resource_id, health)] = healthy
    # The kubelet names a device by its first CDI device ID (our per-claim spec).
    assert resource_id.startswith("k8s.gpu.nvidia.com/claim=") and health == "Healthy", healthy

    name = f"{ns}-lost"
    faults.append(name)
    inject(kubeconfig, full_gpu_node, device, "gpu-lost", name)
    poll(
        "the pod's device Unhealthy",
        lambda: health_of(kube, ns, "holder") == [(resource_id, "Unhealthy")],
        60,
    )
    statuses = kube.pod(ns, "holder")["status"]["containerStatuses"][0]["allocatedResourcesStatus"]
    assert statuses[0]["name"] == "claim:dev", json.dumps(statuses)
    assert kube.pod(ns, "holder")["status"]["phase"] == "Running"  # NoSchedule: the pod stays

    fault_cli(kubeconfig, "clear", "--node", full_gpu_node)
    poll(
        "the pod's device Healthy again",
        lambda: health_of(kube, ns, "holder") == [(resource_id, "Healthy")],
        60,
    )
    poll(
        "no gpu-lost taint left",
        lambda: not any(d.get("taints") for d in published(kube, full_gpu_node).values()),
        60,
    )


def tolerating_template(name: str, seconds: int) -> str:
    doc = yaml.safe_load(template(name, "gpu.nvidia.com"))
    doc["spec"]["spec"]["devices"]["requests"][0]["exactly"]["tolerations"] = [
        {"key": XID_TAINT, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": seconds}
    ]
    return yaml.safe_dump(doc)


@pytest.mark.needs("device-taints", "noexecute-toleration")
def test_a_noexecute_fault_evicts_the_pods_using_the_device_after_their_toleration(
    kube: Kube, kubeconfig: Path, ns: str, full_gpu_node: str, faults: list[str]
) -> None:
    """Kubernetes' own device-taint-eviction-controller (kube-controller-manager) does the evicting."""
    kube.apply_yaml(template("one", "gpu.nvidia.com"), ns)
    kube.apply_yaml(tolerating_template("patient", 30), ns)
    kube.create(pod("evicted", "one", full_gpu_node), ns)
    kube.create(pod("tolerant", "patient", full_gpu_node), ns)
    kube.wait_running(ns, "evicted")
    kube.wait_running(ns, "tolerant")
    injected: dict[str, float] = {}  # when each pod's fault was made (monotonic)
    for holder in ("evicted", "tolerant"):
        [device] = devices_of(kube, ns, holder)
        faults.append(f"{ns}-{holder}")
        # The taint comes after the fault object: an eviction seen much less than 30 s after this
        # moment came before the toleration ran out, however long the other eviction took.
        injected[holder] = time.monotonic()
        inject(
            kubeconfig, full_gpu_node, device, "xid", f"{ns}-{holder}", "--xid", "79", "--effect", "NoExecute"
        )

    def being_deleted(name: str) -> bool:
        return not kube.pod_exists(ns, name) or bool(kube.pod(ns, name)["metadata"].get("deletionTimestamp"))

    evicted_after: dict[str, float] = {}  # seconds from each pod's fault to its eviction seen

    def both_evicted() -> bool:
        for name in set(injected) - set(evicted_after):
            if being_deleted(name):
                evicted_after[name] = time.monotonic() - injected[name]
        return len(evicted_after) == 2

    poll("both pods evicted", both_evicted, 120)
    assert evicted_after["evicted"] < 60, evicted_after
    # The taint's timeAdded, which the 30 s count from, is a whole second (metav1.Time): up to 1 s
    # before the moment taken here.
    assert evicted_after["tolerant"] >= 29, (
        f"evicted before its tolerationSeconds (30) ran out: {evicted_after}"
    )


def test_nvidia_smi_in_the_pod_shows_the_faults(
    kube: Kube, kubeconfig: Path, ns: str, full_gpu_node: str, faults: list[str], bed: TestBed
) -> None:
    """One source of truth: the faults the plugin applies are what the running container's
    nvidia-smi reports (temperature, slowdown, ECC counters, a lost GPU), whatever the gate."""
    kube.apply_yaml(template("one", "gpu.nvidia.com"), ns)
    idle = pod("smi", "one", full_gpu_node)  # no load: the idle temperature (docs/observability.md)
    idle["metadata"]["annotations"] = {"dra-fake.dev/simulated-gpu-utilization": "0"}
    kube.create(idle, ns)
    kube.wait_running(ns, "smi")
    [device] = devices_of(kube, ns, "smi")
    view = bed.container(ns, "smi")
    query = (
        "--query-gpu=temperature.gpu,clocks_event_reasons.hw_thermal_slowdown,"
        "ecc.errors.uncorrected.volatile.total"
    )

    def smi() -> str:
        result = view.nvidia_smi(query, "--format=csv,noheader")
        return result.output if result.code == 0 else f"exit {result.code}: {result.output}"

    assert poll("the idle H100's 29 C", lambda: smi() == "29, Not Active, 0\n" or None, 30)
    for kind, extra in (
        ("thermal", ["--temperature", "97"]),
        ("ecc", ["--ecc-type", "double", "--ecc-count", "2"]),
    ):
        faults.append(f"{ns}-{kind}")
        inject(kubeconfig, full_gpu_node, device, kind, f"{ns}-{kind}", *extra)
    poll("nvidia-smi shows the heat and the ECC errors", lambda: smi() == "97, Active, 2\n", 60)

    faults.append(f"{ns}-lost")
    inject(kubeconfig, full_gpu_node, device, "gpu-lost", f"{ns}-lost")

    def lost_exit() -> Exec | None:
        result = view.nvidia_smi("-L")
        return result if result.code == 15 else None

    lost = poll("nvidia-smi fails as on a lost GPU", lost_exit, 60)
    assert "GPU is lost.  Reboot the system to recover this GPU" in lost.output, lost.output

    fault_cli(kubeconfig, "clear", "--node", full_gpu_node, "--device", device)
    poll("nvidia-smi back to normal", lambda: smi() == "29, Not Active, 0\n", 60)


def test_chaos_injects_real_faults_and_clears_them(
    kube: Kube, kubeconfig: Path, full_gpu_node: str, tmp_path: Path
) -> None:
    log = tmp_path / "chaos.jsonl"
    fault_cli(
        kubeconfig,
        "chaos",
        "--nodes",
        full_gpu_node,
        "--rate",
        "240",
        "--for",
        "2",
        "--duration",
        "5",
        "--seed",
        "11",
        "--log",
        str(log),
    )
    records = [json.loads(line) for line in log.read_text().splitlines()]
    injected = [r for r in records if r["action"] == "inject"]
    assert [r["action"] for r in records] == ["start"] + ["inject"] * 8 + ["clear"] * 8 + ["end"]
    devices = set(published(kube, full_gpu_node))
    assert all(r["nodeName"] == full_gpu_node and r["device"] in devices for r in injected), injected
    assert {r["name"] for r in records if r["action"] == "clear"} == {r["name"] for r in injected}
    left = kube.custom.list_cluster_custom_object(
        GROUP, VERSION, PLURAL, label_selector="dra-fake.dev/created-by=chaos"
    )
    assert not left["items"]  # type: ignore[index]
