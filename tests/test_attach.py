"""Fabric-attached GPUs (dra_fake.gpu.attach): the inventory's `attach`, what their slices publish,
the outcomes of simulated attaches, the service that reports them into claims
(dra_fake.gpu.services.attach), the claim status it writes (dra_fake.gpu.claimstatus) and the
start-up check of the server (dra_fake.gpu.attachgate)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from dra_fake.cli import build_parser
from dra_fake.core import claimstatus
from dra_fake.gpu import attach, attachgate
from dra_fake.gpu.attach import AttachConfig
from dra_fake.gpu.inventory import Inventory, InventoryError, build_inventory, parse_config
from dra_fake.gpu.plugin import run_gpu_plugin
from dra_fake.gpu.profiles import load_profiles
from dra_fake.gpu.runtime import Host, Node, NodeSettings
from dra_fake.gpu.services.attach import Attach, Attacher
from dra_fake.gpu.slices import desired_slices

DRIVER = "gpu.nvidia.com"
NODE = "node-a"


def inventory(attach_config: dict[str, Any] | None) -> Inventory:
    groups: list[dict[str, Any]] = [{"profile": "h100-sxm5-80gb", "count": 1}]
    if attach_config is not None:
        groups.append({"profile": "h100-sxm5-80gb", "count": 1, "attach": attach_config})
    return build_inventory(parse_config({"gpus": groups}, "node.yaml"), NODE, load_profiles())


def cfg(**keys: Any) -> AttachConfig:
    return AttachConfig.model_validate(keys)


def test_attach_keys_are_checked_naming_the_field() -> None:
    with pytest.raises(InventoryError, match=r"gpus\.1\.attach\.failureRate"):
        inventory({"failureRate": 2})
    with pytest.raises(InventoryError, match=r"gpus\.1\.attach\.delay"):
        inventory({"delay": 1})
    config = inventory({"delaySeconds": 0.5, "failFirst": 1}).gpu(1).attach
    assert config == cfg(delaySeconds=0.5, failFirst=1)


def test_only_attachable_gpus_publish_binding_conditions() -> None:
    inv = inventory({})
    assert inv.attachable and inv.attach_of("gpu-1") is not None and inv.attach_of("gpu-0") is None
    [only] = desired_slices(inv, DRIVER, (1, 37))
    devices = {d["name"]: d for d in only.devices}
    assert devices["gpu-1"]["bindsToNode"] is True
    assert devices["gpu-1"]["bindingConditions"] == [attach.ATTACHED]
    assert devices["gpu-1"]["bindingFailureConditions"] == [attach.ATTACH_FAILED]
    assert not {"bindsToNode", "bindingConditions"} & set(devices["gpu-0"])
    assert not inventory(None).attachable


def test_outcomes() -> None:
    assert attach.outcome(cfg(hang=True, failFirst=3), "u", 1) == "none"
    first = cfg(failFirst=2)
    assert [attach.outcome(first, "u", n) for n in (1, 2, 3)] == ["failed", "failed", "attached"]
    always = cfg(failureRate=1.0)
    assert attach.outcome(always, "u", 7) == "failed"
    half = cfg(failureRate=0.5)
    draws = [attach.outcome(half, f"claim-{i}", 1) for i in range(400)]
    assert 150 < draws.count("failed") < 250  # about half
    assert draws == [attach.outcome(half, f"claim-{i}", 1) for i in range(400)]  # deterministic


def claim(device: str = "gpu-1", timestamp: str = "2026-12-01T10:00:00Z", **status: Any) -> dict[str, Any]:
    result = {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": device}
    if device == "gpu-1":
        result |= {"bindingConditions": [attach.ATTACHED], "bindingFailureConditions": [attach.ATTACH_FAILED]}
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": "uid-1", "generation": 1},
        "status": {
            "allocation": {"devices": {"results": [result]}, "allocationTimestamp": timestamp},
            **status,
        },
    }


class Recorded:
    """An Attacher whose reports are recorded instead of sent."""

    def __init__(self, config: dict[str, Any]) -> None:
        node = Node(NODE, inventory(config))
        host = Host(NodeSettings(DRIVER, attach=True), self.api, threading.Event(), services=[Attach])
        runtime = host.node(node)
        [service] = runtime.services
        assert isinstance(service, Attacher)
        self.attacher = service
        self.applied: list[list[dict[str, Any]]] = []
        self.done = threading.Event()

    def api(self) -> client.ApiClient:
        return client.ApiClient()


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Any:
    def make(config: dict[str, Any]) -> Recorded:
        rec = Recorded(config)

        def apply(api: Any, claim: Any, entries: list[dict[str, Any]], driver: str) -> dict[str, Any]:
            assert driver == DRIVER
            rec.applied.append(entries)
            rec.done.set()
            return {}

        monkeypatch.setattr(claimstatus, "apply", apply)
        return rec

    return make


def conditions_of(entries: list[dict[str, Any]]) -> dict[str, str]:
    [entry] = entries
    assert (entry["pool"], entry["device"]) == (NODE, "gpu-1")
    return {c["type"]: c["status"] for c in entry["conditions"]}


def test_a_new_allocation_is_attached_after_the_delay(recorded: Any) -> None:
    rec = recorded({"delaySeconds": 0.05})
    assert rec.attacher.seen(claim()) == 0.05
    assert rec.done.wait(5)
    assert conditions_of(rec.applied[0]) == {attach.ATTACHED: "True", attach.ATTACH_FAILED: "False"}
    assert rec.attacher.seen(claim()) is None  # the same allocation: attempted once


def test_a_failed_attempt_then_a_new_allocation_attaches(recorded: Any) -> None:
    rec = recorded({"delaySeconds": 0, "failFirst": 1})
    rec.attacher.seen(claim())
    assert rec.done.wait(5)
    assert conditions_of(rec.applied[0])[attach.ATTACH_FAILED] == "True"
    rec.done.clear()
    rec.attacher.seen(claim(timestamp="2026-12-01T10:00:30Z"))  # the scheduler allocated again
    assert rec.done.wait(5)
    assert conditions_of(rec.applied[1])[attach.ATTACHED] == "True"


def test_a_claims_annotation_asks_for_its_outcome(recorded: Any) -> None:
    rec = recorded({"delaySeconds": 0})
    failing = claim()
    failing["metadata"]["annotations"] = {attach.ANNOTATION_OUTCOME: "failed"}
    rec.attacher.seen(failing)
    assert rec.done.wait(5)
    assert conditions_of(rec.applied[0])[attach.ATTACH_FAILED] == "True"


def test_hang_reports_nothing_and_others_are_ignored(recorded: Any) -> None:
    rec = recorded({"delaySeconds": 0, "hang": True})
    assert rec.attacher.seen(claim()) == 0
    assert rec.attacher.seen(claim(device="gpu-0")) is None  # not attachable
    reported = claim(devices=[{"driver": DRIVER, "pool": NODE, "device": "gpu-1", "conditions": [
        {"type": attach.ATTACHED, "status": "True"}]}])  # fmt: skip
    reported["metadata"]["uid"] = "uid-2"
    assert rec.attacher.seen(reported) is None  # reported before a restart
    assert not rec.done.wait(0.3)


def test_the_service_runs_only_in_the_dra_plugin_with_attachable_gpus() -> None:
    def services(settings: NodeSettings, config: dict[str, Any] | None) -> list[Any]:
        host = Host(settings, client.ApiClient, threading.Event(), services=[Attach])
        return host.node(Node(NODE, inventory(config))).services

    assert services(NodeSettings(DRIVER), {}) == []  # the device plugin
    assert services(NodeSettings(DRIVER, attach=True), None) == []
    assert len(services(NodeSettings(DRIVER, attach=True), {})) == 1
    fleet = Host(NodeSettings(DRIVER, attach=True), client.ApiClient, threading.Event(), many_nodes=True)
    assert Attach.for_process(fleet) is None


def test_merged_keeps_what_the_driver_set_before() -> None:
    before = claim(devices=[
        {"driver": DRIVER, "pool": NODE, "device": "gpu-1", "conditions": [
            {"type": attach.ATTACHED, "status": "True", "lastTransitionTime": "t0"}]},
        {"driver": DRIVER, "pool": NODE, "device": "gpu-0", "conditions": []},
        {"driver": "other.example.com", "pool": NODE, "device": "x", "conditions": []},
    ])  # fmt: skip
    ready = claimstatus.Condition("Ready", "True", "Prepared", "")
    entries = claimstatus.with_conditions(
        [{"driver": DRIVER, "pool": NODE, "device": "gpu-1"}], [ready], before
    )
    out = claimstatus.merged(entries, before, DRIVER)
    assert [e["device"] for e in out] == ["gpu-1", "gpu-0"]  # the other driver's entry is not ours
    assert [c["type"] for c in out[0]["conditions"]] == ["Ready", attach.ATTACHED]
    again = claimstatus.with_conditions([{"driver": DRIVER, "pool": NODE, "device": "gpu-1"}], [ready], {
        "status": {"devices": out}})  # fmt: skip
    assert again[0]["conditions"][0]["lastTransitionTime"] == out[0]["conditions"][0]["lastTransitionTime"]


def test_server_check() -> None:
    assert "1.34" in (attachgate.GATE.version_refusal(attachgate.SETTING, (1, 33), "v1.33.4") or "")
    assert attachgate.GATE.version_refusal(attachgate.SETTING, (1, 36), "v1.36.0") is None
    kept = {"spec": {"devices": [attachgate.PROBE_DEVICE]}}
    dropped = {"spec": {"devices": [{"name": "binding-conditions-probe"}]}}
    nested = {"spec": {"devices": [{"name": "p", "basic": attachgate.PROBE_DEVICE}]}}
    assert attachgate.GATE.fields_kept(kept) and attachgate.GATE.fields_kept(nested)
    assert not attachgate.GATE.fields_kept(dropped)
    assert "DRADeviceBindingConditions" in attachgate.GATE.dropped_refusal(attachgate.SETTING)


def test_the_plugin_refuses_attach_without_device_status(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Checked before anything is served: the attach is reported in the claims' status."""
    config = tmp_path / "inventory.yaml"
    config.write_text('{"gpus": [{"profile": "h100-sxm5-80gb", "attach": {}}]}')
    args = build_parser().parse_args(
        ["gpu-kubelet-plugin", "--node-name=x", f"--config={config}", "--device-status=false"]
    )
    assert run_gpu_plugin(args) == 2
    assert "needs --device-status=true" in capsys.readouterr().err
