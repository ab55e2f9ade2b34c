"""dcgm-exporter's metrics and GPU Feature Discovery's labels for simulated GPUs: the exposition
against the reference tables of docs/reference/dcgm-exporter-and-gfd.md, read by a real Prometheus
text parser; the values' behaviour; pod attribution; GFD labels; the HTTP endpoint."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dra_fake.gpu import dcgm
from dra_fake.gpu import monitor as monitor_module
from dra_fake.gpu.gfd import family, gfd_labels, is_gfd_key, sanitise
from dra_fake.gpu.inventory import Inventory, build_inventory, parse_config
from dra_fake.gpu.monitor import GpuMonitor, serve_metrics
from dra_fake.gpu.nodelabels import RECORD_ANNOTATION, TIMESTAMP_LABEL, label_patch, removal_patch
from dra_fake.gpu.nvidia_smi import NvidiaSmi
from dra_fake.gpu.profiles import load_profiles
from dra_fake.gpu.telemetry import SAMPLE_PERIOD, Simulator, draw
from dra_fake.gpu.workloads import (
    ANNOTATION_MEMORY,
    ANNOTATION_UTILIZATION,
    DEFAULT_LOAD,
    ClaimHolding,
    HeldDevice,
    Load,
    LoadError,
    parse_load,
    users_by_device,
)

REFERENCE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "dcgm-exporter-and-gfd.md"
NODE = "node-a"
T0 = 1_800_000_000.0


def inventory(config: dict[str, Any]) -> Inventory:
    return build_inventory(parse_config(config, "test"), NODE, load_profiles())


H100x2 = {"gpus": [{"profile": "h100-sxm5-80gb", "count": 2}]}
A100_STATIC = {
    "gpus": [
        {
            "profile": "a100-sxm4-40gb",
            "mig": "static",
            "migDevices": [{"profile": "3g.20gb", "start": 0}, {"profile": "1g.5gb", "start": 4}],
        }
    ]
}


def pod(name: str, claim: str, annotations: dict[str, str] | None = None, **extra: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": "ns", "uid": f"uid-{name}", "annotations": annotations or {}},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}],
        },
        "status": {"phase": "Running"},
        **extra,
    }


def holding(claim: str, *devices: str) -> ClaimHolding:
    return ClaimHolding("ns", claim, tuple(HeldDevice(d, NODE, ("gpu",)) for d in devices))


def monitor_for(tmp_path: Path, inv: Inventory, holdings: list[ClaimHolding], now: float = T0) -> GpuMonitor:
    clock = [now]
    m = GpuMonitor(inv, lambda: holdings, NvidiaSmi.from_inventory(tmp_path, inv), NODE, "gpu.nvidia.com")
    m.clock = lambda: clock[0]
    m.simulator.boot_time = now - 3600
    return m


def samples(text: str) -> list[Any]:
    """Samples named as exposed (the Python parser renames counter samples to `<name>_total`;
    a Prometheus server stores them under the exposed name)."""
    return [s._replace(name=f.name) for f in text_string_to_metric_families(text) for s in f.samples]


# ---- the exposition against the reference --------------------------------------------------------


def reference_rows() -> list[tuple[str, str, str]]:
    """(metric, type, help) of the default-counters table (A1) of the reference page."""
    rows = []
    for line in REFERENCE.read_text().splitlines():
        m = re.match(r"^\| (DCGM_FI_\w+) \| \d+ \| (gauge|counter) \| `([^`]*)` \|", line)
        if m:
            rows.append((m[1], m[2], m[3]))
    return rows


def test_default_counter_set_matches_the_reference_table() -> None:
    rows = reference_rows()
    assert len(rows) == 25  # 25 metrics (+ the driver-version label, not a metric)
    assert [(f.name, f.type, f.help) for f in dcgm.DEFAULT_FIELDS] == rows


def test_exposition_lines_follow_dcgm_exporters_template(tmp_path: Path) -> None:
    inv = inventory(H100x2)
    text = monitor_for(tmp_path, inv, []).sample()
    lines = text.splitlines()
    families = list(text_string_to_metric_families(text))
    assert [(f.name, f.type, f.documentation) for f in families] == reference_rows()
    gpu0 = inv.gpus[0]
    labels = (
        f'{{gpu="0",UUID="{gpu0.uuid}",pci_bus_id="00000000:18:00.0",device="nvidia0",'
        f'modelName="NVIDIA H100 80GB HBM3",Hostname="{NODE}",DCGM_FI_DRIVER_VERSION="580.105.08"}}'
    )
    # an idle H100 reads as the captured idle card
    assert f"DCGM_FI_DEV_POWER_USAGE{labels} 68.920000" in lines
    assert f"DCGM_FI_DEV_SM_CLOCK{labels} 345" in lines
    assert f"DCGM_FI_DEV_GPU_TEMP{labels} 29" in lines
    assert f"DCGM_FI_DEV_GPU_UTIL{labels} 0" in lines
    assert f"DCGM_FI_DEV_FB_USED{labels} 0" in lines
    assert f"DCGM_FI_DEV_FB_FREE{labels} {81559 - 480}" in lines
    assert f"DCGM_FI_PROF_GR_ENGINE_ACTIVE{labels} 0.000000" in lines
    xid = labels[:-1] + ',err_code="0",err_msg="No Error"}'
    assert f"DCGM_FI_DEV_XID_ERRORS{xid} 0" in lines
    assert lines[0] == "# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz)."
    assert lines[1] == "# TYPE DCGM_FI_DEV_SM_CLOCK gauge"
    for line in lines:  # no spaces in label sets, no exponents, no timestamps
        if not line.startswith("#"):
            assert re.fullmatch(r'[A-Z_]+\{[A-Za-z_]+="[^"]*"(,[A-Za-z_]+="[^"]*")*\} \d+(\.\d{6})?', line), (
                line
            )


def test_mig_instances_carry_gi_labels_and_no_engine_utilization(tmp_path: Path) -> None:
    inv = inventory(A100_STATIC)
    text = monitor_for(tmp_path, inv, []).sample()
    found = samples(text)
    gi = {(s.labels["GPU_I_PROFILE"], s.labels["GPU_I_ID"]) for s in found if "GPU_I_ID" in s.labels}
    assert gi == {("3g.20gb", "1"), ("1g.5gb", "11")}
    assert not any(s.name == "DCGM_FI_DEV_GPU_UTIL" for s in found)
    fb = {s.labels["GPU_I_PROFILE"]: s.value for s in found if s.name == "DCGM_FI_DEV_FB_FREE"}
    assert fb == {"3g.20gb": 19968, "1g.5gb": 4864}
    line = next(line for line in text.splitlines() if line.startswith("DCGM_FI_DEV_SM_CLOCK"))
    assert ',modelName="NVIDIA A100-SXM4-40GB",GPU_I_PROFILE="3g.20gb",GPU_I_ID="1",Hostname=' in line
    # memory temperature: HBM reports it, GDDR boards (L40S, T4) do not, so the family is absent
    assert "DCGM_FI_DEV_MEMORY_TEMP" in text
    t4 = monitor_for(tmp_path / "t4", inventory({"gpus": [{"profile": "t4"}]}), []).sample()
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in t4 and "DCGM_FI_DEV_ROW_REMAP_FAILURE" not in t4
    assert "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL" not in t4


def test_held_device_gets_one_sample_per_container_with_dra_labels(tmp_path: Path) -> None:
    inv = inventory(H100x2)
    m = monitor_for(tmp_path, inv, [holding("claim-a", "gpu-1")])
    shared = pod("b", "claim-a")
    shared["spec"]["containers"].append({"name": "side", "resources": {"claims": [{"name": "gpu"}]}})
    m.set_pods([pod("a", "claim-a", {ANNOTATION_UTILIZATION: "50"}), shared])
    text = m.sample()
    util = [s for s in samples(text) if s.name == "DCGM_FI_DEV_GPU_UTIL" and s.labels["gpu"] == "1"]
    assert sorted((s.labels["pod"], s.labels["container"]) for s in util) == [
        ("a", "main"),
        ("b", "main"),
        ("b", "side"),
    ]
    assert {s.labels["dra_device_name"] for s in util} == {"gpu-1"}
    assert {s.labels["dra_claim_name"] for s in util} == {"claim-a"}
    line = next(line for line in text.splitlines() if 'pod="a"' in line and "GPU_UTIL" in line)
    attrs = re.findall(r'(\w+)="', line.split('DCGM_FI_DRIVER_VERSION="580.105.08",', 1)[1])
    assert (
        attrs
        == sorted(attrs)
        == [
            "container",
            "dra_claim_name",
            "dra_claim_namespace",
            "dra_device_name",
            "dra_driver_name",
            "dra_pool_name",
            "namespace",
            "pod",
        ]
    )
    # two pods share the GPU: their loads add up (50 + 80..100, capped at 100)
    assert {s.value for s in util} == {100}
    idle = [s for s in samples(text) if s.name == "DCGM_FI_DEV_GPU_UTIL" and s.labels["gpu"] == "0"]
    assert [s.value for s in idle] == [0] and "pod" not in idle[0].labels


def test_shares_of_one_gpu_get_their_share_label_and_own_usage_families(tmp_path: Path) -> None:
    """docs/observability.md#per-share-metrics: DCGM's families stay device-wide (one copy per pod,
    now with dra_share_id); DRA_FAKE_SHARE_* give each share's own values."""
    inv = inventory(H100x2)
    held = [
        ClaimHolding("ns", "claim-a", (HeldDevice("gpu-1", NODE, ("gpu",), None, "share-a", 20480),)),
        ClaimHolding("ns", "claim-b", (HeldDevice("gpu-1", NODE, ("gpu",), None, "share-b", None),)),
    ]
    m = monitor_for(tmp_path, inv, held)
    m.set_pods(
        [
            pod("a", "claim-a", {ANNOTATION_UTILIZATION: "30", ANNOTATION_MEMORY: "50%"}),
            pod("b", "claim-b", {ANNOTATION_UTILIZATION: "20", ANNOTATION_MEMORY: "4096"}),
        ]
    )
    found = samples(m.sample())

    def by_pod(name: str) -> dict[str, tuple[float, str]]:
        return {
            s.labels["pod"]: (s.value, s.labels["dra_share_id"])
            for s in found
            if s.name == name and "pod" in s.labels
        }

    assert by_pod("DCGM_FI_DEV_FB_USED") == {"a": (14336, "share-a"), "b": (14336, "share-b")}
    assert by_pod("DCGM_FI_DEV_GPU_UTIL") == {"a": (50, "share-a"), "b": (50, "share-b")}
    assert by_pod("DRA_FAKE_SHARE_FB_USED") == {"a": (10240, "share-a"), "b": (4096, "share-b")}
    assert by_pod("DRA_FAKE_SHARE_GPU_UTIL") == {"a": (30, "share-a"), "b": (20, "share-b")}
    assert by_pod("DRA_FAKE_SHARE_FB_TOTAL") == {"a": (20480, "share-a")}  # b sees the whole GPU
    [total] = [s for s in found if s.name == "DRA_FAKE_SHARE_FB_TOTAL"]
    assert total.labels["UUID"] == inv.gpu(1).uuid and total.labels["dra_device_name"] == "gpu-1"
    # a node without shares serves dcgm-exporter's families only
    plain = monitor_for(tmp_path / "plain", inv, [holding("claim-a", "gpu-1")])
    plain.set_pods([pod("a", "claim-a")])
    assert "DRA_FAKE_" not in plain.sample() and "dra_share_id" not in plain.text


