"""dcgm-exporter's metrics for simulated GPUs: the exposition against the reference tables of
docs/reference/dcgm-exporter-and-gfd.md, read by a real Prometheus text parser; the values'
behaviour; the HTTP endpoint and the dashboard. Pod attribution is in
tests/test_observability_workloads.py, GPU Feature Discovery's labels in
tests/test_observability_gfd.py; the node they share in tests/metricsnode.py."""

from __future__ import annotations

import json
import re
import threading
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from dra_fake.gpu import dcgm
from dra_fake.gpu.monitor import serve_metrics
from dra_fake.gpu.telemetry import SAMPLE_PERIOD, Simulator, draw
from dra_fake.gpu.workloads import (
    ANNOTATION_MEMORY,
    ANNOTATION_UTILIZATION,
    ClaimHolding,
    HeldDevice,
)
from tests.metricsnode import (
    A100_STATIC,
    NODE,
    REFERENCE,
    T0,
    H100x2,
    holding,
    inventory,
    monitor_for,
    pod,
    samples,
)

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
