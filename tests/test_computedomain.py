"""ComputeDomain pieces without a cluster: opaque config decoding, the status formula, the claim
state with a fake API side, the controller's manifests and the daemon's clique index."""

from __future__ import annotations

import os
import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Any

import pytest

from computedomain import imex
from computedomain.controller import objects, status
from computedomain.daemon.daemon import DaemonError, smallest_free_index
from computedomain.plugin import configs as cdconfig
from computedomain.plugin.domains import LABEL_OWNED, NAMESPACE_MISMATCH, DomainRef, NodeOwnedError
from computedomain.plugin.edits import channel_major, write_channel_placeholders
from computedomain.plugin.state import ComputeDomainState, DaemonNotReady
from dra_fake.core.claims import ClaimError, PermanentClaimError

UID = "2f9c6a4e-0000-4000-8000-000000000001"
DRIVER_NAMESPACE = "dra-fake"
CLIQUE = "0b0f0c2d-6c67-4bba-9b6b-2a2f1e7ef7a1.32766"


def params(kind: str = "ComputeDomainChannelConfig", **extra: Any) -> dict[str, Any]:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind, "domainID": UID, **extra}


def test_strict_decoding_names_the_unknown_field() -> None:
    with pytest.raises(
        cdconfig.CdConfigError, match='strict decoding error: unknown field "unexpectedField"'
    ):
        cdconfig.decode(params(unexpectedField=1))


def test_decoding_defaults_and_validation() -> None:
    assert cdconfig.decode(params()) == cdconfig.ChannelConfig(UID, "Single")
    assert cdconfig.decode(params("ComputeDomainDaemonConfig")) == cdconfig.DaemonConfig(UID)
    with pytest.raises(cdconfig.CdConfigError, match="domainID cannot be empty"):
        cdconfig.decode({**params(), "domainID": ""})
    with pytest.raises(cdconfig.CdConfigError, match="allocationMode"):
        cdconfig.decode(params(allocationMode="Some"))


def test_config_kind_must_fit_the_device() -> None:
    entries = [
        {"source": "FromClaim", "opaque": {"driver": "compute-domain.nvidia.com", "parameters": params()}}
    ]
    decoded = cdconfig.decode_claim_configs("compute-domain.nvidia.com", entries)
    with pytest.raises(
        cdconfig.CdConfigError, match="cannot apply ComputeDomainChannelConfig to request: daemon"
    ):
        cdconfig.config_for(decoded, "daemon", "daemon")


def node(name: str, st: str) -> dict[str, Any]:
    return {"name": name, "status": st}


@pytest.mark.parametrize(
    ("num_nodes", "nodes", "expected"),
    [
        (0, [], "Ready"),
        (2, [node("a", "Ready")], "NotReady"),
        (2, [node("a", "Ready"), node("b", "NotReady")], "NotReady"),
        (2, [node("a", "Ready"), node("b", "Ready")], "Ready"),
    ],
)
def test_global_status_formula(num_nodes: int, nodes: list[dict[str, Any]], expected: str) -> None:
    assert status.global_status(num_nodes, nodes) == expected


def daemon_pod(node_name: str, ready: bool, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"labels": labels or {}},
        "spec": {"nodeName": node_name},
        "status": {
            "phase": "Running",
            "podIP": "10.0.0.1",
            "conditions": [{"type": "Ready", "status": str(ready)}],
        },
    }


def test_status_nodes_need_a_ready_entry_and_a_ready_pod() -> None:
    clique = {
        "daemons": [
            {"nodeName": "n1", "ipAddress": "1.1.1.1", "cliqueID": CLIQUE, "index": 0, "status": "Ready"},
            {"nodeName": "n2", "ipAddress": "1.1.1.2", "cliqueID": CLIQUE, "index": 1, "status": "Ready"},
            {"nodeName": "gone", "ipAddress": "1.1.1.3", "cliqueID": CLIQUE, "index": 2, "status": "Ready"},
        ]
    }
    pods = [
        daemon_pod("n1", True),
        daemon_pod("n2", False),
        daemon_pod("n3", True, {"resource.nvidia.com/computeDomain.cliqueID": ""}),
    ]
    got = {n["name"]: (n["status"], n["index"], n["cliqueID"]) for n in status.nodes([clique], pods)}
    assert got == {"n1": ("Ready", 0, CLIQUE), "n2": ("NotReady", 1, CLIQUE), "n3": ("Ready", -1, "")}