def test_lost_gpu_reports_only_its_xid_which_stays_after_recovery(tmp_path: Path) -> None:
    inv = inventory(H100x2)
    m = monitor_for(tmp_path, inv, [])
    lost = inv.gpus[1].uuid
    m.set_faults({lost: {"lost": 1, "xid": 79}})
    found = [s for s in samples(m.sample()) if s.labels.get("UUID") == lost]
    assert [(s.name, s.value, s.labels["err_code"], s.labels["err_msg"]) for s in found] == [
        ("DCGM_FI_DEV_XID_ERRORS", 79, "79", "GPU has fallen off the bus")
    ]
    m.set_faults({})
    xid = [
        s for s in samples(m.sample()) if s.labels.get("UUID") == lost and s.name == "DCGM_FI_DEV_XID_ERRORS"
    ]
    assert [s.value for s in xid] == [79]
    assert len([s for s in samples(m.text) if s.labels.get("UUID") == lost]) == len(dcgm.DEFAULT_FIELDS)


# ---- values ---------------------------------------------------------------------------------------


def test_values_move_within_the_profile_and_the_requested_range(tmp_path: Path) -> None:
    inv = inventory(H100x2)
    m = monitor_for(tmp_path, inv, [holding("c", "gpu-0")])
    m.set_pods([pod("p", "c", {ANNOTATION_UTILIZATION: "30-70", ANNOTATION_MEMORY: "25%"})])
    now = [T0]
    m.clock = lambda: now[0]
    seen, energy = set(), -1.0
    for step in range(40):
        now[0] = T0 + step * SAMPLE_PERIOD
        values = {s.name: s.value for s in samples(m.sample()) if s.labels["gpu"] == "0"}
        seen.add(values["DCGM_FI_DEV_GPU_UTIL"])
        assert 30 <= values["DCGM_FI_DEV_GPU_UTIL"] <= 70
        assert values["DCGM_FI_DEV_FB_USED"] == round(81559 * 0.25)
        assert values["DCGM_FI_DEV_FB_USED"] + values["DCGM_FI_DEV_FB_FREE"] + 480 == 81559
        assert 68.92 < values["DCGM_FI_DEV_POWER_USAGE"] < 700
        assert values["DCGM_FI_DEV_SM_CLOCK"] == 1980 and values["DCGM_FI_DEV_MEM_CLOCK"] == 2619
        assert values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] > energy
        energy = values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert len(seen) > 5  # it moves


