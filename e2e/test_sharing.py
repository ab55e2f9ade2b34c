"""Shared GPUs (NVIDIA's ConsumableShares) end to end: the real scheduler packs claims asking for
memory of a shared GPU until it is full, rounds what they ask, and the plugin prepares each share
on its own (docs/sharing-design.md).

The first worker's plugin runs with the chart values `consumableShares: memory` and the gates for
the module (TestBed.plugin_values: on the harness that node's plugin restarted, on kind a `helm
upgrade` of the release and a `helm rollback` after), on Kubernetes 1.36+ (docs/sharing.md). Each
test pins its claims to one GPU by UUID, so they fill that GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dra_fake.gpu.workloads import ANNOTATION_MEMORY, ANNOTATION_UTILIZATION
from e2e.conftest import every_node_publishes, published
from e2e.kube import Kube, pod_with_claim_template, poll
from e2e.nvmlview import CONSUMERS, printed
from e2e.testbed import GPU_DRIVER, NODE_CDI_ROOT, TestBed, assert_sees_its_gpus
from e2e.workloads import consumer_pod, prepare_failure

pytestmark = pytest.mark.needs("node", "consumable-shares")

MIB, GIB = 1 << 20, 1 << 30
# What a node with shared GPUs needs (docs/sharing-design.md#11-switches-nvidias-names);
# TimeSlicingSettings for the time slice shares have to agree on.
SHARES_VALUES = {
    "featureGates": {"ConsumableShares": True, "TimeSlicingSettings": True},
    "consumableShares": "memory",
}
H100_MIB = 81559  # what the shared H100's memory capacity says


def shared_device(device: dict[str, Any]) -> bool:
    return bool(device.get("allowMultipleAllocations"))


def shared(devices: dict[str, dict[str, Any]]) -> bool:
    return all(map(shared_device, devices.values()))


def exclusive(devices: dict[str, dict[str, Any]]) -> bool:
    return not any(map(shared_device, devices.values()))


@pytest.fixture(scope="module")
def shared_node(bed: TestBed, kube: Kube, nodes: list[str]) -> Iterator[str]:
    """The first node (8 x H100) with its GPUs shared for the module, then as it was (on kind every
    node's plugin restarted: each node's devices exclusive again)."""
    node = nodes[0]
    with bed.plugin_values(node, SHARES_VALUES):
        poll(f"shared GPUs published on {node}", lambda: shared(published(kube, node)), 90)
        yield node
    poll("exclusive devices on every node", lambda: every_node_publishes(kube, nodes, exclusive), 90)


def gpu_uuid(kube: Kube, node: str, device: str) -> str:
    return str(published(kube, node)[device]["attributes"]["uuid"]["string"])


def share_template(
    name: str, uuid: str, memory: str, config: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    """Claims of `memory` of the GPU with `uuid` (a share: its device is shared)."""
    devices: dict[str, Any] = {
        "requests": [
            {
                "name": "gpu",
                "exactly": {
                    "deviceClassName": GPU_DRIVER,
                    "selectors": [
                        {"cel": {"expression": f'device.attributes["{GPU_DRIVER}"].uuid == "{uuid}"'}}
                    ],
                    "capacity": {"requests": {"memory": memory}},
                },
            }
        ]
    }
    if config:
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": devices}},
    }


def time_slicing(interval: str) -> list[dict[str, Any]]:
    parameters = {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}},
    }
    return [{"opaque": {"driver": GPU_DRIVER, "parameters": parameters}}]


def pod_on(
    kube: Kube,
    ns: str,
    name: str,
    template: str,
    node: str,
    annotations: dict[str, str] | None = None,
    nvml: bool = False,
) -> None:
    """nvml: a pod of the NVML consumers image (e2e/test_nvml.py)."""
    if nvml:
        kube.create(consumer_pod(name, template, node, annotations or {}), ns)
        return
    pod = pod_with_claim_template(name, template)
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    if annotations:
        pod["metadata"]["annotations"] = annotations
    kube.create(pod, ns)


def claim_of(kube: Kube, ns: str, pod: str) -> dict[str, Any]:
    name = poll(
        f"claim of {pod}",
        lambda: (kube.pod(ns, pod).get("status", {}).get("resourceClaimStatuses") or [{}])[0].get(
            "resourceClaimName"
        ),
        30,
    )
    return kube.claim(ns, name)


def result_of(claim: dict[str, Any]) -> dict[str, Any]:
    [result] = claim["status"]["allocation"]["devices"]["results"]
    return dict(result)


def unschedulable(kube: Kube, ns: str, pod: str) -> str:
    return poll(f"pod {pod} Unschedulable", lambda: kube.unschedulable(ns, pod), 60)


def spec_path(claim: dict[str, Any]) -> str:
    return f"{NODE_CDI_ROOT}/k8s.gpu.nvidia.com-claim_{claim['metadata']['uid']}.yaml"


def test_shares_pack_a_gpu_until_it_is_full_and_the_next_pends_with_the_schedulers_reason(
    kube: Kube, ns: str, bed: TestBed, shared_node: str
) -> None:
    """Claims of 20Gi on an H100 of 81559 MiB: three fit, the fourth pends (4 x 20480 MiB is more);
    each share is its own CDI device of the same GPU; unpreparing one leaves the others, and the
    pending pod gets the memory it freed."""
    uuid = gpu_uuid(kube, shared_node, "gpu-0")
    kube.create(share_template("share-20gi", uuid, "20Gi"), ns)
    for pod in ("a", "b", "c"):
        pod_on(kube, ns, pod, "share-20gi", shared_node)
    claims = {pod: claim_of(kube, ns, pod) for pod in ("a", "b", "c")}
    for pod in ("a", "b", "c"):
        kube.wait_running(ns, pod)
    pod_on(kube, ns, "d", "share-20gi", shared_node)
    assert "cannot allocate all claims" in unschedulable(kube, ns, "d")

    claims = {pod: kube.claim(ns, c["metadata"]["name"]) for pod, c in claims.items()}
    results = {pod: result_of(c) for pod, c in claims.items()}
    assert {r["device"] for r in results.values()} == {"gpu-0"}
    assert len({r["shareID"] for r in results.values()}) == 3
    assert {r["consumedCapacity"]["memory"] for r in results.values()} == {"20Gi"}
    for pod, claim in claims.items():
        assert_sees_its_gpus(bed, ns, pod)
        env = bed.container(ns, pod).env()
        assert env["DRA_FAKE_GPU_0_UUID"] == uuid
        assert env["DRA_FAKE_GPU_0_SHARE_ID"] == results[pod]["shareID"]
        assert env["DRA_FAKE_GPU_0_SHARE_MEMORY_BYTES"] == str(20 * GIB)
        assert bed.cdi_devices(ns, pod) == {
            "ctr": [f"k8s.gpu.nvidia.com/claim={claim['metadata']['uid']}-gpu-0"]
        }

    kube.delete_pod(ns, "a")
    poll(
        "the first share unprepared",
        lambda: bed.read_node_file(shared_node, spec_path(claims["a"])) is None,
        60,
    )
    for pod in ("b", "c"):
        assert bed.read_node_file(shared_node, spec_path(claims[pod])), f"{pod}'s share went too"
        assert_sees_its_gpus(bed, ns, pod)
    kube.wait_running(ns, "d", timeout=120)  # the freed 20Gi
    assert result_of(claim_of(kube, ns, "d"))["device"] == "gpu-0"


@pytest.mark.parametrize(
    ("asked", "consumed", "mib"),
    [("20G", "19074Mi", 19074), ("0", "1Mi", 1)],
    ids=["off-step", "below-minimum"],
)
def test_amounts_off_the_policy_are_rounded_up_not_refused(
    kube: Kube, ns: str, bed: TestBed, shared_node: str, asked: str, consumed: str, mib: int
) -> None:
    """Kubernetes rounds a request up to the policy's grid (1Mi steps from 1Mi): the claim's
    consumedCapacity and the container see the rounded amount."""
    kube.create(share_template("odd", gpu_uuid(kube, shared_node, "gpu-1"), asked), ns)
    pod_on(kube, ns, "p", "odd", shared_node)
    kube.wait_running(ns, "p")
    assert result_of(claim_of(kube, ns, "p"))["consumedCapacity"]["memory"] == consumed
    assert bed.container(ns, "p").env()["DRA_FAKE_GPU_1_SHARE_MEMORY_BYTES"] == str(mib * MIB)


def test_a_share_larger_than_the_gpu_pends_with_the_schedulers_reason(
    kube: Kube, ns: str, shared_node: str
) -> None:
    kube.create(share_template("huge", gpu_uuid(kube, shared_node, "gpu-2"), "100Gi"), ns)
    pod_on(kube, ns, "huge", "huge", shared_node)
    assert "cannot allocate all claims" in unschedulable(kube, ns, "huge")
    assert (
        not kube.claim(ns, claim_of(kube, ns, "huge")["metadata"]["name"]).get("status", {}).get("allocation")
    )


def test_conflicting_time_slicing_on_one_gpu_is_refused_with_nvidias_text(
    kube: Kube, ns: str, shared_node: str
) -> None:
    uuid = gpu_uuid(kube, shared_node, "gpu-3")
    kube.create(share_template("long", uuid, "10Gi", time_slicing("Long")), ns)
    kube.create(share_template("short", uuid, "10Gi", time_slicing("Short")), ns)
    pod_on(kube, ns, "long", "long", shared_node)
    kube.wait_running(ns, "long")
    first = claim_of(kube, ns, "long")["metadata"]["uid"]
    pod_on(kube, ns, "short", "short", shared_node)
    second = claim_of(kube, ns, "short")
    message = prepare_failure(kube, ns, "short", "has conflicting configuration")
    assert (
        f"unable to prepare claim {second['metadata']['uid']}: requested device gpu-3 has conflicting "
        f"configuration with already prepared claim {first}"
    ) in message, message
    assert kube.pod(ns, "short")["status"]["phase"] == "Pending"


def test_one_shares_unprepare_through_a_plugin_sigkill_leaves_the_other(
    kube: Kube, ns: str, bed: TestBed, shared_node: str
) -> None:
    """Two pods share a GPU; the plugin is SIGKILLed, one pod deleted meanwhile, the plugin back:
    that share is unprepared, the other's claim, spec and container are as they were."""
    kube.create(
        share_template("pair", gpu_uuid(kube, shared_node, "gpu-4"), "30Gi", time_slicing("Long")), ns
    )
    for pod in ("stay", "go"):
        pod_on(kube, ns, pod, "pair", shared_node)
    for pod in ("stay", "go"):
        kube.wait_running(ns, pod)
    stay, go = claim_of(kube, ns, "stay"), claim_of(kube, ns, "go")
    stay_spec = bed.read_node_file(shared_node, spec_path(stay))
    bed.crash_plugin(shared_node, meanwhile=lambda: kube.delete_pod(ns, "go", wait=False))
    poll(
        "the deleted pod's share unprepared",
        lambda: bed.read_node_file(shared_node, spec_path(go)) is None,
        90,
    )
    checkpoint = bed.plugin_checkpoint(shared_node)
    assert go["metadata"]["uid"] not in checkpoint
    assert checkpoint[stay["metadata"]["uid"]]["state"] == "PrepareCompleted"
    assert bed.read_node_file(shared_node, spec_path(stay)) == stay_spec
    assert_sees_its_gpus(bed, ns, "stay")


