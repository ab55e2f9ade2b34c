"""Fleet mode's pure logic: node manifests, the shared slice cache, the work queue, pod status."""

from __future__ import annotations

import gc
import threading
from typing import Any

import pytest

from dra_fake.fleet import main as fleet_main
from dra_fake.fleet.cli import add_fleet_parser
from dra_fake.fleet.core import (
    FLEET_LABEL,
    NodeTemplate,
    SliceCache,
    WorkQueue,
    node_manifest,
    node_names,
    pod_running_status,
    untaint_patch,
)


def slice_obj(name: str, node: str, rv: int, generation: int = 1) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "uid": f"uid-{name}", "resourceVersion": str(rv)},
        "spec": {
            "nodeName": node,
            "driver": "gpu.nvidia.com",
            "pool": {"name": node, "generation": generation},
        },
    }


# ---- nodes ---------------------------------------------------------------------------------------


def test_node_names_are_sortable_and_unique() -> None:
    names = node_names("fleet-", 1000)
    assert names[0] == "fleet-0000" and names[-1] == "fleet-0999"
    assert names == sorted(names) and len(set(names)) == 1000
    assert node_names("n-", 3) == ["n-0000", "n-0001", "n-0002"]


def test_node_manifest_is_ready_labelled_and_has_allocatable() -> None:
    node = node_manifest("fleet-0001", NodeTemplate(fleet="f1", labels={"zone": "a"}))
    labels = node["metadata"]["labels"]
    assert labels["kubernetes.io/hostname"] == "fleet-0001"
    assert labels[FLEET_LABEL] == "f1" and labels["zone"] == "a"
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    assert node["status"]["allocatable"]["pods"] == "110"
    # no kubelet: other workloads stay off (issue 46); the fleet's own pods tolerate it
    assert node["spec"]["taints"] == [{"key": FLEET_LABEL, "effect": "NoSchedule", "value": "f1"}]
    assert untaint_patch({"spec": {"taints": node["spec"]["taints"]}}) is None  # kept
    assert [c["type"] for c in node["status"]["conditions"]] == ["Ready"]


def test_untaint_patch_removes_only_node_lifecycle_taints() -> None:
    assert untaint_patch({"spec": {}}) is None
    assert untaint_patch({"spec": {"taints": [{"key": "gpu", "effect": "NoSchedule"}]}}) is None
    taints = [
        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"},
        {"key": "gpu", "effect": "NoSchedule"},
    ]
    patch = untaint_patch({"spec": {"taints": taints}})
    assert patch == [
        {"op": "test", "path": "/spec/taints", "value": taints},
        {"op": "replace", "path": "/spec/taints", "value": [{"key": "gpu", "effect": "NoSchedule"}]},
    ]


# ---- slice cache ---------------------------------------------------------------------------------


def test_cache_groups_by_node_and_reports_changed_nodes_on_relist() -> None:
    cache = SliceCache()
    changed = cache.replace_all(
        [slice_obj("a0", "a", 10), slice_obj("b0", "b", 11), slice_obj("b1", "b", 12)]
    )
    assert changed == {"a", "b"}
    assert {e.name for e in cache.existing("b")} == {"b0", "b1"}
    assert cache.count() == 3 and sorted(cache.nodes()) == ["a", "b"]
    # Same list again: nothing changed. One slice newer, one node gone: exactly those.
    assert (
        cache.replace_all([slice_obj("a0", "a", 10), slice_obj("b0", "b", 11), slice_obj("b1", "b", 12)])
        == set()
    )
    assert cache.replace_all([slice_obj("a0", "a", 10), slice_obj("c0", "c", 13)]) == {"b", "c"}
    assert cache.existing("b") == []


def test_cache_ignores_events_of_our_own_writes() -> None:
    cache = SliceCache()
    cache.replace_all([])
    stored = slice_obj("a0", "a", 20)
    cache.wrote(stored)
    assert [e.resource_version for e in cache.existing("a")] == ["20"]
    # The watch delivers our create later: no re-sync.
    assert cache.observe("ADDED", stored) is None
    # Someone else changes it: re-sync node a.
    assert cache.observe("MODIFIED", slice_obj("a0", "a", 25)) == "a"
    # An older event arriving late changes nothing.
    assert cache.observe("MODIFIED", slice_obj("a0", "a", 22)) is None
    assert cache.existing("a")[0].resource_version == "25"


