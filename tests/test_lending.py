"""Idle-GPU lending (dra_fake.gpu.lending, docs/sharing.md): the lend views an inventory gains,
how they are published, and the state machine that taints them from samples of owner utilization."""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml
from crash_helper import make_claim, make_devices, make_state, result
from prometheus_client import REGISTRY

from dra_fake.core.resourceapi import ServerInfo
from dra_fake.gpu import lendinggate
from dra_fake.gpu.configs import FeatureGates
from dra_fake.gpu.deviceclasses import spot_class
from dra_fake.gpu.devnodes import DeviceNodePolicy
from dra_fake.gpu.inventory import Inventory, build_inventory, parse_config
from dra_fake.gpu.lending import (
    BUSY,
    LENDABLE,
    NOT_LENDABLE_TAINT,
    SPOT_TAINT,
    UNKNOWN,
    UNOWNED,
    Lending,
    LendingSettingError,
    LendingSettings,
    Owners,
    event,
    lent_gpus,
    with_lend_views,
)
from dra_fake.gpu.plugin import GpuDriver
from dra_fake.gpu.profiles import load_profiles
from dra_fake.gpu.runtime import Host, Node, NodeSettings
from dra_fake.gpu.services.lending import Lending as LendingService
from dra_fake.gpu.slices import desired_slices

DRIVER = "gpu.nvidia.com"
T0 = 1_800_000_000.0
UID_OWNER = "0a000000-0000-0000-0000-000000000001"
UID_SPOT = "0b000000-0000-0000-0000-000000000002"
IDLE, BUSY_OWNER, NOBODY = Owners(True, 3), Owners(True, 85), Owners(False, 0)


def inventory() -> Inventory:
    config = parse_config(
        {
            "gpus": [
                {"profile": "h100-sxm5-80gb", "count": 2},
                {
                    "profile": "a100-sxm4-40gb",
                    "mig": "static",
                    "migDevices": [{"profile": "3g.20gb", "start": 0}],
                },
            ]
        },
        "test",
    )
    return with_lend_views(build_inventory(config, "node-a", load_profiles()))


def test_lend_views_sit_beside_full_gpus_only_and_publish_as_spot() -> None:
    inv = inventory()
    assert lent_gpus(inv.devices) == ["gpu-0", "gpu-1"]
    spot = inv.devices["gpu-0-spot"]
    gpu = inv.devices["gpu-0"]
    assert (spot.uuid, spot.minor, spot.pci_bus_id, spot.lends) == (
        gpu.uuid,
        gpu.minor,
        gpu.pci_bus_id,
        "gpu-0",
    )
    [slice_] = desired_slices(inv, DRIVER, (1, 37), {})
    entries = {d["name"]: d for d in slice_.devices}
    assert "gpu-2-spot" not in entries  # a MIG GPU is not lent
    attributes = entries["gpu-0-spot"]["attributes"]
    assert attributes["type"] == {"string": "spot"} and attributes["dra-fake.dev/lender"] == {
        "string": "gpu-0"
    }
    assert attributes["uuid"] == entries["gpu-0"]["attributes"]["uuid"]
    assert entries["gpu-0"]["attributes"]["type"] == {"string": "gpu"}
    expression = spot_class(DRIVER)["spec"]["selectors"][0]["cel"]["expression"]
    assert spot_class(DRIVER)["metadata"]["name"] == "spot.gpu.nvidia.com" and "'spot'" in expression


def not_lendable(state: Lending) -> tuple[str, str] | None:
    taints = state.taints(["gpu-0"])["gpu-0-spot"]
    assert taints[0] == {
        "key": SPOT_TAINT,
        "value": "true",
        "effect": "NoSchedule",
        "timeAdded": "2027-01-15T08:00:00Z",
    }
    found = [(t["value"], t["effect"]) for t in taints if t["key"] == NOT_LENDABLE_TAINT]
    return found[0] if found else None