def test_energy_counter_continues_across_a_restart(tmp_path: Path) -> None:
    inv = inventory(H100x2)
    first = monitor_for(tmp_path, inv, [])
    first.sample()
    energy = first.simulator.energy_mj(inv.gpus[0].uuid)
    again = monitor_for(tmp_path, inv, [], now=T0 + 600)
    assert again.simulator.energy_mj(inv.gpus[0].uuid) == energy
    again.sample()
    assert again.simulator.energy_mj(inv.gpus[0].uuid) > energy


def test_thermal_fault_sets_temperature_and_throttles() -> None:
    inv = inventory(H100x2)
    sim = Simulator(inv, T0 - 10)
    [(_, reading), _] = sim.sample(T0, {}, {inv.gpus[0].uuid: {"temperature": 95}}, {})
    assert (reading.gpu_temp, reading.sm_clock) == (95, 1188)  # 60 % of the H100's 1980 MHz


def test_draw_is_deterministic_and_covers_the_range() -> None:
    values = {draw(10, 20, "dev", "pod", str(i)) for i in range(300)}
    assert values == set(range(10, 21))
    assert draw(10, 20, "a", "b") == draw(10, 20, "a", "b")


# ---- workloads ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "load"),
    [
        ({}, DEFAULT_LOAD),
        ({ANNOTATION_UTILIZATION: "75"}, Load((75, 75), memory_fraction=0.5)),
        (
            {ANNOTATION_UTILIZATION: " 10 - 20 ", ANNOTATION_MEMORY: "40%"},
            Load((10, 20), memory_fraction=0.4),
        ),
        ({ANNOTATION_MEMORY: "20Gi"}, Load((80, 100), memory_mib=20480)),
        ({ANNOTATION_MEMORY: "512"}, Load((80, 100), memory_mib=512)),
    ],
)
def test_parse_load(annotations: dict[str, str], load: Load) -> None:
    assert parse_load(annotations) == load


