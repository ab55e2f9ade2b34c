"""Idle-GPU lending (dra_fake.gpu.lending, docs/sharing.md): the lend views an inventory gains,
how they are published, and the state machine that taints them from samples of owner utilization."""

from __future__ import annotations

import pytest

from dra_fake.gpu.deviceclasses import spot_class
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
    lent_gpus,
    with_lend_views,
)
from dra_fake.gpu.profiles import load_profiles
from dra_fake.gpu.slices import desired_slices

DRIVER = "gpu.nvidia.com"
T0 = 1_800_000_000.0
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