class FakeDomains:
    def __init__(self, namespace: str = "team", ready: bool = False) -> None:
        self.namespace = namespace
        self.ready = ready
        self.labels: dict[str, str] = {}

    def get_by_uid(self, uid: str) -> DomainRef | None:
        return DomainRef(uid, "cd", self.namespace) if uid == UID else None

    def add_node_label(self, node: str, uid: str) -> None:
        if self.labels.get(node, uid) != uid:
            raise NodeOwnedError(LABEL_OWNED)
        self.labels[node] = uid

    def remove_node_label(self, node: str, uid: str) -> bool:
        if self.labels.get(node) == uid:
            del self.labels[node]
            return True
        return False

    def node_ready(self, uid: str, clique_id: str, node: str) -> bool:
        return self.ready


def claim(device: str = "channel-0", namespace: str = "team", **cfg: Any) -> dict[str, Any]:
    kind = "ComputeDomainChannelConfig" if device == "channel-0" else "ComputeDomainDaemonConfig"
    request = "channel" if device == "channel-0" else "daemon"
    return {
        "metadata": {"uid": f"claim-{device}", "name": "c", "namespace": namespace},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": request,
                            "driver": "compute-domain.nvidia.com",
                            "pool": "node-1",
                            "device": device,
                        }
                    ],
                    "config": [
                        {
                            "source": "FromClaim",
                            "opaque": {
                                "driver": "compute-domain.nvidia.com",
                                "parameters": params(kind, **cfg),
                            },
                        }
                    ],
                }
            }
        },
    }


def make_state(tmp_path: Path, domains: FakeDomains, clique: str = CLIQUE) -> ComputeDomainState:
    boot = tmp_path / "boot_id"
    boot.write_text("boot-1")
    return ComputeDomainState(
        "compute-domain.nvidia.com",
        "node-1",
        tmp_path / "cdi",
        tmp_path / "plugin",
        domains,
        clique,
        DRIVER_NAMESPACE,
        boot_id_path=boot,
    )


def test_channel_waits_for_the_daemon_then_injects_channel_0(tmp_path: Path) -> None:
    domains = FakeDomains()
    state = make_state(tmp_path, domains)
    with pytest.raises(DaemonNotReady):
        state.prepare(claim())
    assert domains.labels == {"node-1": UID}  # labelled first: that schedules the daemon
    assert state.prepared_claims() == {"claim-channel-0": "PrepareStarted"}
    domains.ready = True
    [device] = state.prepare(claim())
    assert device.device_name == "channel-0"
    spec = state.cdi.read("claim-channel-0") or {}
    edits = spec["devices"][0]["containerEdits"]
    assert [m["containerPath"] for m in edits["mounts"]] == ["/dev/nvidia-caps-imex-channels"]
    assert f"COMPUTE_DOMAIN_UUID={UID}" in edits["env"]
    state.unprepare("claim-channel-0")
    assert domains.labels == {} and not state.cdi.exists("claim-channel-0")


def test_errors_are_worded_and_wrapped_as_nvidias(tmp_path: Path) -> None:
    """docs/reference/nvidia-compute-domains.md#72-channel-claims: the kubelet's Event carries these."""
    outer = (
        "error preparing devices for claim team/c:claim-channel-0: prepare devices failed: "
        "error applying config: "
    )
    domains = FakeDomains()
    state = make_state(tmp_path, domains)
    with pytest.raises(DaemonNotReady) as not_ready:
        state.prepare(claim())
    assert (
        str(not_ready.value)
        == outer + "error asserting ComputeDomain Ready: current node not ready in ComputeDomain"
    )
    state.unprepare("claim-channel-0")
    domains.labels["node-1"] = "another-domain"
    with pytest.raises(ClaimError) as owned:
        state.prepare(claim())
    assert str(owned.value) == outer + "error adding Node label for ComputeDomain: " + LABEL_OWNED
    with pytest.raises(PermanentClaimError) as elsewhere:
        state.prepare(claim(namespace="other"))
    assert str(elsewhere.value) == (
        "error preparing devices for claim other/c:claim-channel-0: prepare devices failed: "
        "error applying config: error asserting ComputeDomain's namespace: " + NAMESPACE_MISMATCH
    )