def test_lent_after_idle_for_reclaimed_at_once_and_lent_again_only_after_idle_for() -> None:
    state = Lending(LendingSettings(threshold=10, idle_for=30), T0)
    assert state.state("gpu-0") == UNKNOWN and not_lendable(state) == ("unknown", "NoSchedule")
    assert state.observe(T0 + 5, {"gpu-0": IDLE}) == {}  # idle, not yet for 30 s
    assert state.observe(T0 + 34, {"gpu-0": IDLE}) == {}
    assert state.observe(T0 + 35, {"gpu-0": IDLE}) == {"gpu-0": (UNKNOWN, LENDABLE)}
    assert not_lendable(state) is None
    assert state.observe(T0 + 40, {"gpu-0": BUSY_OWNER}) == {"gpu-0": (LENDABLE, BUSY)}  # reclaim
    assert not_lendable(state) == ("busy", "NoExecute")
    taint = state.taints(["gpu-0"])["gpu-0-spot"][1]
    assert taint["timeAdded"] == "2027-01-15T08:00:40Z"
    # idle again: busy until 30 s of idle samples (no flapping)
    assert state.observe(T0 + 45, {"gpu-0": IDLE}) == {}
    assert state.observe(T0 + 50, {"gpu-0": BUSY_OWNER}) == {}
    assert state.observe(T0 + 55, {"gpu-0": IDLE}) == {}
    assert state.observe(T0 + 80, {"gpu-0": IDLE}) == {}
    assert state.observe(T0 + 85, {"gpu-0": IDLE}) == {"gpu-0": (BUSY, LENDABLE)}


def test_a_gpu_without_owners_is_not_lent_and_a_new_owner_starts_busy() -> None:
    state = Lending(LendingSettings(threshold=10, idle_for=10), T0)
    assert state.observe(T0 + 5, {"gpu-0": NOBODY}) == {"gpu-0": (UNKNOWN, UNOWNED)}
    assert not_lendable(state) == ("unowned", "NoExecute")
    assert state.observe(T0 + 10, {"gpu-0": IDLE}) == {"gpu-0": (UNOWNED, BUSY)}
    assert state.observe(T0 + 20, {"gpu-0": IDLE}) == {"gpu-0": (BUSY, LENDABLE)}
    assert state.observe(T0 + 25, {"gpu-0": NOBODY}) == {"gpu-0": (LENDABLE, UNOWNED)}


@pytest.mark.parametrize(
    ("threshold", "idle_for", "named"),
    [
        (0, 60, "--gpu-lending-idle-threshold"),
        (101, 60, "--gpu-lending-idle-threshold"),
        (10, -1, "--gpu-lending-idle-for"),
    ],
)
def test_bad_settings_name_their_flag(threshold: int, idle_for: float, named: str) -> None:
    with pytest.raises(LendingSettingError, match=named):
        LendingSettings(threshold, idle_for)


def test_a_lend_view_prepares_as_its_gpu_beside_the_owner(tmp_path: Path) -> None:
    """The owner's claim on gpu-0 and a spot claim on gpu-0-spot prepare side by side: the spot
    container gets the same GPU UUID, marked as lent; unpreparing it leaves the owner's claim."""
    devices = make_devices()
    spot = dataclasses.replace(devices["gpu-0"], name="gpu-0-spot", lends="gpu-0")
    state = make_state(tmp_path, devices={**devices, "gpu-0-spot": spot})
    state.prepare(make_claim(UID_OWNER, [result("gpu", "gpu-0")], name="owner"))
    state.prepare(make_claim(UID_SPOT, [result("gpu", "gpu-0-spot")], name="spot"))
    spec = yaml.safe_load(state.cdi.path(UID_SPOT).read_text())
    env = dict(e.split("=", 1) for d in spec["devices"] for e in d["containerEdits"]["env"])
    assert env["DRA_FAKE_GPU_0_SPOT_UUID"] == devices["gpu-0"].uuid
    assert (env["DRA_FAKE_GPU_0_SPOT_SPOT"], env["DRA_FAKE_GPU_0_SPOT_LENDER"]) == ("true", "gpu-0")
    state.unprepare(UID_SPOT)
    assert state.prepared_claims().keys() == {UID_OWNER}


def test_each_move_but_into_unknown_has_its_node_event() -> None:
    settings = LendingSettings(threshold=10, idle_for=60)
    assert event("gpu-0", LENDABLE, IDLE, settings) == (
        "GpuLendable",
        "gpu-0 lendable: owners idle (3% < 10%) for 60s",
    )
    assert event("gpu-0", BUSY, BUSY_OWNER, settings) == (
        "GpuReclaimed",
        "gpu-0 reclaimed: owners at 85% (>= 10%)",
    )
    assert event("gpu-0", UNOWNED, NOBODY, settings) == (
        "GpuNotLendable",
        "gpu-0 not lendable: no claim is prepared on it",
    )
    assert event("gpu-0", UNKNOWN, IDLE, settings) is None


