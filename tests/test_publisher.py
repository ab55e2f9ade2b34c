"""The publisher against an in-memory API server: convergence, wipes, and dropped fields."""

from __future__ import annotations

import copy
import json
import logging
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from dra_fake.core.publisher import PUBLISHER_ANNOTATION, Instance, Publisher, dropped_features
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


class WatchResponse:
    """A watch's HTTP response: one JSON event per line."""

    status = 200

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.lines = [json.dumps(e).encode() + b"\n" for e in events]

    def stream(self, amt: Any = None, decode_content: Any = None) -> Any:
        return iter(self.lines)

    def close(self) -> None:
        pass

    def release_conn(self) -> None:
        pass


class WatchingCustomObjects(FakeCustomObjects):
    def __init__(self, events: list[dict[str, Any]]) -> None:
        super().__init__()
        self.events = events
        self.watch_calls: list[dict[str, Any]] = []

    def list_cluster_custom_object(self, group: str, version: str, plural: str, **kw: Any) -> Any:
        if kw.get("watch"):
            self.watch_calls.append(kw)
            return WatchResponse(self.events)
        return super().list_cluster_custom_object(group, version, plural, **kw)


def slice_event(kind: str, rv: str) -> dict[str, Any]:
    return {"type": kind, "object": {"metadata": {"name": "s", "resourceVersion": rv}}}


def test_the_slice_watch_resumes_from_the_last_version_it_saw() -> None:
    custom = WatchingCustomObjects([slice_event("ADDED", "5"), slice_event("BOOKMARK", "9")])
    pub = publisher(custom)
    assert pub._watch_once(None) == "9"
    assert pub._trigger.is_set()
    assert "resource_version" not in custom.watch_calls[0]
    assert custom.watch_calls[0]["allow_watch_bookmarks"] is True

    pub._trigger.clear()
    custom.events = [slice_event("BOOKMARK", "12")]
    assert pub._watch_once("9") == "12"
    assert custom.watch_calls[1]["resource_version"] == "9"
    assert not pub._trigger.is_set(), "a bookmark is no change"


def test_an_expired_watch_version_is_reported_as_gone() -> None:
    expired = {
        "type": "ERROR",
        "object": {"kind": "Status", "code": 410, "reason": "Expired", "message": "too old"},
    }
    pub = publisher(WatchingCustomObjects([expired]))
    with pytest.raises(ApiException) as gone:
        pub._watch_once("3")
    assert gone.value.status == 410


def test_of_two_instances_of_one_node_the_newer_publishes_and_the_older_stops_writing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A rolling update: the old pod still runs when the new one, with another inventory, starts."""
    custom = FakeCustomObjects()
    old = publisher(custom, "examples/inventory/h100-dynamic-mig.yaml")
    new = publisher(custom, "examples/inventory/mixed-mig.yaml")
    old.instance = Instance("boot-a", 100, 7)
    new.instance = Instance("boot-a", 200, 9)
    old.sync()
    new.sync()
    written = copy.deepcopy(custom.objects)
    writes = custom.writes
    with caplog.at_level(logging.WARNING):
        for _ in range(3):  # each watch event of the other's write
            assert old.sync().empty
            assert new.sync().empty
    assert custom.writes == writes
    assert custom.objects == written
    assert all(o["metadata"]["annotations"][PUBLISHER_ANNOTATION] == "boot-a/200/9" for o in written.values())
    assert old.superseded and not new.superseded
    assert sum("a newer instance" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize(
    ("annotation", "superseded"),
    [
        ("boot-a/200/9", True),
        ("boot-a/100/8", True),  # same start tick: the pid orders them
        ("boot-a/100/7", False),  # itself
        ("boot-a/50/9", False),  # older
        ("boot-b/900/9", False),  # an earlier boot: long gone
        ("", False),  # written by a version without the annotation
        ("garbage", False),
    ],
)
def test_which_instance_supersedes_which(annotation: str, superseded: bool) -> None:
    assert Instance("boot-a", 100, 7).superseded_by(annotation) is superseded


def test_slices_it_did_not_write_are_never_updated_or_deleted(caplog: pytest.LogCaptureFixture) -> None:
    """On a cluster that also runs NVIDIA's real driver (same driver name), its slices of this node
    carry no PUBLISHER_ANNOTATION: the publisher leaves them alone, whatever their generation."""
    custom = FakeCustomObjects()
    real = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": "node-1-gpu.nvidia.com-x7k2p"},
        "spec": {
            "driver": "gpu.nvidia.com",
            "nodeName": "node-1",
            "pool": {"name": "node-1", "generation": 7, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}],
        },
    }
    custom._store(real)
    pub = publisher(custom)
    with caplog.at_level("WARNING"):
        plan = pub.sync()
        pub.sync()
    assert plan.creates and not plan.deletes and not plan.updates
    assert custom.objects["node-1-gpu.nvidia.com-x7k2p"]["spec"] == real["spec"]  # untouched
    assert [r.getMessage() for r in caplog.records if "did not write" in r.getMessage()] == [
        "ResourceSlices of this driver and node that dra-fake did not write are left alone "
        "(another driver of the same name?)"
    ]  # once