def test_all_mode_injects_2048_channels(tmp_path: Path) -> None:
    state = make_state(tmp_path, FakeDomains(ready=True))
    write_channel_placeholders(tmp_path / "plugin")
    state.prepare(claim(allocationMode="All"))
    [mount] = (state.cdi.read("claim-channel-0") or {})["devices"][0]["containerEdits"]["mounts"]
    names = {p.name for p in Path(mount["hostPath"]).iterdir()}
    assert len(names) == 2048 and "channel2047" in names and "channel2048" not in names


def test_refusals(tmp_path: Path) -> None:
    domains = FakeDomains(ready=True)
    state = make_state(tmp_path, domains)
    with pytest.raises(PermanentClaimError, match=NAMESPACE_MISMATCH):
        state.prepare(claim(namespace="elsewhere"))
    with pytest.raises(PermanentClaimError, match='unknown field "unexpectedField"'):
        state.prepare(claim(unexpectedField="x"))
    domains.labels["node-1"] = "another-cd"
    with pytest.raises(ClaimError, match=LABEL_OWNED):
        state.prepare(claim())


def test_daemon_prepare_writes_the_imex_dir_and_env(tmp_path: Path) -> None:
    state = make_state(tmp_path, FakeDomains())
    [device] = state.prepare(claim("daemon-0", namespace=DRIVER_NAMESPACE))
    assert device.cdi_device_ids[0] == "k8s.compute-domain.nvidia.com/device=all"
    assert (tmp_path / "plugin" / "domains" / UID / "imexd.cfg.tmpl").is_file()
    env = (state.cdi.read("claim-daemon-0") or {})["devices"][0]["containerEdits"]["env"]
    assert f"CLIQUE_ID={CLIQUE}" in env and "COMPUTE_DOMAIN_NAMESPACE=team" in env


def test_a_daemon_claim_outside_the_driver_namespace_is_refused(tmp_path: Path) -> None:
    """It would mount the domain's IMEX directory read-write into any pod."""
    state = make_state(tmp_path, FakeDomains())
    with pytest.raises(
        PermanentClaimError, match="only prepared in the driver namespace 'dra-fake', not in 'team'"
    ):
        state.prepare(claim("daemon-0", namespace="team"))
    assert not (tmp_path / "plugin" / "domains").exists()
    assert state.prepared_claims() == {}


def test_the_imex_dir_goes_with_the_daemon_claim_and_leftovers_at_startup(tmp_path: Path) -> None:
    state = make_state(tmp_path, FakeDomains())
    state.prepare(claim("daemon-0", namespace=DRIVER_NAMESPACE))
    domain = tmp_path / "plugin" / "domains" / UID
    (domain / imex.STATE_NAME).write_text("written by the daemon")
    leftover = tmp_path / "plugin" / "domains" / "0dead000-0000-4000-8000-000000000000"
    leftover.mkdir()
    (leftover / imex.NODES_NAME).write_text("from a plugin that died mid-unprepare")
    report = state.startup()
    assert report.driver_files_removed == 1
    assert not leftover.exists() and domain.is_dir()  # a prepared daemon claim keeps its directory
    state.unprepare("claim-daemon-0")
    assert not domain.exists()


def test_channel_major_only_from_the_kernels_character_devices(tmp_path: Path) -> None:
    devices = tmp_path / "devices"
    devices.write_text("Character devices:\n195 nvidia\n508 nvidia-caps-imex-channels\n\nBlock devices:\n")
    assert channel_major(devices) == 508
    devices.write_text("Character devices:\n195 nvidia\n\nBlock devices:\n 8 nvidia-caps-imex-channels\n")
    assert channel_major(devices) is None  # a block major of that name is not the channel driver
    assert channel_major(tmp_path / "missing") is None  # no guessed major: no device node


def test_channels_are_placeholder_files_never_devices(tmp_path: Path) -> None:
    """Not even on a host with NVIDIA's channel driver: that would hand the container a host device."""
    state = make_state(tmp_path, FakeDomains(ready=True))
    write_channel_placeholders(tmp_path / "plugin")
    state.prepare(claim())
    edits = (state.cdi.read("claim-channel-0") or {})["devices"][0]["containerEdits"]
    assert "deviceNodes" not in edits
    [mount] = edits["mounts"]
    assert mount["containerPath"] == "/dev/nvidia-caps-imex-channels"
    assert {"ro", "nosuid", "nodev", "noexec"} <= set(mount["options"])
    source = Path(mount["hostPath"])
    assert sorted(p.name for p in source.iterdir()) == ["channel0"]
    assert all(
        p.is_file() and p.stat().st_mode & 0o777 == 0o444 and not p.stat().st_size for p in source.iterdir()
    )
    state.unprepare("claim-channel-0")
    state.prepare(claim(allocationMode="All"))
    [mount] = (state.cdi.read("claim-channel-0") or {})["devices"][0]["containerEdits"]["mounts"]
    assert len(list(Path(mount["hostPath"]).iterdir())) == 2048


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


