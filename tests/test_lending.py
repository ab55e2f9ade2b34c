"""Idle-GPU lending (dra_fake.gpu.lending, docs/sharing.md): the lend views an inventory gains,
how they are published, and the state machine that taints them from samples of owner utilization."""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from crash_helper import make_claim, make_devices, make_state, result
from prometheus_client import REGISTRY

from dra_fake.core.claims import ClaimError, PermanentClaimError, parse_claim
from dra_fake.core.resourceapi import ServerInfo
from dra_fake.core.serving import PluginContext
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
    LendingStateError,
    Owners,
    event,
    lent_gpus,
    with_lend_views,
)
from dra_fake.gpu.lendingfile import FILE_NAME, KeptLending
from dra_fake.gpu.monitor import GpuMonitor
from dra_fake.gpu.nvidia_smi import NvidiaSmi
from dra_fake.gpu.plugin import GpuDriver
from dra_fake.gpu.profiles import load_profiles
from dra_fake.gpu.runtime import Host, Node, NodeSettings
from dra_fake.gpu.services.lending import Lending as LendingService
from dra_fake.gpu.slices import desired_slices
from dra_fake.gpu.state import DeviceState
from dra_fake.kubelet.device_health import DeviceHealthBoard

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


def spot_devices() -> dict[str, Any]:
    devices = make_devices()
    return {**devices, "gpu-0-spot": dataclasses.replace(devices["gpu-0"], name="gpu-0-spot", lends="gpu-0")}


@pytest.mark.parametrize(
    ("state", "why"),
    [
        (BUSY, "its owners are busy"),
        (UNOWNED, "no claim is prepared on it"),
        (UNKNOWN, "its owners have not been seen idle since the plugin started"),
    ],
)
def test_a_spot_claim_on_a_gpu_that_is_not_lendable_is_refused_naming_why(
    tmp_path: Path, state: str, why: str
) -> None:
    """The scheduler may have allocated the lend view from an older slice (or the claim tolerates
    the taint): prepare refuses it, retryably, in NVIDIA's wording, and changes nothing else."""
    lend_states = {"gpu-0-spot": state}
    prepared = make_state(tmp_path, devices=spot_devices(), lend_state=lend_states.get)
    prepared.prepare(make_claim(UID_OWNER, [result("gpu", "gpu-0")], name="owner"))
    with pytest.raises(ClaimError) as refused:
        prepared.prepare(make_claim(UID_SPOT, [result("gpu", "gpu-0-spot")], name="spot"))
    assert not isinstance(refused.value, PermanentClaimError)  # the kubelet retries: it may be lent later
    assert str(refused.value) == (
        f"error preparing devices for claim default/spot:{UID_SPOT}: prepare devices failed: "
        f"requested device gpu-0-spot is not lendable now: GPU gpu-0 is {state} "
        f"(dra-fake.dev/not-lendable={state}: {why})"
    )
    assert prepared.prepared_claims().keys() == {UID_OWNER}
    assert not prepared.cdi.path(UID_SPOT).exists()
    # lendable again: the kubelet's retry prepares it; a later reclaim leaves the prepared claim be
    # (idempotent: kube-controller-manager's eviction unprepares it)
    lend_states["gpu-0-spot"] = None  # type: ignore[assignment]
    devices = prepared.prepare(make_claim(UID_SPOT, [result("gpu", "gpu-0-spot")], name="spot"))
    lend_states["gpu-0-spot"] = BUSY
    again = prepared.prepare(make_claim(UID_SPOT, [result("gpu", "gpu-0-spot")], name="spot"))
    assert [d.device_name for d in again] == [d.device_name for d in devices] == ["gpu-0-spot"]


def test_a_spot_claim_where_lending_is_off_is_refused_naming_the_flag(tmp_path: Path) -> None:
    prepared = make_state(tmp_path)  # no lend views: the plugin runs without --gpu-lending
    with pytest.raises(PermanentClaimError, match="not allocatable: gpu-0-spot") as refused:
        prepared.prepare(make_claim(UID_SPOT, [result("gpu", "gpu-0-spot")], name="spot"))
    assert "(the lend view of gpu-0: idle-GPU lending is off on this node, --gpu-lending=false)" in str(
        refused.value
    )


