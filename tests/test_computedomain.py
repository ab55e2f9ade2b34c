"""ComputeDomain pieces without a cluster: opaque config decoding, the status formula, and the claim
state with a fake API side. The controller's manifests, its retries and status sync and the daemon's
clique index are in tests/test_computedomain_controller.py."""

from __future__ import annotations

import os
import shutil
import tempfile
import traceback
from pathlib import Path
from typing import Any

import pytest

from computedomain import imex
from computedomain.controller import status
from computedomain.plugin import configs as cdconfig
from computedomain.plugin.domains import LABEL_OWNED, NAMESPACE_MISMATCH
from computedomain.plugin.edits import channel_major, write_channel_placeholders
from computedomain.plugin.state import DaemonNotReady
from dra_fake.core.claims import ClaimError, PermanentClaimError
from tests.computedomainbed import CLIQUE, DRIVER_NAMESPACE, UID, FakeDomains, claim, make_state, params


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