def require_root() -> None:
    if os.geteuid() != 0:
        (pytest.fail if os.environ.get("CI") else pytest.skip)("needs root (to act as the daemon's uid)")


def test_the_imex_directory_is_writable_by_the_daemons_non_root_user(tmp_path: Path) -> None:
    """The plugin runs as root without capabilities but CHOWN; the daemon as the image's uid 65532.
    Daemon prepare must leave it a directory that uid can write (it writes its config there)."""
    require_root()
    base = Path(tempfile.mkdtemp(prefix="dra-fake-imex-"))  # traversable by 65532, unlike tmp_path
    try:
        base.chmod(0o755)
        state = make_state(base, FakeDomains())
        state.prepare(claim("daemon-0", namespace=DRIVER_NAMESPACE))
        directory = base / "plugin" / "domains" / UID
        assert directory.stat().st_gid == 65532 and directory.stat().st_mode & 0o777 == 0o770
        for parent in (base / "plugin", base / "plugin" / "domains"):  # the bind mount skips these
            parent.chmod(0o755)
        pid = os.fork()
        if pid == 0:  # the daemon: uid/gid 65532, no passwd entry
            try:
                os.setgroups([])
                os.setgid(65532)
                os.setuid(65532)
                imex.render_config(directory, "10.0.0.7")
                os._exit(0)
            except BaseException:
                traceback.print_exc()
                os._exit(1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0, "the daemon's uid could not write its config"
        assert "IMEX_CMD_BIND_INTERFACE_IP=10.0.0.7" in (directory / imex.CONFIG_NAME).read_text()
        state.prepare(claim("daemon-0", namespace=DRIVER_NAMESPACE))  # idempotent
    finally:
        shutil.rmtree(base)


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


def test_an_unprepare_racing_the_node_label_leaves_no_label(tmp_path: Path) -> None:
    """The kubelet unprepares a claim while its prepare is between recording PrepareStarted and
    labelling the node (both outside the lock): the label must not outlive the claim."""
    domains = FakeDomains(ready=True)
    state = make_state(tmp_path, domains)
    label = domains.add_node_label

    def unprepare_first(node: str, uid: str) -> None:
        state.unprepare("claim-channel-0")  # finds nothing labelled yet, drops the entry
        label(node, uid)

    domains.add_node_label = unprepare_first  # type: ignore[method-assign]
    with pytest.raises(ClaimError, match="was unprepared while it was being prepared"):
        state.prepare(claim())
    assert domains.labels == {}
    assert state.prepared_claims() == {} and not state.cdi.exists("claim-channel-0")


def test_a_prepare_after_an_unprepare_that_failed_half_way_finishes_it_then_prepares(tmp_path: Path) -> None:
    """Found by the outage soak: the API server went away while an unprepare removed the node
    label; the entry stayed `unpreparing` and every later prepare was refused until an unprepare
    came. A prepare now finishes the unprepare and prepares afresh."""
    domains = FakeDomains(ready=True)
    state = make_state(tmp_path, domains)
    state.prepare(claim())
    remove = domains.remove_node_label

    def api_away(node: str, uid: str) -> bool:
        raise ConnectionError("connection refused")

    domains.remove_node_label = api_away  # type: ignore[method-assign]
    with pytest.raises(ClaimError, match="connection refused"):
        state.unprepare("claim-channel-0")
    with pytest.raises(ClaimError, match="connection refused"):  # still away: the prepare fails too
        state.prepare(claim())
    assert state.prepared_claims() == {"claim-channel-0": "PrepareStarted"}
    removed: list[str] = []

    def api_back(node: str, uid: str) -> bool:
        removed.append(uid)
        return remove(node, uid)

    domains.remove_node_label = api_back  # type: ignore[method-assign]
    [device] = state.prepare(claim())
    assert device.device_name == "channel-0" and removed == [UID]
    assert state.prepared_claims() == {"claim-channel-0": "PrepareCompleted"}
    assert domains.labels == {"node-1": UID} and state.cdi.exists("claim-channel-0")


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