def test_cache_deletes_ours_and_theirs() -> None:
    cache = SliceCache()
    cache.replace_all([slice_obj("a0", "a", 5), slice_obj("a1", "a", 6)])
    cache.deleted("a0", "5")
    assert [e.name for e in cache.existing("a")] == ["a1"]
    assert cache.observe("DELETED", slice_obj("a0", "a", 30)) is None  # our delete, seen later
    assert cache.observe("MODIFIED", slice_obj("a0", "a", 5)) is None  # stale event of the deleted slice
    assert cache.observe("DELETED", slice_obj("a1", "a", 31)) == "a"  # the kubelet wiped it: re-sync
    assert cache.existing("a") == []
    assert cache.observe("ADDED", slice_obj("a0", "a", 40)) == "a"  # re-created later: seen


# ---- work queue ----------------------------------------------------------------------------------


def test_queue_deduplicates_and_orders() -> None:
    q = WorkQueue()
    for key in ("a", "b", "a", "c", "b"):
        q.add(key)
    assert len(q) == 3
    got = [q.get(0), q.get(0), q.get(0)]
    assert got == ["a", "b", "c"]
    assert q.get(0) is None  # empty: times out
    for taken in got:
        q.done(str(taken))
    assert q.idle()


def test_queue_never_hands_a_key_to_two_workers_and_requeues_when_done() -> None:
    q = WorkQueue()
    q.add("a")
    assert q.get(0) == "a"
    q.add("a")  # changed while processing
    assert q.get(0) is None  # not handed out twice
    assert not q.idle()
    q.done("a")
    assert q.get(0) == "a"
    q.done("a")
    assert q.idle()


def test_queue_shutdown_wakes_waiting_workers() -> None:
    q = WorkQueue()
    results: list[str | None] = []
    workers = [threading.Thread(target=lambda: results.append(q.get(30))) for _ in range(3)]
    for w in workers:
        w.start()
    q.shutdown()
    for w in workers:
        w.join(10)
        assert not w.is_alive()
    assert results == [None, None, None]


# ---- pods ----------------------------------------------------------------------------------------


def test_pod_running_status_for_bound_pending_pods_only() -> None:
    pod = {
        "metadata": {"name": "p", "namespace": "ns"},
        "spec": {"nodeName": "fleet-0001", "containers": [{"name": "c1", "image": "x"}, {"name": "c2"}]},
        "status": {"phase": "Pending"},
    }
    patch = pod_running_status(pod, "2026-01-01T00:00:00Z")
    assert patch is not None
    status = patch["status"]
    assert status["phase"] == "Running"
    assert [c["name"] for c in status["containerStatuses"]] == ["c1", "c2"]
    assert all(c["ready"] for c in status["containerStatuses"])
    assert {c["type"] for c in status["conditions"]} >= {"Ready", "ContainersReady", "PodScheduled"}
    assert pod_running_status({**pod, "spec": {"containers": []}}, "t") is None  # not bound
    assert pod_running_status({**pod, "status": {"phase": "Running"}}, "t") is None
    deleting = {**pod, "metadata": {"name": "p", "deletionTimestamp": "t"}}
    assert pod_running_status(deleting, "t") is None


# ---- flags ---------------------------------------------------------------------------------------


def test_fleet_flags() -> None:
    import argparse

    parser = argparse.ArgumentParser()
    add_fleet_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["fleet", "--nodes", "5", "--node-label", "a=b", "--mark-pods-running"])
    assert args.nodes == 5 and args.node_label == ["a=b"] and args.mark_pods_running
    assert args.workers == 16 and args.driver_name == "gpu.nvidia.com"


