"""Idle-GPU lending (dra_fake.gpu.lending, docs/sharing.md): the lend views an inventory gains, the
state machine that taints them from samples of owner utilization, its settings and node events, and
the state it keeps across restarts. The plugin's side (prepare, slices, the service) is in
tests/test_lending_plugin.py; the node both use in tests/lendingnode.py."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest

from dra_fake.gpu.deviceclasses import spot_class
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
    LendingStateError,
    event,
    lent_gpus,
)
from dra_fake.gpu.lendingfile import FILE_NAME, KeptLending
from dra_fake.gpu.slices import desired_slices
from tests.lendingnode import BUSY_OWNER, DRIVER, IDLE, NOBODY, T0, inventory


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


def round_trip(state: Lending, now: float) -> Lending:
    """What a restarted plugin restores at `now` from what `state` saved (through JSON, as kept)."""
    return Lending.restored(state.settings, now, json.loads(json.dumps(state.saved())), "lending.json")


def test_a_restart_restores_states_taints_and_idle_runs_without_the_time_nobody_sampled() -> None:
    """A lent GPU stays lent and a reclaimed one stays reclaimed, their taints unchanged (no
    eviction, no grace period started over); an idle run goes on, the downtime not counted."""
    before = Lending(LendingSettings(threshold=10, idle_for=30), T0)
    before.observe(T0 + 5, {"gpu-0": IDLE, "gpu-1": BUSY_OWNER})
    before.observe(T0 + 35, {"gpu-0": IDLE, "gpu-1": BUSY_OWNER})
    before.observe(T0 + 40, {"gpu-0": IDLE, "gpu-1": IDLE})  # gpu-1's idle run begins
    assert before.states() == {"gpu-0": LENDABLE, "gpu-1": BUSY}
    after = round_trip(before, T0 + 100)  # down from T0 + 40 to T0 + 100
    assert after.states() == before.states()
    assert after.taints(["gpu-0", "gpu-1"]) == before.taints(["gpu-0", "gpu-1"])
    # gpu-1 was idle for 0 s of its 30 s when the plugin died: 30 s of samples after the restart
    assert after.observe(T0 + 105, {"gpu-0": IDLE, "gpu-1": IDLE}) == {}
    assert after.observe(T0 + 129, {"gpu-0": IDLE, "gpu-1": IDLE}) == {}
    assert after.observe(T0 + 130, {"gpu-0": IDLE, "gpu-1": IDLE}) == {"gpu-1": (BUSY, LENDABLE)}
    # restarted twice before a sample: the second downtime is not counted either
    again = round_trip(round_trip(before, T0 + 100), T0 + 200)
    assert again.observe(T0 + 229, {"gpu-1": IDLE}) == {}
    assert again.observe(T0 + 230, {"gpu-1": IDLE}) == {"gpu-1": (BUSY, LENDABLE)}
    # a busy owner found after the restart reclaims at once, as before it
    assert after.observe(T0 + 135, {"gpu-0": BUSY_OWNER}) == {"gpu-0": (LENDABLE, BUSY)}


@pytest.mark.parametrize(
    ("saved", "named"),
    [
        ({"version": 2, "started": T0, "sampled": None, "gpus": {}}, "lending.json: version"),
        (
            {"version": 1, "started": T0, "sampled": T0, "gpus": {"gpu-0": {"state": "dozing", "since": T0}}},
            "lending.json: gpus.gpu-0.state",
        ),
        ({"version": 1, "started": "soon", "sampled": None, "gpus": {}}, "lending.json: started"),
        ({"version": 1, "started": 1e20, "sampled": None, "gpus": {}}, "lending.json: started"),
        ([], "lending.json"),
    ],
)
def test_a_saved_state_that_cannot_be_restored_names_the_field(saved: Any, named: str) -> None:
    with pytest.raises(LendingStateError, match=named):
        Lending.restored(LendingSettings(), T0, saved, "lending.json")


def test_the_kept_state_survives_a_new_process_and_a_bad_file_starts_unknown(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / FILE_NAME
    settings = LendingSettings(threshold=10, idle_for=0)
    first = KeptLending(settings, T0, path)
    assert first.state.states() == {} and not path.exists()  # nothing kept yet: a fresh start
    first.state.observe(T0 + 5, {"gpu-0": IDLE})
    first.save()
    assert (path.stat().st_mode & 0o777) == 0o600
    cut_short = tmp_path / ".lending.json.0123456789ab.tmp"  # a write a SIGKILL interrupted
    cut_short.write_text("{")
    assert KeptLending(settings, T0 + 60, path).state.states() == {"gpu-0": LENDABLE}
    assert not cut_short.exists()
    for bad in ("{not json", "[" * 100_000):  # the second nested past the decoder's recursion limit
        path.write_text(bad)
        caplog.clear()
        with caplog.at_level(logging.WARNING):
            fresh = KeptLending(settings, T0 + 60, path)
        assert fresh.state.state("gpu-0") == UNKNOWN
        assert "GPU lending state not restored" in caplog.text
    assert KeptLending(settings, T0, None).state.state("gpu-0") == UNKNOWN  # not kept: nothing read