def test_nvidia_smi_in_each_share_shows_the_same_gpu_with_its_own_limit_and_usage(
    kube: Kube, ns: str, bed: TestBed, shared_node: str
) -> None:
    """docs/nvml.md#shares: a 20Gi and a 30Gi share of one GPU; each pod's nvidia-smi names the
    same GPU (UUID) with its share as the total and only its own pod's memory and utilization."""
    uuid = gpu_uuid(kube, shared_node, "gpu-5")
    kube.create(share_template("s20", uuid, "20Gi"), ns)
    kube.create(share_template("s30", uuid, "30Gi"), ns)
    load = {
        "small": {ANNOTATION_MEMORY: "50%", ANNOTATION_UTILIZATION: "30"},
        "large": {ANNOTATION_MEMORY: "4096", ANNOTATION_UTILIZATION: "20"},
    }
    pod_on(kube, ns, "small", "s20", shared_node, load["small"])
    pod_on(kube, ns, "large", "s30", shared_node, load["large"])
    for pod in ("small", "large"):
        kube.wait_running(ns, pod)

    def smi(pod: str) -> list[str] | None:
        out = bed.container(ns, pod).nvidia_smi(
            "--query-gpu=uuid,memory.total,memory.used,utilization.gpu", "--format=csv,noheader,nounits"
        )
        assert out.code == 0, out.output
        fields = out.output.strip().split(", ")
        return fields if fields[2] != "0" else None  # until the first sample with the pods

    assert poll("the small share's view", lambda: smi("small"), 60) == [uuid, "20480", "10240", "30"]
    assert poll("the large share's view", lambda: smi("large"), 60) == [uuid, "30720", "4096", "20"]
    listing = bed.container(ns, "small").nvidia_smi("-L")
    assert listing.code == 0 and uuid in listing.output, listing.output

    # the metrics endpoint attributes each share's own usage to its pod (docs/observability.md)
    def share_metrics() -> dict[tuple[str, str], float] | None:
        found = {
            (f.name, s.labels["pod"]): s.value
            for f in text_string_to_metric_families(bed.gpu_metrics(shared_node))
            for s in f.samples
            if f.name.startswith("DRA_FAKE_SHARE_FB") and s.labels.get("UUID") == uuid
        }
        return found if len(found) == 4 else None

    assert poll("per-share metrics", share_metrics, 60) == {
        ("DRA_FAKE_SHARE_FB_USED", "small"): 10240,
        ("DRA_FAKE_SHARE_FB_USED", "large"): 4096,
        ("DRA_FAKE_SHARE_FB_TOTAL", "small"): 20480,
        ("DRA_FAKE_SHARE_FB_TOTAL", "large"): 30720,
    }