def test_fleet_rejects_bad_flag_combinations(capsys: pytest.CaptureFixture[str]) -> None:
    from dra_fake.cli import main

    assert main(["fleet"]) == 2
    assert "exactly one of --nodes" in capsys.readouterr().err
    assert main(["fleet", "--nodes", "2", "--adopt-selector", "type=kwok"]) == 2
    assert main(["fleet", "--nodes", "2", "--node-label", "novalue"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err
    assert main(["fleet", "--nodes", "2", "--config", "/nonexistent.yaml"]) == 2


# --- heartbeats (dra_fake/fleet/leases.py) --------------------------------------------------------


def test_leases_are_renewed_every_ten_seconds_spread_over_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from kubernetes.client.exceptions import ApiException

    from dra_fake.fleet import leases

    now = [1000.0]
    sent: list[tuple[str, str, dict[str, Any]]] = []

    exists: set[str] = set()  # Leases in the "API server"

    def send_json(api: Any, method: str, path: str, body: Any, *args: Any, **params: str) -> dict[str, Any]:
        sent.append((method, params.get("name", ""), body))
        if method == "POST":
            exists.add(body["metadata"]["name"])
        elif params["name"] not in exists:
            raise ApiException(status=404, reason="Not Found")
        return {}

    monkeypatch.setattr(leases, "send_json", send_json)
    nl = leases.NodeLeases(api=None, workers=1, clock=lambda: now[0])  # type: ignore[arg-type]
    names = [f"fleet-{i}" for i in range(50)]
    for name in names:
        nl.track(name, f"uid-{name}")
    firsts = sorted(leases.first_due(n, 1000.0) for n in names)
    assert firsts[0] >= 1000.0 and firsts[-1] < 1000.0 + leases.RENEW_INTERVAL
    assert firsts[-1] - firsts[0] > leases.RENEW_INTERVAL / 2  # spread, not all at once

    due = nl.take_due(1000.0 + leases.RENEW_INTERVAL)  # one interval: each node once
    assert sorted(n for n, _ in due) == sorted(names)
    for node, uid in due:
        nl.renew(node, uid)
    created = [b for m, _, b in sent if m == "POST"]
    assert len(created) == 50 and nl.counts["created"] == 50  # the first renewal finds no Lease
    lease = created[0]
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert (
        lease["spec"]["leaseDurationSeconds"] == 40
        and lease["spec"]["holderIdentity"] == lease["metadata"]["name"]
    )
    assert lease["metadata"]["ownerReferences"][0]["kind"] == "Node"
    assert lease["spec"]["renewTime"].endswith("Z") and "." in lease["spec"]["renewTime"]

    assert nl.take_due(1000.0 + leases.RENEW_INTERVAL + 0.001) == []  # nothing due again yet
    nl.forget("fleet-0")
    again = nl.take_due(1000.0 + 2 * leases.RENEW_INTERVAL)
    assert sorted(n for n, _ in again) == sorted(names[1:])  # a forgotten node is not renewed
    sent.clear()
    for node, uid in again:
        nl.renew(node, uid)
    assert {m for m, _, _ in sent} == {"PATCH"} and nl.counts["renewed"] == 49


def test_every_node_publisher_of_a_fleet_is_the_fleet_process_instance(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One process, one publishing instance (boot ID, start time, pid): asked once, not once per
    node (each asking reads the boot ID from /proc: a thousand reads at a thousand nodes)."""
    from kubernetes import client

    from dra_fake.core import publisher
    from dra_fake.fleet.client import CountingApiClient
    from dra_fake.fleet.main import load_fleet_inventory
    from dra_fake.fleet.options import FleetOptions
    from dra_fake.fleet.publishing import NodePublisher
    from dra_fake.fleet.run import Fleet
    from dra_fake.gpu.profiles import load_profiles

    asked: list[type[publisher.Instance]] = []
    instance = publisher.Instance("boot", 1, 1)

    def current(cls: type[publisher.Instance]) -> publisher.Instance:
        asked.append(cls)
        return instance

    monkeypatch.setattr(publisher.Instance, "current", classmethod(current))
    fleet = Fleet(
        CountingApiClient(client.Configuration()), load_fleet_inventory(""), load_profiles([]), FleetOptions()
    )
    nodes = [NodePublisher(fleet, f"fleet-{i}", f"uid-{i}") for i in range(3)]
    assert len(asked) == 1
    assert all(p.instance is instance for p in nodes)


def test_the_fleet_collects_young_objects_less_often() -> None:
    threshold = gc.get_threshold()
    try:
        fleet_main.quieter_garbage_collector()
        assert gc.get_threshold() == fleet_main.GC_THRESHOLD != threshold
    finally:
        gc.set_threshold(*threshold)