def plugin_context(root: Path) -> PluginContext:
    for sub in ("plugin", "cdi"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    return PluginContext("", "node-a", root / "plugin", root / "cdi", threading.Event(), DeviceHealthBoard())


def test_the_plugin_prepares_spot_claims_by_its_published_lend_view_taints(tmp_path: Path) -> None:
    """The plugin's answer is what its slice says: before the service's first sample every lend
    view is `unknown`, so a spot claim is refused from the first call the kubelet makes."""
    settings = NodeSettings(DRIVER, lending=LendingSettings())
    driver = GpuDriver(
        DRIVER, inventory(), FeatureGates.of(), DeviceNodePolicy("never"), node_settings=settings
    )
    state = driver.create_state(plugin_context(tmp_path))
    assert isinstance(state, DeviceState) and state.lend_state is not None
    assert state.lend_state("gpu-0-spot") == UNKNOWN
    assert driver.lend_state("gpu-9-spot") == UNKNOWN  # no such lend view: never lent
    off = GpuDriver(DRIVER, inventory(), FeatureGates.of(), DeviceNodePolicy("never"))
    off_ctx = plugin_context(tmp_path / "off")
    (off_ctx.data_dir / FILE_NAME).write_text("{}")  # kept by an earlier run with lending on
    off_state = off.create_state(off_ctx)
    assert isinstance(off_state, DeviceState) and off_state.lend_state is None
    assert not (off_ctx.data_dir / FILE_NAME).exists()  # stale when lending is on again: dropped


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


def test_a_restarted_plugin_publishes_and_prepares_by_the_restored_state(tmp_path: Path) -> None:
    """From create_state on, before the lending service runs: the first slice carries the
    restored taints (the lent GPU's lend view untainted, its spot taint's timeAdded unchanged) and
    a spot claim on it is prepared, while the reclaimed GPU's is refused."""
    settings = NodeSettings(DRIVER, lending=LendingSettings(threshold=10, idle_for=0))
    before = Lending(settings.lending, T0)  # type: ignore[arg-type]
    before.observe(T0 + 5, {"gpu-0": IDLE, "gpu-1": BUSY_OWNER})
    ctx = plugin_context(tmp_path)
    (ctx.data_dir / FILE_NAME).write_text(json.dumps(before.saved()))
    driver = GpuDriver(
        DRIVER, inventory(), FeatureGates.of(), DeviceNodePolicy("never"), node_settings=settings
    )
    state = driver.create_state(ctx)
    assert isinstance(state, DeviceState) and state.lend_state is not None
    assert (state.lend_state("gpu-0-spot"), state.lend_state("gpu-1-spot")) == (None, BUSY)
    [first] = driver.desired_slices(ServerInfo((1, 37), ("v1",)))
    taints = {d["name"]: d.get("taints", []) for d in first.devices}
    assert taints["gpu-0-spot"] == before.taints(["gpu-0"])["gpu-0-spot"]
    assert taints["gpu-1-spot"] == before.taints(["gpu-1"])["gpu-1-spot"]


def test_the_service_goes_on_from_the_restored_state_and_keeps_each_sample(tmp_path: Path) -> None:
    settings = NodeSettings(DRIVER, lending=LendingSettings(threshold=10, idle_for=30))
    path = tmp_path / FILE_NAME
    before = Lending(settings.lending, T0)  # type: ignore[arg-type]
    before.observe(T0 + 5, {"gpu-0": IDLE})
    before.observe(T0 + 35, {"gpu-0": IDLE})
    path.write_text(json.dumps(before.saved()))
    kept = KeptLending(settings.lending, T0 + 40, path)  # type: ignore[arg-type]

    def no_api() -> Any:
        raise RuntimeError("no API server in this test")

    host = Host(settings, no_api, threading.Event(), services=(LendingService,))
    runtime = host.node(Node("node-a", inventory(), holdings=list, lending=kept))
    published: list[dict[str, list[dict[str, str]]]] = []
    runtime.on_lending(published.append)
    runtime.start()
    assert [t["key"] for t in published[0]["gpu-0-spot"]] == [SPOT_TAINT]  # still lent: no unknown
    runtime.sampled(T0 + 45, {"gpu-0": IDLE, "gpu-1": NOBODY})
    assert json.loads(path.read_text())["sampled"] == T0 + 45
    assert json.loads(path.read_text())["gpus"]["gpu-0"]["state"] == LENDABLE


def test_owners_are_sampled_for_lending_only_once_their_pods_are_listed(tmp_path: Path) -> None:
    """Before the pod informer's first list an owner's pod is not known and its GPU looks idle: a
    restarted plugin must not lend a busy owner's GPU on that."""
    inv = inventory()
    seen: list[Mapping[str, Owners]] = []
    monitor = GpuMonitor(
        inv,
        list,
        NvidiaSmi.from_inventory(tmp_path, inv),
        "node-a",
        DRIVER,
        on_sample=lambda now, owners: seen.append(owners),
    )
    monitor.sample()
    assert seen == []
    monitor.set_pods([])
    monitor.sample()
    assert seen and seen[0]["gpu-0"] == Owners(False, 0)


NOT_LENDABLE_NO_EXECUTE = {"key": NOT_LENDABLE_TAINT, "operator": "Exists", "effect": "NoExecute"}
SPOT_NO_SCHEDULE = {"key": SPOT_TAINT, "operator": "Exists", "effect": "NoSchedule"}


@pytest.mark.parametrize(
    ("tolerations", "forever"),
    [
        ([SPOT_NO_SCHEDULE, NOT_LENDABLE_NO_EXECUTE], BUSY),
        ([{"operator": "Exists"}], BUSY),  # every key, every effect
        ([{"key": NOT_LENDABLE_TAINT, "value": "unowned", "effect": "NoExecute"}], UNOWNED),
        ([{**NOT_LENDABLE_NO_EXECUTE, "tolerationSeconds": 30}], None),  # a grace period: reclaimed
        ([{**NOT_LENDABLE_NO_EXECUTE, "effect": "NoSchedule"}], None),
        ([SPOT_NO_SCHEDULE], None),
    ],
)
def test_a_spot_claim_that_could_never_be_reclaimed_is_refused(
    tmp_path: Path, tolerations: list[dict[str, Any]], forever: str | None
) -> None:
    """A spot result (tolerations copied from its request, Kubernetes 1.35+) that tolerates a
    reclaim taint without tolerationSeconds would never be evicted: refused for good, however
    lendable its GPU is."""
    prepared = make_state(tmp_path, devices=spot_devices(), lend_state={}.get)
    claim = make_claim(UID_SPOT, [result("gpu", "gpu-0-spot", tolerations=tolerations)], name="spot")
    if forever is None:
        assert [d.device_name for d in prepared.prepare(claim)] == ["gpu-0-spot"]
        return
    with pytest.raises(PermanentClaimError) as refused:
        prepared.prepare(claim)
    assert str(refused.value).endswith(
        "prepare devices failed: requested device gpu-0-spot: the spot claim tolerates "
        f"dra-fake.dev/not-lendable={forever}:NoExecute forever, so it could never be reclaimed "
        "(give that toleration tolerationSeconds)"
    )
    assert prepared.prepared_claims() == {}


@pytest.mark.parametrize(
    ("tolerations", "named"),
    [
        ({}, "results[0].tolerations is not an array"),
        ([{"key": 1}], "results[0].tolerations[0].key is not a string"),
        ([{"tolerationSeconds": "30"}], "results[0].tolerations[0].tolerationSeconds is not an integer"),
    ],
)
def test_a_results_bad_tolerations_are_refused_naming_the_field(tolerations: Any, named: str) -> None:
    claim = make_claim(UID_SPOT, [result("gpu", "gpu-0-spot", tolerations=tolerations)])
    with pytest.raises(PermanentClaimError, match=re.escape(named)):
        parse_claim(claim, DRIVER)