def test_a_server_without_device_taints_is_refused_naming_the_gate() -> None:
    """Lending without taints would oversell with no reclaim: the plugin refuses such a server."""
    refusal = lendinggate.GATE.version_refusal(lendinggate.SETTING, (1, 32), "v1.32.5")
    assert refusal == (
        "--gpu-lending needs device taints (feature gate DRADeviceTaints, Kubernetes 1.33+); "
        "the API server is v1.32.5"
    )
    assert lendinggate.GATE.version_refusal(lendinggate.SETTING, (1, 33), "v1.33.4") is None
    kept = {"spec": {"devices": [lendinggate.PROBE_DEVICE]}}
    assert lendinggate.GATE.fields_kept(kept)
    assert lendinggate.GATE.fields_kept(
        {"spec": {"devices": [{"basic": lendinggate.PROBE_DEVICE}]}}
    )  # v1beta1
    assert not lendinggate.GATE.fields_kept({"spec": {"devices": [{"name": "gpu-lending-probe"}]}})
    assert "DRADeviceTaints" in lendinggate.GATE.dropped_refusal(lendinggate.SETTING)


def test_the_plugins_first_slice_already_keeps_spot_claims_off_the_lend_views() -> None:
    """Before the lending service's first sample, every lend view is `unknown` (NoSchedule)."""
    settings = NodeSettings(DRIVER, lending=LendingSettings())
    driver = GpuDriver(
        DRIVER, inventory(), FeatureGates.of(), DeviceNodePolicy("never"), node_settings=settings
    )
    [first] = driver.desired_slices(ServerInfo((1, 37), ("v1",)))
    taints = {
        d["name"]: [(t["key"], t.get("value"), t["effect"]) for t in d.get("taints", [])]
        for d in first.devices
    }
    assert taints["gpu-0-spot"] == [
        (SPOT_TAINT, "true", "NoSchedule"),
        (NOT_LENDABLE_TAINT, "unknown", "NoSchedule"),
    ]
    assert taints["gpu-0"] == []


def test_the_service_moves_states_from_samples_publishes_taints_and_counts_reclaims() -> None:
    """The lending service on a node's runtime: samples in, lend-view taints out to the owner,
    `dra_fake_gpu_lending_state` and `dra_fake_gpu_reclaims_total` on the plugin's endpoint."""
    settings = NodeSettings(DRIVER, lending=LendingSettings(threshold=10, idle_for=0))

    def no_api() -> Any:
        raise RuntimeError("no API server in this test")

    host = Host(settings, no_api, threading.Event(), services=(LendingService,))
    runtime = host.node(Node("node-a", inventory(), holdings=list))
    published: list[dict[str, list[dict[str, str]]]] = []
    runtime.on_lending(published.append)
    runtime.start()
    assert (
        REGISTRY.get_sample_value("dra_fake_gpu_lending_state", {"device": "gpu-0", "state": "unknown"}) == 1
    )
    reclaims = REGISTRY.get_sample_value("dra_fake_gpu_reclaims_total", {"device": "gpu-0"}) or 0
    runtime.sampled(T0, {"gpu-0": IDLE, "gpu-1": NOBODY})
    runtime.sampled(T0 + 5, {"gpu-0": BUSY_OWNER, "gpu-1": NOBODY})
    assert [[t["value"] for t in p["gpu-0-spot"] if t["key"] == NOT_LENDABLE_TAINT] for p in published] == [
        ["unknown"],
        [],
        ["busy"],
    ]
    assert REGISTRY.get_sample_value("dra_fake_gpu_lending_state", {"device": "gpu-0", "state": "busy"}) == 1
    assert (
        REGISTRY.get_sample_value("dra_fake_gpu_lending_state", {"device": "gpu-0", "state": "lendable"}) == 0
    )
    assert REGISTRY.get_sample_value("dra_fake_gpu_reclaims_total", {"device": "gpu-0"}) == reclaims + 1
