"""The publisher against an in-memory API server: convergence, wipes, and dropped fields."""

from __future__ import annotations

import copy
import logging
from typing import Any

import pytest

from dra_fake.core.publisher import Publisher, dropped_features
from dra_fake.gpu.inventory import load_inventory
from dra_fake.gpu.slices import desired_slices

GATED = ("sharedCounters", "consumesCounters")


class FakeCustomObjects:
    """Just enough of CustomObjectsApi for ResourceSlices; optionally drops gated fields like a
    server with DRAPartitionableDevices off."""

    def __init__(self, drop: bool = False) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.drop = drop
        self.writes = 0
        self._rv = 0

    def _store(self, obj: dict[str, Any]) -> dict[str, Any]:
        obj = copy.deepcopy(obj)
        if self.drop:
            obj["spec"].pop("sharedCounters", None)
            for d in obj["spec"].get("devices", []):
                d.pop("consumesCounters", None)
        self._rv += 1
        obj["metadata"].update(uid=f"uid-{obj['metadata']['name']}", resourceVersion=str(self._rv))
        self.objects[obj["metadata"]["name"]] = obj
        self.writes += 1
        return copy.deepcopy(obj)

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **kw: Any) -> dict[str, Any]:
        return {"items": [copy.deepcopy(o) for o in self.objects.values()]}

    def create_cluster_custom_object(self, group: str, version: str, plural: str, obj: dict[str, Any]) -> Any:
        assert obj["metadata"]["name"] not in self.objects
        return self._store(obj)

    def replace_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, obj: Any
    ) -> Any:
        assert obj["metadata"]["resourceVersion"] == self.objects[name]["metadata"]["resourceVersion"]
        return self._store(obj)

    def delete_cluster_custom_object(
        self, group: str, version: str, plural: str, name: str, **kw: Any
    ) -> None:
        del self.objects[name]
        self.writes += 1


class FakeResourceApi:
    version = "v1"

    def __init__(self, custom: FakeCustomObjects) -> None:
        self.custom = custom


def publisher(
    custom: FakeCustomObjects, config: str = "examples/inventory/h100-dynamic-mig.yaml"
) -> Publisher:
    from pathlib import Path

    inventory = load_inventory(Path(config), "node-1")
    slices = desired_slices(inventory, "gpu.nvidia.com", (1, 37))
    return Publisher(FakeResourceApi(custom), "gpu.nvidia.com", "node-1", "node-uid", lambda: slices)  # type: ignore[arg-type]


def test_publishes_then_converges_without_writes() -> None:
    custom = FakeCustomObjects()
    pub = publisher(custom)
    first = pub.sync()
    assert first.creates and first.generation == 1
    writes = custom.writes
    assert pub.sync().empty and custom.writes == writes
    owner = next(iter(custom.objects.values()))["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["name"], owner["uid"], owner["controller"]) == (
        "Node",
        "node-1",
        "node-uid",
        True,
    )


def test_wiped_slices_are_recreated_at_a_new_generation() -> None:
    custom = FakeCustomObjects()
    pub = publisher(custom)
    pub.sync()
    count = len(custom.objects)
    custom.objects.clear()  # the kubelet wiped the node's slices
    plan = pub.sync()
    assert len(custom.objects) == count and plan.generation == 1  # nothing left to compare with: starts over


def test_dropped_fields_warn_once_naming_the_gate_and_do_not_loop(caplog: pytest.LogCaptureFixture) -> None:
    custom = FakeCustomObjects(drop=True)
    pub = publisher(custom)
    with caplog.at_level(logging.WARNING, logger="dra_fake.publisher"):
        pub.sync()
        writes = custom.writes
        for _ in range(3):
            assert pub.sync().empty
    assert custom.writes == writes, "the publisher kept rewriting what the server drops"
    warnings = [r.getMessage() for r in caplog.records if "dropped" in r.getMessage()]
    assert len(warnings) == 1 and "DRAPartitionableDevices" in warnings[0], warnings


def test_dropped_features_names_each_gate() -> None:
    sent = {"devices": [{"name": "a", "consumesCounters": [], "taints": []}], "sharedCounters": []}
    assert dropped_features(sent, {"devices": [{"name": "a"}]}) == [
        "DRADeviceTaints",
        "DRAPartitionableDevices",
    ]
    assert dropped_features(sent, sent) == []
