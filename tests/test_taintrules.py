"""`dra-fake fault drain|undrain|rules` (dra_fake.gpu.taintrules): the DeviceTaintRules an
administrator's drain creates, which rules an undrain removes, the table. The rules' effect on a
cluster: e2e/test_taint_rules.py."""

from __future__ import annotations

from typing import Any

import pytest

from dra_fake.cli import build_parser
from dra_fake.gpu import taintrules
from dra_fake.gpu.faultcli import _drain
from dra_fake.gpu.taintrules import Drain, RuleInputError, manifest, selected


def drain_of(*argv: str) -> Drain:
    return _drain(build_parser().parse_args(["fault", *argv]))


def test_a_device_drain_selects_driver_pool_and_device() -> None:
    rule = manifest(drain_of("drain", "--node", "node-1", "--device", "gpu-3"))
    assert rule == {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain-node-1-gpu-3", "labels": {taintrules.DRAIN_LABEL: "drain-node-1-gpu-3"}},
        "spec": {
            "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "node-1", "device": "gpu-3"},
            "taint": {"key": "dra-fake.dev/drain", "effect": "NoExecute"},
        },
    }


def test_a_node_or_driver_drain_selects_more() -> None:
    node = manifest(drain_of("drain", "--node", "node-1", "--effect", "NoSchedule", "--value", "maint"))
    assert node["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": "node-1"}
    assert node["spec"]["taint"] == {"key": "dra-fake.dev/drain", "value": "maint", "effect": "NoSchedule"}
    everything = manifest(drain_of("drain", "--name", "all-gpus"), "v1beta2")
    assert everything["apiVersion"] == "resource.k8s.io/v1beta2"
    assert everything["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com"}


@pytest.mark.parametrize(
    ("drain", "message"),
    [
        (Drain(device="gpu-0"), "--device needs --node"),
        (Drain(pool="n", effect="Evict"), "--effect"),
        (Drain(pool="n", name="Bad_Name"), "--name"),
    ],
)
def test_bad_input_names_the_flag(drain: Drain, message: str) -> None:
    with pytest.raises(RuleInputError, match=message):
        manifest(drain)


def rule(name: str, pool: str, device: str = "", ours: bool = True) -> dict[str, Any]:
    made = manifest(Drain(pool=pool, device=device, name=name))
    if not ours:
        made["metadata"]["labels"] = {}
    return made


def test_undrain_removes_only_the_drains_it_names() -> None:
    rules = [
        rule("a", "node-1", "gpu-0"),
        rule("b", "node-1"),
        rule("c", "node-2"),
        rule("x", "node-1", ours=False),
    ]
    assert [r["metadata"]["name"] for r in rules if selected(r, Drain(pool="node-1"))] == ["a", "b"]
    assert [r["metadata"]["name"] for r in rules if selected(r, Drain(pool="node-1", device="gpu-0"))] == [
        "a"
    ]
    assert [r["metadata"]["name"] for r in rules if selected(r, Drain(name="c"))] == ["c"]
    assert [r["metadata"]["name"] for r in rules if selected(r, Drain())] == ["a", "b", "c"]


def test_table_shows_the_eviction_progress() -> None:
    done = rule("a", "node-1", "gpu-0")
    done["status"] = {
        "conditions": [{"type": "EvictionInProgress", "status": "False", "reason": "Completed"}]
    }
    lines = taintrules.table([done, rule("b", "node-2")]).splitlines()
    assert lines[0].split() == ["NAME", "DRIVER", "POOL", "DEVICE", "TAINT", "EVICTION"]
    assert lines[1].split() == [
        "a",
        "gpu.nvidia.com",
        "node-1",
        "gpu-0",
        "dra-fake.dev/drain:NoExecute",
        "False/Completed",
    ]
    assert lines[2].split()[3:] == ["*", "dra-fake.dev/drain:NoExecute", "-"]


@pytest.mark.parametrize(
    ("served", "version"),
    [
        ({"v1": True, "v1beta2": True, "v1alpha3": True}, "v1"),  # 1.37 with the betas on
        ({"v1": False, "v1beta2": True, "v1alpha3": False}, "v1beta2"),  # 1.36 with the gate
        ({"v1beta2": False, "v1alpha3": True}, "v1alpha3"),  # 1.33 to 1.35
    ],
)
def test_rules_are_written_in_the_newest_version_serving_them(
    monkeypatch: pytest.MonkeyPatch, served: dict[str, bool], version: str
) -> None:
    """A version counts only where it lists devicetaintrules: 1.37's v1beta2 lists none, say."""

    def get_json(_api: object, path: str) -> dict[str, Any]:
        v = path.rsplit("/", 1)[1]
        if v not in served:
            raise RuntimeError("404")
        return {"resources": [{"name": "devicetaintrules" if served[v] else "deviceclasses"}]}

    monkeypatch.setattr("dra_fake.core.kube.get_json", get_json)
    rules = taintrules.Rules(object())  # type: ignore[arg-type]
    assert rules.version == version
    assert rules.path() == f"/apis/resource.k8s.io/{version}/devicetaintrules"


def test_a_server_without_rules_names_the_gate(monkeypatch: pytest.MonkeyPatch) -> None:
    def get_json(_api: object, path: str) -> dict[str, Any]:
        return {"resources": [{"name": "resourceclaims"}]}

    monkeypatch.setattr("dra_fake.core.kube.get_json", get_json)
    with pytest.raises(
        RuleInputError, match=r"DRADeviceTaintRules and --runtime-config=resource\.k8s\.io/v1beta2"
    ):
        taintrules.Rules(object()).version  # type: ignore[arg-type]  # noqa: B018