def test_nvml_consumers_in_each_share_see_the_gpu_with_its_own_limit_and_usage(
    kube: Kube, ns: str, bed: TestBed, shared_node: str
) -> None:
    """docs/nvml.md#shares through NVML's consumers (e2e/nvmlview.py): in a 20Gi and a 30Gi share of
    one GPU, nvidia-ml-py, gpustat, nvitop and the go-nvml program print the same GPU with the
    share's memory as the total and the share's own memory used and utilization, the values of
    the per-share metrics."""
    uuid = gpu_uuid(kube, shared_node, "gpu-6")
    kube.create(share_template("n20", uuid, "20Gi"), ns)
    kube.create(share_template("n30", uuid, "30Gi"), ns)
    load = {
        "small": {ANNOTATION_MEMORY: "25%", ANNOTATION_UTILIZATION: "35"},
        "large": {ANNOTATION_MEMORY: "6144", ANNOTATION_UTILIZATION: "15"},
    }
    pod_on(kube, ns, "small", "n20", shared_node, load["small"], nvml=True)
    pod_on(kube, ns, "large", "n30", shared_node, load["large"], nvml=True)
    for pod in ("small", "large"):
        kube.wait_running(ns, pod)

    def share_metrics() -> dict[str, dict[str, float]] | None:
        found: dict[str, dict[str, float]] = {}
        for f in text_string_to_metric_families(bed.gpu_metrics(shared_node)):
            for s in f.samples:
                if f.name.startswith("DRA_FAKE_SHARE_") and s.labels.get("UUID") == uuid:
                    found.setdefault(s.labels["pod"], {})[f.name.removeprefix("DRA_FAKE_SHARE_")] = s.value
        return found if all(found.get(p, {}).get("FB_USED") for p in ("small", "large")) else None

    metrics = poll("per-share metrics of both pods", share_metrics, 60)
    assert {p: (m["FB_TOTAL"], m["FB_USED"], m["GPU_UTIL"]) for p, m in metrics.items()} == {
        "small": (20480, 5120, 35),
        "large": (30720, 6144, 15),
    }
    wrong = {}
    for pod, m in metrics.items():
        view = bed.container(ns, pod)
        for consumer in CONSUMERS:
            [gpu] = printed(view, consumer)
            got = (gpu.uuid, gpu.memory_total_mib, gpu.memory_used_mib, gpu.memory_free_mib, gpu.utilization)
            total, used = int(m["FB_TOTAL"]), int(m["FB_USED"])
            want = (uuid, total, used, total - used, int(m["GPU_UTIL"]))
            # what a consumer does not print (nvitop: no UUID; gonvml: no used; ...) is not compared
            if any(g is not None and g != w for g, w in zip(got, want, strict=True)):
                wrong[(pod, consumer)] = (got, want)
    assert not wrong, wrong
