"""Idle-GPU lending in the GPU plugin (dra_fake.gpu.lending, docs/sharing.md): a lend view prepared
beside its owner, the feature gate probe, the published slices and their taints, the sampling
service, spot claims refused or prepared by the published taints, and a restarted plugin going on
from the kept state. The state machine itself is in tests/test_lending.py."""

from __future__ import annotations

import dataclasses
import json
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
from dra_fake.gpu.devnodes import DeviceNodePolicy
from dra_fake.gpu.lending import (
    BUSY,
    LENDABLE,
    NOT_LENDABLE_TAINT,
    SPOT_TAINT,
    UNKNOWN,
    UNOWNED,
    Lending,
    LendingSettings,
    Owners,
)
from dra_fake.gpu.lendingfile import FILE_NAME, KeptLending
from dra_fake.gpu.monitor import GpuMonitor
from dra_fake.gpu.nvidia_smi import NvidiaSmi
from dra_fake.gpu.plugin import GpuDriver
from dra_fake.gpu.runtime import Host, Node, NodeSettings
from dra_fake.gpu.services.lending import Lending as LendingService
from dra_fake.gpu.state import DeviceState
from dra_fake.kubelet.device_health import DeviceHealthBoard
from tests.lendingnode import BUSY_OWNER, DRIVER, IDLE, NOBODY, T0, UID_OWNER, UID_SPOT, inventory


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
