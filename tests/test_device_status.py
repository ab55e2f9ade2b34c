"""Prepared devices' status in their claims (dra_fake.core.devicestatus, --device-status): each
device prepared for a claim is Ready with its data (UUID; a MIG device's parent and profile; a
dynamic MIG device's UUID the one created for the claim), written after the prepare, apart from it,
keeping what the driver set before (the attach's conditions)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from crash_helper import BOOT_ID, make_claim

from dra_fake.core import claimstatus, devicestatus
from dra_fake.core.devicestatus import ReportingState
from dra_fake.gpu import attach
from dra_fake.gpu.configs import FeatureGates
from dra_fake.gpu.devices import mig_uuid
from dra_fake.gpu.devnodes import DeviceNodePolicy
from dra_fake.gpu.inventory import build_inventory, parse_config
from dra_fake.gpu.plugin import GpuDriver
from dra_fake.gpu.profiles import load_profiles
from dra_fake.gpu.state import DeviceState

DRIVER = "gpu.nvidia.com"
NODE = "node-a"
UID = "1a111111-1111-1111-1111-111111111111"
STATIC_MIG = "gpu-1-mig-1g10gb-19-0"
DYNAMIC_MIG = "gpu-2-mig-1g10gb-19-1"


@pytest.fixture
def driver(tmp_path: Path) -> GpuDriver:
    config = {
        "gpus": [
            {"profile": "h100-sxm5-80gb"},
            {
                "profile": "h100-sxm5-80gb",
                "mig": "static",
                "migDevices": [{"profile": "1g.10gb", "start": 0}],
            },
            {"profile": "h100-sxm5-80gb", "mig": "dynamic"},
        ]
    }
    inventory = build_inventory(parse_config(config, "node.yaml"), NODE, load_profiles())
    gpu = GpuDriver(DRIVER, inventory, FeatureGates.of(), DeviceNodePolicy("never"), device_status=True)
    (tmp_path / "boot_id").write_text(BOOT_ID + "\n")
    gpu.state = DeviceState(
        driver_name=DRIVER,
        pool_name=NODE,
        devices=inventory.devices,
        cdi_root=tmp_path / "cdi",
        plugin_data_dir=tmp_path / "plugin",
        feature_gates=FeatureGates.of(),
        node_name=NODE,
        boot_id_path=tmp_path / "boot_id",
    )
    return gpu


def result(request: str, device: str) -> dict[str, Any]:
    return {"request": request, "driver": DRIVER, "pool": NODE, "device": device}


class Applied:
    def __init__(self) -> None:
        self.calls: list[tuple[str, list[dict[str, Any]]]] = []
        self.done = threading.Event()

    def __call__(self, api: Any, claim: Any, entries: list[dict[str, Any]], driver: str, version: str) -> Any:
        assert driver == DRIVER
        self.calls.append((version, entries))
        self.done.set()
        return {}


def test_each_prepared_device_is_ready_with_its_data(
    driver: GpuDriver, monkeypatch: pytest.MonkeyPatch
) -> None:
    applied = Applied()
    monkeypatch.setattr(claimstatus, "apply", applied)
    assert driver.state is not None
    stop = threading.Event()
    state = ReportingState(driver.state, DRIVER, driver.device_data, object, lambda: "v1", stop)
    claim = make_claim(UID, [result("a", "gpu-0"), result("b", STATIC_MIG), result("c", DYNAMIC_MIG)])
    try:
        devices = state.prepare(claim)
        assert [d.device_name for d in devices] == ["gpu-0", STATIC_MIG, DYNAMIC_MIG]
        assert applied.done.wait(10)  # written by the reporting thread, after the prepare returned
    finally:
        stop.set()
    [(version, entries)] = applied.calls
    assert version == "v1"
    by_device = {e["device"]: e for e in entries}
    assert all(e["driver"] == DRIVER and e["pool"] == NODE for e in entries)
    assert all([(c["type"], c["status"]) for c in e["conditions"]] == [("Ready", "True")] for e in entries)
    inv = driver.inventory
    assert by_device["gpu-0"]["data"] == {
        "uuid": inv.devices["gpu-0"].uuid,
        "productName": "NVIDIA H100 80GB HBM3",
        "pciBusID": inv.devices["gpu-0"].pci_bus_id,
    }
    static = by_device[STATIC_MIG]["data"]
    assert (static["uuid"], static["parentUUID"], static["profile"]) == (
        inv.devices[STATIC_MIG].uuid,
        inv.gpu(1).uuid,
        "1g.10gb",
    )
    dynamic = by_device[DYNAMIC_MIG]["data"]
    placement = inv.devices[DYNAMIC_MIG].mig
    assert placement is not None
    assert dynamic["uuid"] == mig_uuid(NODE, 2, placement, nonce=UID)  # created for this claim
    assert dynamic["parentUUID"] == inv.gpu(2).uuid


def test_the_attach_conditions_are_kept(driver: GpuDriver) -> None:
    claim = make_claim(UID, [result("a", "gpu-0")])
    claim["status"]["devices"] = [
        {
            "driver": DRIVER,
            "pool": NODE,
            "device": "gpu-0",
            "conditions": [{"type": attach.ATTACHED, "status": "True", "lastTransitionTime": "t0"}],
        }
    ]
    assert driver.state is not None
    prepared = driver.state.prepare(claim)
    [entry] = devicestatus.entries(claim, prepared, DRIVER, driver.device_data)
    assert [c["type"] for c in entry["conditions"]] == ["Ready", attach.ATTACHED]


def test_a_failed_write_keeps_the_prepare(driver: GpuDriver, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any) -> Any:
        raise RuntimeError("422 Unprocessable Entity: the claim was deallocated")

    monkeypatch.setattr(claimstatus, "apply", refuse)
    assert driver.state is not None
    state = ReportingState(driver.state, DRIVER, driver.device_data, object, lambda: "v1", threading.Event())
    claim = make_claim(UID, [result("a", "gpu-0")])
    devices = driver.state.prepare(claim)
    assert state.write(claim, devices) is False
    assert UID in state.prepared_claims()


def test_an_imex_channels_data_names_its_channel_and_domain() -> None:
    import argparse

    from computedomain.plugin.plugin import ComputeDomainDriver
    from dra_fake.kubelet.api import PreparedDevice

    class State:
        def domain_of(self, uid: str) -> str | None:
            return "cd-uid-1" if uid == UID else None

    cd = ComputeDomainDriver(argparse.Namespace(), "")
    cd.state = State()  # type: ignore[assignment]
    claim = make_claim(UID, [])
    channel = PreparedDevice(("channel",), NODE, "channel-0", ())
    daemon = PreparedDevice(("daemon",), NODE, "daemon-0", ())
    assert cd.device_data(claim, channel) == {"computeDomain": "cd-uid-1", "channel": 0}
    assert cd.device_data(claim, daemon) == {"computeDomain": "cd-uid-1"}
