"""The ComputeDomain controller without a cluster: the daemon's clique index, its DaemonSet pinned to
labelled nodes, claim templates in the served resource version, its identity, retries, orphan
cleanup, the workload template, and status from watches (computedomain/controller)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from computedomain.controller import objects
from computedomain.daemon.daemon import DaemonError, smallest_free_index
from computedomain.plugin.domains import DomainRef
from tests.computedomainbed import UID


def test_clique_index_is_the_smallest_free_one_below_the_maximum() -> None:
    assert smallest_free_index([{"index": 0}, {"index": 2}], 18) == 1
    with pytest.raises(DaemonError, match=r"cannot add more nodes, already at maximum \(2\)"):
        smallest_free_index([{"index": 0}, {"index": 1}], 2)


def test_daemon_set_is_pinned_to_labelled_nodes() -> None:
    ds = objects.daemon_set(UID, objects.DaemonSettings("drv", "img", "sa", 18))
    pod = ds["spec"]["template"]["spec"]
    assert ds["metadata"]["name"] == f"computedomain-daemon-{UID}"
    assert pod["nodeSelector"] == {"resource.nvidia.com/computeDomain": UID}
    assert pod["containers"][0]["readinessProbe"]["exec"]["command"] == ["dra-fake", "imex-daemon", "check"]
    assert ds["metadata"]["finalizers"] == ["resource.nvidia.com/computeDomain"]


@pytest.mark.parametrize("version", ["v1", "v1beta2", "v1beta1"])
def test_claim_templates_are_written_in_the_served_resource_version(version: str) -> None:
    cd = {
        "metadata": {"uid": UID, "name": "cd", "namespace": "team"},
        "spec": {"channel": {"resourceClaimTemplate": {"name": "imex-channel-0"}}},
    }
    for template in (objects.workload_template(cd, version), objects.daemon_template(UID, "drv", version)):  # type: ignore[arg-type]
        assert template["apiVersion"] == f"resource.k8s.io/{version}"
        [request] = template["spec"]["spec"]["devices"]["requests"]
        if version == "v1beta1":  # 1.32: no `exactly`, the class sits on the request
            assert "exactly" not in request and request["deviceClassName"].endswith(".nvidia.com")
        else:
            assert request["exactly"]["deviceClassName"].endswith(".nvidia.com")


def test_the_controller_starts_as_a_uid_without_a_passwd_entry(monkeypatch: pytest.MonkeyPatch) -> None:
    """kopf names its operator after getpass.getuser(), which raises for a uid without a passwd
    entry (the chart runs the controller as 65532): the controller passes its own identity."""
    import argparse
    import getpass

    from computedomain.controller import main

    def no_passwd_entry() -> str:
        raise KeyError("getpwuid(): uid not found: 65532")

    seen: dict[str, Any] = {}
    monkeypatch.setattr(getpass, "getuser", no_passwd_entry)
    monkeypatch.setattr("dra_fake.core.kube.load_kube_client", lambda *_, **__: object())
    monkeypatch.setattr(main, "discover_dra", lambda _: type("Info", (), {"resource_version": "v1beta1"})())
    monkeypatch.setattr(main, "Reconciler", lambda api, settings: seen.setdefault("settings", settings))
    monkeypatch.setattr(main.threading, "Thread", lambda **_: type("T", (), {"start": lambda self: None})())
    monkeypatch.setattr(main.kopf, "run", lambda **kwargs: seen.setdefault("kopf", kwargs))
    args = argparse.Namespace(
        log_level="info",
        log_format="text",
        kubeconfig="",
        metrics_port=-1,
        leader_elect="false",
        leader_elect_identity="",
        namespace="drv",
        daemon_image="img",
        max_nodes_per_imex_domain=18,
        status_sync_seconds=2.0,
        cleanup_interval_seconds=600.0,
        daemon_run_as_user=65532,
        daemon_run_as_group=65532,
    )
    assert main.run_controller(args) == 0
    assert seen["kopf"]["identity"]  # explicit: kopf never asks the passwd database
    assert seen["settings"].resource_version == "v1beta1"
    args.leader_elect_identity = "controller-pod-0"
    seen.clear()
    main.run_controller(args)
    assert seen["kopf"]["identity"] == "controller-pod-0"


def test_the_controller_retries_transient_api_errors_forever() -> None:
    """kopf gives up after 54 s by default and the controller exits; an API server restarting for
    longer must not end it (make soak found it)."""
    import itertools

    import kopf

    from computedomain.controller.handlers import configure

    settings = kopf.OperatorSettings()
    configure(settings)
    backoffs = settings.networking.error_backoffs
    first = list(itertools.islice(iter(backoffs), 1000))  # type: ignore[arg-type]
    assert len(first) == 1000 and max(first) == 30.0 and sum(first) > 54 * 10
    assert list(itertools.islice(iter(backoffs), 3)) == [1.0, 1.0, 2.0]  # every request starts anew


def test_orphan_cleanup_keeps_the_clique_of_a_domain_created_during_the_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Found by the kill soak: the pass listed the ComputeDomains, then the cliques; a domain and
    its clique created in between made the clique look orphaned, and it was deleted (the channel
    then waited for a Ready daemon forever)."""

    from kubernetes import client

    from computedomain.api import CD_LABEL, CLIQUE_PLURAL, PLURAL
    from computedomain.controller import reconcile
    from computedomain.controller.reconcile import Reconciler

    domains: list[dict[str, Any]] = []
    deleted: list[str] = []
    creating = [True]  # the domain "new" is created while its clique is listed
    clique = {"metadata": {"name": "new.clique", "labels": {CD_LABEL: "new"}}}

    def get_json(api: Any, path: str, query: Any = None) -> dict[str, Any]:
        if path.endswith(f"/{PLURAL}"):
            return {"items": list(domains)}
        if path.endswith(CLIQUE_PLURAL):
            if creating[0]:
                domains.append({"metadata": {"uid": "new"}})
            return {"items": [clique]}
        return {"items": []}

    def send_json(api: Any, method: str, path: str, body: Any, *_: Any) -> dict[str, Any]:
        assert method == "DELETE" and body is None
        deleted.append(path.rsplit("/", 1)[1])
        return {}

    monkeypatch.setattr(reconcile, "get_json", get_json)
    monkeypatch.setattr(reconcile, "send_json", send_json)
    settings = objects.DaemonSettings(
        namespace="ns", image="i", service_account="sa", max_nodes_per_imex_domain=18
    )
    reconciler = Reconciler(client.ApiClient(), settings)
    assert reconciler.cleanup_orphans()["cliques"] == [] and deleted == []
    domains.clear()  # the domain is deleted: now its clique is an orphan
    creating[0] = False
    assert reconciler.cleanup_orphans()["cliques"] == ["new.clique"] and deleted == ["new.clique"]


