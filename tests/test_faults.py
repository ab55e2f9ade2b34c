"""GpuFault -> taints and health, against NVIDIA's table
(docs/reference/nvidia-gpu-driver.md#35-health-taints)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_fake.core.kubeconfig import StartupError
from dra_fake.core.resourceapi import ServerInfo
from dra_fake.gpu.devnodes import DeviceNodePolicy
from dra_fake.gpu.faults import (
    DEFAULT_IGNORED_XIDS,
    Effects,
    Fault,
    FaultError,
    FaultTracker,
    fault_taint,
    find_target,
    parse_fault,
)
from dra_fake.gpu.inventory import Inventory, load_inventory
from dra_fake.gpu.plugin import GpuDriver, parse_additional_xids, parse_feature_gates

CREATED = "2026-12-01T10:00:00Z"
T0 = 1796119200.0  # CREATED as Unix seconds


@pytest.fixture
def inventory(tmp_path: Path) -> Inventory:
    config = {
        "gpus": [
            {
                "profile": "a100-sxm4-80gb",
                "count": 1,
                "mig": "static",
                "migDevices": [{"profile": "1g.10gb", "start": 0}],
            },
            {"profile": "h100-sxm5-80gb", "count": 2},
        ]
    }
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return load_inventory(path, "node-1")


def obj(name: str = "f", **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "creationTimestamp": CREATED}, "spec": {"nodeName": "node-1", **spec}}


def fault(name: str = "f", **spec: Any) -> Fault:
    return parse_fault(obj(name, **spec))


def names(inventory: Inventory) -> tuple[str, str, str, str]:
    """(the MIG device, the A100 hidden behind it is not published; first H100, second H100, all)"""
    mig = next(d.name for d in inventory.devices.values() if d.kind == "mig")
    gpus = sorted(d.name for d in inventory.devices.values() if d.kind == "gpu")
    return mig, gpus[0], gpus[1], ",".join(sorted(inventory.devices))


def test_timestamp_constant() -> None:
    assert fault(device="gpu-0", kind="gpu-lost").starts_at == T0


# ---- NVIDIA's table ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("spec", "taint"),
    [
        ({"kind": "xid", "xid": 79}, ("gpu.nvidia.com/xid", "79", "NoSchedule")),
        ({"kind": "xid", "xid": 48}, ("gpu.nvidia.com/xid", "48", "NoSchedule")),
        *[
            ({"kind": "xid", "xid": x}, ("gpu.nvidia.com/xid", str(x), "None"))
            for x in (13, 31, 43, 45, 68, 109)
        ],
        ({"kind": "gpu-lost"}, ("gpu.nvidia.com/gpu-lost", "", "NoSchedule")),
        ({"kind": "unmonitored"}, ("gpu.nvidia.com/unmonitored", "", "None")),
        ({"kind": "ecc", "ecc": {"type": "double", "count": 2}}, ("gpu.nvidia.com/xid", "48", "NoSchedule")),
        ({"kind": "ecc", "ecc": {"type": "single", "count": 5}}, None),
        ({"kind": "thermal", "thermal": {"temperature": 99}}, None),
        ({"kind": "xid", "xid": 79, "effect": "NoExecute"}, ("gpu.nvidia.com/xid", "79", "NoExecute")),
    ],
)
def test_taint_table(spec: dict[str, Any], taint: tuple[str, str, str] | None) -> None:
    got = fault_taint(fault(device="gpu-0", **spec), DEFAULT_IGNORED_XIDS)
    assert (None if got is None else (got.key, got.value, got.effect)) == taint
    if got is not None:
        manifest = got.manifest()
        assert manifest["timeAdded"] == CREATED
        assert ("value" in manifest) == bool(taint and taint[1])


def test_additional_ignored_xids() -> None:
    ignored = DEFAULT_IGNORED_XIDS | parse_additional_xids(" 79, ,94")
    got = fault_taint(fault(device="gpu-0", kind="xid", xid=79), ignored)
    assert got is not None and got.effect == "None"
    with pytest.raises(StartupError, match="'7x' is not an Xid number"):
        parse_additional_xids("79,7x")


def test_scope_as_nvidia(inventory: Inventory) -> None:
    mig, h0, _, _ = names(inventory)
    tracker = FaultTracker(inventory.devices, DEFAULT_IGNORED_XIDS)
    # An Xid on a full GPU taints that device only; on a MIG device only the MIG device.
    effects, _ = tracker.effects([fault("a", device=h0, kind="xid", xid=79)], T0)
    assert sorted(effects.taints) == [h0]
    effects, _ = tracker.effects([fault("b", device=mig, kind="xid", xid=79, recovery="clear")], T0)
    assert sorted(effects.taints) == sorted([h0, mig])  # "a" is sticky: still there


def test_gpu_lost_taints_every_device_and_marks_its_own_unhealthy(inventory: Inventory) -> None:
    _, _, h1, everything = names(inventory)
    effects, status = FaultTracker(inventory.devices, DEFAULT_IGNORED_XIDS).effects(
        [fault("lost", device=h1, kind="gpu-lost")], T0 + 1
    )
    assert ",".join(sorted(effects.taints)) == everything
    assert all(
        t == [{"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule", "timeAdded": CREATED}]
        for t in effects.taints.values()
    )
    assert effects.health == {h1: ("Unhealthy", "GPU is lost (GpuFault lost)")}
    assert status == {"lost": ("Active", f"on {h1}")}


def test_unmonitored_covers_the_gpu_and_its_mig_devices(inventory: Inventory) -> None:
    mig, _, _, _ = names(inventory)
    gpu_uuid = inventory.devices[mig].gpu_uuid
    effects, _ = FaultTracker(inventory.devices, DEFAULT_IGNORED_XIDS).effects(
        [fault("u", device=gpu_uuid, kind="unmonitored")], T0
    )
    on_gpu = sorted(d.name for d in inventory.devices.values() if d.gpu_uuid == gpu_uuid)
    assert sorted(effects.taints) == on_gpu == sorted(effects.health)
    assert {h for h, _ in effects.health.values()} == {"Unknown"}


def test_one_taint_per_key_latest_wins_and_worst_health(inventory: Inventory) -> None:
    _, h0, _, _ = names(inventory)
    early = parse_fault({**obj("early", device=h0, kind="xid", xid=31)})
    late = parse_fault(
        {
            "metadata": {"name": "late", "creationTimestamp": "2026-12-01T10:05:00Z"},
            "spec": obj(device=h0, kind="xid", xid=79)["spec"],
        }
    )
    effects, _ = FaultTracker(inventory.devices, DEFAULT_IGNORED_XIDS).effects([late, early], T0 + 600)
    assert effects.taints[h0] == [
        {
            "key": "gpu.nvidia.com/xid",
            "value": "79",
            "effect": "NoSchedule",
            "timeAdded": "2026-12-01T10:05:00Z",
        }
    ]
    assert effects.health[h0][0] == "Unhealthy"


# ---- time, stickiness, status ------------------------------------------------------------------


def test_phases_and_sticky_recovery(inventory: Inventory) -> None:
    _, h0, _, _ = names(inventory)
    f = fault("x", device=h0, kind="xid", xid=79, startAfterSeconds=10, durationSeconds=20)
    tracker = FaultTracker(inventory.devices, DEFAULT_IGNORED_XIDS)
    effects, status = tracker.effects([f], T0 + 5)
    assert effects == Effects() and status["x"][0] == "Pending"
    assert f.next_change(T0 + 5) == T0 + 10
    effects, status = tracker.effects([f], T0 + 10)
    assert status["x"] == ("Active", f"on {h0}") and h0 in effects.taints and h0 in effects.health
    assert f.next_change(T0 + 10) == T0 + 30
    effects, status = tracker.effects([f], T0 + 30)
    assert status["x"] == ("Recovered", "ended; its taint stays until the plugin restarts (recovery: sticky)")
    assert h0 in effects.taints and h0 in effects.health  # NVIDIA: until the plugin restarts
    effects, _ = tracker.effects([], T0 + 40)  # deleted: still there
    assert h0 in effects.taints
    effects, _ = FaultTracker(inventory.devices, DEFAULT_IGNORED_XIDS).effects([], T0 + 40)  # a restart
    assert effects == Effects()


def test_clear_recovery_removes_the_taint(inventory: Inventory) -> None:
    _, h0, _, _ = names(inventory)
    f = fault("x", device=h0, kind="gpu-lost", durationSeconds=20, recovery="clear")
    tracker = FaultTracker(inventory.devices, DEFAULT_IGNORED_XIDS)
    assert tracker.effects([f], T0 + 1)[0].taints
    effects, status = tracker.effects([f], T0 + 20)
    assert effects == Effects() and status["x"] == ("Recovered", "ended")
    assert tracker.effects([], T0 + 1)[0] == Effects()  # deleted while active: gone


def test_a_mig_mode_gpu_is_named_by_a_mig_device_for_an_xid(inventory: Inventory) -> None:
    mig, _, _, _ = names(inventory)
    with pytest.raises(FaultError, match=f"is in MIG mode .* name one of its MIG devices \\({mig}\\)"):
        find_target(fault(device=inventory.devices[mig].gpu_uuid, kind="xid", xid=79), inventory.devices)


def test_unknown_device_fails_that_fault_only(inventory: Inventory) -> None:
    _, h0, _, _ = names(inventory)
    tracker = FaultTracker(inventory.devices, DEFAULT_IGNORED_XIDS)
    effects, status = tracker.effects(
        [fault("bad", device="gpu-99", kind="gpu-lost"), fault("good", device=h0, kind="xid", xid=79)], T0
    )
    assert (
        status["bad"][0] == "Failed"
        and "spec.device: 'gpu-99' is not a device of node node-1" in status["bad"][1]
    )
    assert list(effects.taints) == [h0]


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"device": "gpu-0", "kind": "meltdown"}, "spec.kind: 'meltdown' is not one of xid, gpu-lost"),
        ({"device": "gpu-0", "kind": "xid"}, "spec.xid: kind xid needs an Xid number"),
        ({"device": "gpu-0", "kind": "xid", "xid": "79"}, "spec.xid: expected int"),
        ({"device": "gpu-0", "kind": "xid", "xid": True}, "spec.xid: expected int"),
        ({"kind": "gpu-lost"}, "spec.device: required"),
        ({"device": "gpu-0", "kind": "gpu-lost", "recovery": "never"}, "spec.recovery: 'never'"),
        (
            {"device": "gpu-0", "kind": "gpu-lost", "effect": "PreferNoSchedule"},
            "spec.effect: 'PreferNoSchedule'",
        ),
        ({"device": "gpu-0", "kind": "gpu-lost", "durationSeconds": 0}, "spec.durationSeconds: must be > 0"),
        (
            {"device": "gpu-0", "kind": "gpu-lost", "startAfterSeconds": -1},
            "spec.startAfterSeconds: must be >= 0",
        ),
        ({"device": "gpu-0", "kind": "ecc", "ecc": {"type": "triple"}}, "spec.ecc.type: 'triple'"),
        (
            {"device": "gpu-0", "kind": "ecc", "ecc": {"count": 0}},
            "spec.ecc.count: expected a positive integer",
        ),
        ({"device": "gpu-0", "kind": "thermal", "thermal": {"temperature": 900}}, "spec.thermal.temperature"),
    ],
)
def test_bad_faults_name_the_field(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(FaultError, match=message.replace("(", r"\(")):
        parse_fault(obj(**spec))


def test_missing_node_and_spec() -> None:
    with pytest.raises(FaultError, match="spec: missing"):
        parse_fault({"metadata": {"name": "x"}})
    with pytest.raises(FaultError, match=r"spec\.nodeName: required"):
        parse_fault({"metadata": {"name": "x"}, "spec": {"device": "gpu-0", "kind": "gpu-lost"}})


# ---- the plugin: gates and slices ----------------------------------------------------------------


def test_health_check_gate_is_exclusive_with_dynamic_mig() -> None:
    assert parse_feature_gates("NVMLDeviceHealthCheck=true").enabled("NVMLDeviceHealthCheck")
    with pytest.raises(
        StartupError,
        match="feature gate DynamicMIG is currently mutually exclusive with NVMLDeviceHealthCheck",
    ):
        parse_feature_gates("DynamicMIG=true,NVMLDeviceHealthCheck=true")


@pytest.mark.parametrize(
    ("minor", "kept"),
    [(34, ["gpu.nvidia.com/xid"]), (35, ["gpu.nvidia.com/unmonitored", "gpu.nvidia.com/xid"])],
)
def test_slices_carry_taints_and_drop_effect_none_before_1_35(
    inventory: Inventory, minor: int, kept: list[str]
) -> None:
    _, h0, _, _ = names(inventory)
    driver = GpuDriver("gpu.nvidia.com", inventory, parse_feature_gates(""), DeviceNodePolicy("never"))
    server = ServerInfo((1, minor), ("v1",))
    before = driver.desired_slices(server)
    assert driver.desired_slices(server) is before  # cached while nothing changes
    effects, _ = FaultTracker(inventory.devices, DEFAULT_IGNORED_XIDS).effects(
        [fault("a", device=h0, kind="xid", xid=79), fault("b", device=h0, kind="unmonitored")], T0
    )
    driver._taints = effects.taints  # what start_background's apply does with the gate on
    devices = {d["name"]: d for s in driver.desired_slices(server) for d in s.devices}
    assert [t["key"] for t in devices[h0].get("taints", [])] == kept
    assert [n for n, d in devices.items() if "taints" in d] == [h0]


def test_xid_events_have_the_resolution_of_a_second(inventory: Inventory) -> None:
    """The event number is the start in ms, but creationTimestamp has whole seconds
    (docs/nvml.md `fault_xid_seq`): two Xids on a GPU starting in the same second are one event,
    with the Xid of the fault later by name; one a second later is a new event."""
    _, h0, _, _ = names(inventory)
    gpu0 = inventory.devices[h0].gpu_uuid
    tracker = FaultTracker(inventory.devices, DEFAULT_IGNORED_XIDS)
    same = [fault("b", device=h0, kind="xid", xid=94), fault("a", device=h0, kind="xid", xid=79)]
    assert tracker.effects(same, T0)[0].gpus[gpu0] == {"xid": 94, "xid_seq": int(T0 * 1000)}
    later = [*same, fault("c", device=h0, kind="xid", xid=31, startAfterSeconds=1)]
    assert tracker.effects(later, T0 + 1)[0].gpus[gpu0] == {"xid": 31, "xid_seq": int(T0 * 1000) + 1000}


def test_gpu_state_for_nvidia_smi_follows_active_faults_only(inventory: Inventory) -> None:
    """What nvidia-smi shows is the hardware now: no stickiness, ECC counts summed, hottest wins."""
    mig, h0, _, _ = names(inventory)
    faults = [
        fault("t1", device=h0, kind="thermal", thermal={"temperature": 91}),
        fault("t2", device=h0, kind="thermal", thermal={"temperature": 97}, durationSeconds=60),
        fault("e1", device=h0, kind="ecc", ecc={"type": "single", "count": 3}),
        fault("e2", device=h0, kind="ecc", ecc={"type": "double", "count": 2}),
        fault("e3", device=h0, kind="ecc", ecc={"type": "double", "count": 1}),
        fault("l", device=mig, kind="gpu-lost", startAfterSeconds=30),
        fault("x", device=mig, kind="xid", xid=79),
    ]
    tracker = FaultTracker(inventory.devices, DEFAULT_IGNORED_XIDS)
    gpu0, gpu_mig = inventory.devices[h0].gpu_uuid, inventory.devices[mig].gpu_uuid
    # the Xid the driver logged: a double-bit ECC error is Xid 48, a lost GPU Xid 79; its sequence
    # number is the start (ms) of the latest Xid event, so the GPU lost 30 s later is a new event
    seq = int(T0 * 1000)
    assert tracker.effects(faults, T0)[0].gpus == {
        gpu0: {"temperature": 97, "ecc_sbe": 3, "ecc_dbe": 3, "xid": 48, "xid_seq": seq},
        gpu_mig: {"xid": 79, "xid_seq": seq},
    }
    assert tracker.effects(faults, T0 + 60)[0].gpus == {
        gpu0: {"temperature": 91, "ecc_sbe": 3, "ecc_dbe": 3, "xid": 48, "xid_seq": seq},
        gpu_mig: {"lost": 1, "xid": 79, "xid_seq": seq + 30_000},
    }
    # the same faults read by a restarted plugin (a new tracker) number the events the same
    restarted = FaultTracker(inventory.devices, DEFAULT_IGNORED_XIDS)
    assert restarted.effects(faults, T0 + 60)[0].gpus[gpu_mig] == {
        "lost": 1,
        "xid": 79,
        "xid_seq": seq + 30_000,
    }
    assert tracker.effects([], T0 + 60)[0].gpus == {}  # the sticky Xid taint stays; the GPU state does not