@pytest.mark.parametrize(
    ("annotations", "named"),
    [
        ({ANNOTATION_UTILIZATION: "90-10"}, ANNOTATION_UTILIZATION),
        ({ANNOTATION_UTILIZATION: "120"}, ANNOTATION_UTILIZATION),
        ({ANNOTATION_UTILIZATION: "lots"}, ANNOTATION_UTILIZATION),
        ({ANNOTATION_MEMORY: "150%"}, ANNOTATION_MEMORY),
        ({ANNOTATION_MEMORY: "2 GB"}, ANNOTATION_MEMORY),
    ],
)
def test_malformed_load_annotation_names_itself(annotations: dict[str, str], named: str) -> None:
    with pytest.raises(LoadError, match=re.escape(named)):
        parse_load(annotations)


def test_users_by_device_resolves_templates_requests_and_extended_resources() -> None:
    templated = pod("t", "unused")
    templated["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "tpl"}]
    templated["status"]["resourceClaimStatuses"] = [{"name": "gpu", "resourceClaimName": "t-gpu-x1"}]
    by_request = pod("r", "two")
    by_request["spec"]["containers"] = [
        {"name": "a", "resources": {"claims": [{"name": "gpu", "request": "first"}]}},
        {"name": "b", "resources": {"claims": [{"name": "gpu", "request": "second"}]}},
    ]
    extended: dict[str, Any] = {
        "metadata": {"name": "x", "namespace": "ns", "uid": "uid-x"},
        "spec": {"containers": [{"name": "cuda"}]},
        "status": {
            "phase": "Running",
            "extendedResourceClaimStatus": {
                "resourceClaimName": "x-extended-resources-abc",
                "requestMappings": [
                    {
                        "containerName": "cuda",
                        "resourceName": "nvidia.com/gpu",
                        "requestName": "container-0-request-0",
                    }
                ],
            },
        },
    }
    done = pod("d", "gone")
    done["status"]["phase"] = "Succeeded"
    bad = pod("bad", "bad-claim", {ANNOTATION_UTILIZATION: "x"})
    claims = [
        holding("t-gpu-x1", "gpu-0"),
        ClaimHolding(
            "ns", "two", (HeldDevice("gpu-1", NODE, ("first",)), HeldDevice("gpu-2", NODE, ("second/h100",)))
        ),
        ClaimHolding(
            "ns", "x-extended-resources-abc", (HeldDevice("gpu-3", NODE, ("container-0-request-0",)),)
        ),
        holding("gone", "gpu-4"),
        holding("bad-claim", "gpu-5"),
    ]
    users, errors = users_by_device([templated, by_request, extended, done, bad], claims)
    assert {d: [(u.pod, u.container) for u in us] for d, us in users.items()} == {
        "gpu-0": [("t", "main")],
        "gpu-1": [("r", "a")],
        "gpu-2": [("r", "b")],
        "gpu-3": [("x", "cuda")],
        "gpu-5": [("bad", "main")],
    }
    assert users["gpu-5"][0].load == DEFAULT_LOAD
    assert list(errors) == ["ns/bad"] and ANNOTATION_UTILIZATION in errors["ns/bad"]


@pytest.mark.parametrize(
    "hostile",
    [
        {ANNOTATION_MEMORY: "9" * 5000},  # int() of it raises a plain ValueError (the digit limit)
        {ANNOTATION_MEMORY: "99999999Ti"},
        {ANNOTATION_MEMORY: "1" + "0" * 20},
        {ANNOTATION_MEMORY: "50." + "0" * 5000 + "%"},
        {ANNOTATION_UTILIZATION: "5" * 100},
        {ANNOTATION_UTILIZATION: " " * 10_000 + "5"},
    ],
    ids=["5000-digits", "huge-ti", "21-digits", "long-percent", "long-utilization", "padded"],
)
def test_a_hostile_annotation_costs_only_its_own_pod(hostile: dict[str, str]) -> None:
    """Any pod of the node may carry the annotations: a value past the bounds is that pod's error
    (named), it gets the default load, and every other pod is still attributed."""
    with pytest.raises(LoadError, match=re.escape(next(iter(hostile)))):
        parse_load(hostile)
    good = pod("good", "good-claim", {ANNOTATION_UTILIZATION: "10-20"})
    bad = pod("bad", "bad-claim", hostile)
    users, errors = users_by_device(
        [bad, good], [holding("good-claim", "gpu-0"), holding("bad-claim", "gpu-1")]
    )
    assert list(errors) == ["ns/bad"] and next(iter(hostile)) in errors["ns/bad"]
    assert users["gpu-0"][0].load == Load((10, 20), memory_fraction=0.5)
    assert users["gpu-1"][0].load == DEFAULT_LOAD


def test_a_pod_that_cannot_be_read_costs_only_itself() -> None:
    broken = pod("broken", "bad-claim")
    broken["spec"]["containers"] = [{"resources": {"claims": [{"name": "gpu"}]}}]  # no name
    good = pod("good", "good-claim")
    users, errors = users_by_device(
        [broken, good], [holding("good-claim", "gpu-0"), holding("bad-claim", "gpu-1")]
    )
    assert list(users) == ["gpu-0"] and list(errors) == ["ns/broken"]
    assert "pod not understood" in errors["ns/broken"]


def test_the_monitor_posts_one_event_on_the_pod_with_a_bad_annotation(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    posted: list[tuple[str, str, str, str]] = []

    def post(api: Any, namespace: str, name: str, uid: str, node: str, **kw: str) -> None:
        posted.append((namespace, name, uid, kw["reason"]))
        assert ANNOTATION_MEMORY in kw["message"] and node == NODE

    monkeypatch.setattr(monitor_module, "post_pod_event", post)
    inv = inventory(H100x2)
    m = monitor_for(tmp_path, inv, [holding("bad-claim", "gpu-0"), holding("good-claim", "gpu-1")])
    m._api = object()  # type: ignore[assignment]
    m.set_pods([pod("bad", "bad-claim", {ANNOTATION_MEMORY: "9" * 5000}), pod("good", "good-claim")])
    text = m.sample()
    m.sample()  # the same error again: no second event
    assert posted == [("ns", "bad", "uid-bad", monitor_module.EVENT_REASON)]
    attributed = {s.labels.get("pod") for s in samples(text) if s.name == "DCGM_FI_DEV_GPU_UTIL"}
    assert attributed == {"bad", "good"}  # both attributed, the bad one with the default load


# ---- GPU Feature Discovery labels -----------------------------------------------------------------


def test_gfd_labels_of_an_h100_node() -> None:
    labels = gfd_labels(inventory(H100x2), machine="ProLiant DL380 Gen10 (x)")
    assert {k: labels[k] for k in sorted(labels) if k.startswith("nvidia.com/gpu.")} == {
        "nvidia.com/gpu.compute.major": "9",
        "nvidia.com/gpu.compute.minor": "0",
        "nvidia.com/gpu.count": "2",
        "nvidia.com/gpu.family": "hopper",
        "nvidia.com/gpu.machine": "ProLiant-DL380-Gen10-x",
        "nvidia.com/gpu.memory": "81559",
        "nvidia.com/gpu.mode": "compute",
        "nvidia.com/gpu.present": "true",
        "nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
        "nvidia.com/gpu.replicas": "1",
        "nvidia.com/gpu.sharing-strategy": "none",
    }
    assert labels["nvidia.com/cuda.driver-version.full"] == "580.105.08"
    assert labels["nvidia.com/cuda.driver-version.revision"] == "08"
    assert labels["nvidia.com/cuda.runtime-version.full"] == "13.0"
    assert labels["nvidia.com/mig.capable"] == "true" and "nvidia.com/mig.strategy" not in labels
    assert all(is_gfd_key(k) for k in labels)


def test_gfd_mig_strategies() -> None:
    inv = inventory(A100_STATIC)
    mixed = gfd_labels(inv, "mixed")
    assert mixed["nvidia.com/mig.strategy"] == "mixed"
    assert mixed["nvidia.com/mig-1g.5gb.count"] == "1"
    assert mixed["nvidia.com/mig-3g.20gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"
    assert mixed["nvidia.com/mig-3g.20gb.slices.gi"] == "3"
    assert mixed["nvidia.com/gpu.replicas"] == "0"  # the MIG-enabled GPU itself
    invalid = gfd_labels(inv, "single")  # two profiles: single cannot describe it
    assert invalid["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-INVALID"
    assert invalid["nvidia.com/gpu.count"] == "0"
    one = A100_STATIC | {
        "gpus": [
            A100_STATIC["gpus"][0]
            | {"migDevices": [{"profile": "3g.20gb", "start": 0}, {"profile": "3g.20gb", "start": 4}]}
        ]
    }
    single = gfd_labels(inventory(one), "single")
    assert single["nvidia.com/gpu.product"] == "NVIDIA-A100-SXM4-40GB-MIG-3g.20gb"
    assert (single["nvidia.com/gpu.count"], single["nvidia.com/gpu.memory"]) == ("2", "19968")
    with pytest.raises(ValueError, match="MIG strategy"):
        gfd_labels(inv, "double")
    # dynamic MIG: a Hopper serves whole until a claim splits it (MIG off for NVML), an A100 keeps MIG on
    hopper = gfd_labels(inventory({"gpus": [{"profile": "h100-sxm5-80gb", "mig": "dynamic"}]}))
    ampere = gfd_labels(inventory({"gpus": [{"profile": "a100-sxm4-40gb", "mig": "dynamic"}]}))
    assert (hopper["nvidia.com/gpu.replicas"], ampere["nvidia.com/gpu.replicas"]) == ("1", "0")
    # a whole GPU beside a MIG-enabled one: the whole one describes nvidia.com/gpu, whatever the order
    both = {"gpus": [{"profile": "h100-sxm5-80gb"}, A100_STATIC["gpus"][0]]}
    labels = gfd_labels(inventory(both), "mixed")
    assert (labels["nvidia.com/gpu.product"], labels["nvidia.com/gpu.replicas"]) == (
        "NVIDIA-H100-80GB-HBM3",
        "1",
    )


def test_gfd_clique_family_and_sanitise() -> None:
    clique = "7b968a6d-c8aa-45e1-9e07-e1e51be99c31.1"
    labels = gfd_labels(inventory({"gpus": [{"profile": "gb200", "count": 4}], "imexCliqueID": clique}))
    assert labels["nvidia.com/gpu.clique"] == clique and labels["nvidia.com/gpu.family"] == "blackwell"
    assert [family(cc) for cc in ("7.0", "7.5", "8.0", "8.9", "9.0", "10.0", "12.0", "13.0", "4.0")] == [
        "volta", "turing", "ampere", "ada-lovelace", "hopper", "blackwell", "blackwell", "rubin", "undefined",
    ]  # fmt: skip
    assert sanitise("NVIDIA A100-SXM4-40GB (rev/a)") == "NVIDIA-A100-SXM4-40GB-reva"
    assert gfd_labels(inventory({"gpus": [{"profile": "t4"}]}))["nvidia.com/gpu.product"] == "Tesla-T4"


def test_label_patch_records_its_keys_and_removes_only_those() -> None:
    wanted = {"nvidia.com/gpu.count": "8", "nvidia.com/gpu.product": "X"}
    node: dict[str, Any] = {
        "metadata": {"labels": {"nvidia.com/gpu.deploy.x": "true", "nvidia.com/mig-1g.5gb.count": "1"}}
    }
    patch = label_patch(node, wanted, T0)
    assert patch is not None
    assert patch["metadata"]["labels"] == wanted | {TIMESTAMP_LABEL: str(int(T0))}
    assert patch["metadata"]["annotations"][RECORD_ANNOTATION] == "gfd.timestamp,gpu.count,gpu.product"
    node["metadata"]["labels"] |= patch["metadata"]["labels"]
    node["metadata"]["annotations"] = patch["metadata"]["annotations"]
    assert label_patch(node, wanted, T0 + 60) is None  # nothing changed: no write, no new timestamp
    smaller = label_patch(node, {"nvidia.com/gpu.count": "8"}, T0 + 60)
    assert smaller is not None and smaller["metadata"]["labels"]["nvidia.com/gpu.product"] is None
    removal = removal_patch(node)
    assert removal == {
        "metadata": {
            "labels": {TIMESTAMP_LABEL: None, "nvidia.com/gpu.count": None, "nvidia.com/gpu.product": None},
            "annotations": {RECORD_ANNOTATION: None},
        }
    }  # labels it did not write (the operator's gpu.deploy.x, an older mig-* label) stay
    assert removal_patch({"metadata": {"labels": {"nvidia.com/gpu.count": "1"}}}) is None


# ---- the endpoint ---------------------------------------------------------------------------------


def test_http_endpoint_serves_the_latest_sample(tmp_path: Path) -> None:
    m = monitor_for(tmp_path, inventory(H100x2), [])
    m.sample()
    server = serve_metrics(lambda: m.text, 0, "127.0.0.1")
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}"
        with urllib.request.urlopen(f"{base}/metrics", timeout=10) as resp:
            assert resp.headers["Content-Type"] == "text/plain; charset=utf-8"
            assert resp.read().decode() == m.text
        with urllib.request.urlopen(f"{base}/health", timeout=10) as resp:
            assert resp.status == 200
        with pytest.raises(urllib.error.HTTPError, match="404"):
            urllib.request.urlopen(f"{base}/nope", timeout=10)
    finally:
        server.shutdown()
        server.server_close()


def test_dashboard_queries_use_metrics_and_labels_the_endpoint_has() -> None:
    dashboard = json.loads(
        (REFERENCE.parents[2] / "charts/dra-fake/dashboards/dra-fake-gpus.json").read_text()
    )
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 15
    served = {f.name for f in dcgm.DEFAULT_FIELDS}
    labels = {"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION"}
    labels |= {"GPU_I_PROFILE", "GPU_I_ID", "pod", "namespace", "container", "err_code", "err_msg"}
    for expr in exprs:
        assert set(re.findall(r"DCGM_\w+", expr)) <= served, expr
        for group in re.findall(r"by \(([^)]*)\)", expr):
            assert {g.strip() for g in group.split(",")} <= labels, expr
        for name in re.findall(r"(\w+)(?:=~|!=|=)\"", expr):
            assert name in labels, expr


def test_gfd_labels_of_shared_gpus() -> None:
    from dra_fake.gpu.gfd import Shared

    inv = inventory(H100x2)
    shared = gfd_labels(inv, shared=Shared("time-slicing", {"nvidia.com/gpu": 4}))
    assert shared["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3-SHARED"
    assert (shared["nvidia.com/gpu.replicas"], shared["nvidia.com/gpu.sharing-strategy"]) == (
        "4",
        "time-slicing",
    )
    renamed = gfd_labels(inv, shared=Shared("time-slicing", {"nvidia.com/gpu": 4}, renamed=True))
    assert renamed["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"  # nvidia.com/gpu.shared tells instead
    mps = gfd_labels(inv, shared=Shared("mps", {"nvidia.com/gpu": 2}))
    assert (mps["nvidia.com/mps.capable"], mps["nvidia.com/gpu.sharing-strategy"]) == ("true", "mps")
    mixed = gfd_labels(
        inventory(A100_STATIC), "mixed", shared=Shared("time-slicing", {"nvidia.com/mig-1g.5gb": 2})
    )
    assert mixed["nvidia.com/mig-1g.5gb.product"] == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb-SHARED"
    assert mixed["nvidia.com/mig-1g.5gb.replicas"] == "2" and mixed["nvidia.com/mig-3g.20gb.replicas"] == "1"