def test_a_new_domains_workload_template_is_created_beside_its_daemon_objects(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two requests one after the other, not three: the daemon's template then its DaemonSet,
    and meanwhile the workload template (the DaemonSet's create here waits for it: made after
    the DaemonSet, it would never come)."""
    import threading

    from kubernetes import client

    from computedomain.controller import reconcile
    from computedomain.controller.reconcile import Reconciler

    workload_sent = threading.Event()
    sent: list[str] = []

    def send_json(api: Any, method: str, path: str, body: Any, *_: Any) -> dict[str, Any]:
        assert method == "POST"
        kind = "DaemonSet" if "/daemonsets" in path else "template"
        if kind == "template" and b'"namespace":"team"' in body:
            kind = "workload template"
            workload_sent.set()
        if kind == "DaemonSet":
            assert workload_sent.wait(10), "the workload template waited for the DaemonSet"
        sent.append(kind)
        return {}

    monkeypatch.setattr(reconcile, "send_json", send_json)
    settings = objects.DaemonSettings(
        namespace="drv", image="i", service_account="sa", max_nodes_per_imex_domain=18
    )
    cd = {
        "metadata": {"uid": "cd-1", "name": "cd", "namespace": "team"},
        "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "cd-channel"}}},
    }
    created = Reconciler(client.ApiClient(), settings).ensure(cd, new=True)
    assert sorted(sent) == ["DaemonSet", "template", "workload template"]
    assert sent.index("template") < sent.index("DaemonSet")  # the daemon's claim template first
    assert len(created) == 3 and created[-1] == "ResourceClaimTemplate team/cd-channel"


# --- status from watches (computedomain/controller/statussync.py) ---------------------------------


def test_status_follows_watch_events_from_the_caches_and_patches_only_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from computedomain.api import CD_LABEL, CLIQUE_LABEL
    from computedomain.controller import statussync

    patches: list[tuple[str, dict[str, Any]]] = []
    monkeypatch.setattr(
        statussync, "merge_patch", lambda api, path, body, **params: patches.append((params["name"], body))
    )
    sync = statussync.StatusSync(api=None, namespace="drv", resync=2.0)  # type: ignore[arg-type]
    cd = {"metadata": {"uid": "cd-1", "name": "cd", "namespace": "team"}, "spec": {"numNodes": 1}}
    sync._changed(lambda: sync._domains.replace([cd]))  # the informer's first list
    assert sync._queue == {"cd-1"}
    assert sync.sync("cd-1") and patches[-1] == ("cd", {"status": {"status": "NotReady", "nodes": []}})
    assert not sync.sync("cd-1") and len(patches) == 1  # the watch has not brought it back yet: no repeat

    pod = {
        "metadata": {"uid": "p-1", "labels": {CD_LABEL: "cd-1", CLIQUE_LABEL: ""}},
        "spec": {"nodeName": "n1"},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    sync._queue.clear()
    sync._changed(lambda: {sync._pods.apply("ADDED", pod)})  # a daemon pod became Ready
    assert sync._queue == {"cd-1"}
    found = sync.wanted("cd-1")
    assert found is not None
    wanted = found[1]
    assert wanted["status"] == "Ready"
    assert [n["name"] for n in wanted["nodes"]] == ["n1"]
    assert sync.sync("cd-1") and patches[-1][1]["status"]["status"] == "Ready"

    # The watch brings the patched status back: nothing to do, no request.
    sync._changed(lambda: {sync._domains.apply("MODIFIED", {**cd, "status": wanted})})
    assert not sync.sync("cd-1") and len(patches) == 2
    # A pod of another ComputeDomain queues only that one; a CD being deleted gets no status.
    other = {"metadata": {"uid": "p-2", "labels": {CD_LABEL: "cd-2"}}, "spec": {}, "status": {}}
    sync._queue.clear()
    sync._changed(lambda: {sync._pods.apply("ADDED", other)})
    assert sync._queue == {"cd-2"}
    going = {**cd, "metadata": {**cd["metadata"], "deletionTimestamp": "2026-12-01T00:00:00Z"}}
    sync._changed(lambda: {sync._domains.apply("MODIFIED", going)})
    assert sync.wanted("cd-1") is None and not sync.sync("cd-1")


def test_the_plugin_finds_compute_domains_in_its_watch_index_and_lists_only_on_a_miss() -> None:
    from kubernetes import client

    from computedomain.plugin.domains import ComputeDomainApi

    listed: list[int] = []

    def cd(uid: str) -> dict[str, Any]:
        return {"metadata": {"uid": uid, "name": f"n-{uid}", "namespace": "team"}}

    in_cluster = [cd("a"), cd("b")]

    class Custom:
        def list_cluster_custom_object(self, *args: Any) -> dict[str, Any]:
            listed.append(1)
            return {"items": list(in_cluster)}

    domains = ComputeDomainApi(client.ApiClient(), "drv")
    domains.custom = Custom()  # type: ignore[assignment]
    domains._listed([cd("a")])  # the watch's first list
    assert domains.get_by_uid("a") == DomainRef("a", "n-a", "team") and listed == []
    domains._event("ADDED", cd("c"))
    assert domains.get_by_uid("c") == DomainRef("c", "n-c", "team") and listed == []
    assert domains.get_by_uid("b") == DomainRef("b", "n-b", "team") and listed == [1]  # a miss: one LIST
    domains._event("DELETED", cd("b"))
    in_cluster.pop()
    assert domains.get_by_uid("b") is None and listed == [1, 1]


def test_the_readiness_probe_starts_without_the_kubernetes_client() -> None:
    """`dra-fake imex-daemon check` runs every 10 s with a 1 s timeout; with the client loaded it
    timed out on busy nodes (docs/computedomain.md#simulated-imex-daemon)."""
    code = (
        "import sys; from dra_fake.cli import main\n"
        "rc = main(['imex-daemon', 'check'])\n"
        "print(rc, sorted(m for m in sys.modules if m.split('.')[0] == 'kubernetes'))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.splitlines() == ["NOT READY", "1 []"]  # no daemon here: not ready
