"""ComputeDomains end to end (issue 4 §5): the CRDs' validation, the controller's objects and
status, the compute-domain kubelet plugin's channel/daemon prepare with the readiness chain
through simulated IMEX daemons (harness processes, or real daemon pods on kind), what the
workload's container sees, deletion, and a controller restart. Two GPU nodes."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from computedomain.api import CD_LABEL, FINALIZER, GROUP, PLURAL, VERSION, daemon_object_name
from computedomain.plugin.domains import LABEL_OWNED, NAMESPACE_MISMATCH
from e2e.computedomainbed import (
    DOMAIN_WORKLOAD_SECONDS,
    cd_manifest,
    channel_pod,
    channels_seen,
    create_cd,
    delete_cd_and_wait_clean,
    get_cd,
    get_template,
    kube_apps,
    node_labels,
    node_statuses,
    prepare_failures,
    wait_for_objects,
)
from e2e.kube import Kube, poll
from e2e.testbed import TestBed


@pytest.fixture
def controller(bed: TestBed) -> Iterator[TestBed]:
    """The test bed, with the ComputeDomain controller guaranteed running afterwards."""
    yield bed
    bed.start_controller()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"numNodes": 1}, "spec.channel: Required value"),
        ({"channel": {}}, "spec.channel.resourceClaimTemplate: Required value"),
        (
            {"channel": {"resourceClaimTemplate": {}}},
            "spec.channel.resourceClaimTemplate.name: Required value",
        ),
        (
            {"channel": {"resourceClaimTemplate": {"name": "t"}, "allocationMode": "Some"}},
            'supported values: "All", "Single"',
        ),
        (
            {"numNodes": -1, "channel": {"resourceClaimTemplate": {"name": "t"}}},
            "should be greater than or equal to 0",
        ),
    ],
)
def test_api_server_rejects_invalid_specs(kube: Kube, ns: str, spec: dict[str, Any], message: str) -> None:
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ComputeDomain",
        "metadata": {"name": "bad"},
        "spec": spec,
    }
    with pytest.raises(ApiException) as err:
        create_cd(kube, ns, body)
    assert err.value.status == 422
    assert message in json.loads(err.value.body)["message"]


def test_defaults_and_spec_immutability(kube: Kube, ns: str, bed: TestBed) -> None:
    cd = create_cd(kube, ns, cd_manifest("immutable", "imm-channel"))
    assert cd["spec"]["numNodes"] == 0 and cd["spec"]["channel"]["allocationMode"] == "Single"
    with pytest.raises(ApiException) as err:
        kube.custom.patch_namespaced_custom_object(
            GROUP, VERSION, ns, PLURAL, "immutable", {"spec": {"channel": {"allocationMode": "All"}}}
        )
    assert err.value.status == 422
    assert "A computeDomain.spec is immutable" in json.loads(err.value.body)["message"]
    # the controller's objects exist with NVIDIA's shape; the namespace fixture deletes the CD
    template = poll("workload template", lambda: get_template(kube, ns, "imm-channel"))
    config = template["spec"]["spec"]["devices"]["config"][0]["opaque"]
    assert config["driver"] == "compute-domain.nvidia.com"
    assert config["parameters"] == {
        "apiVersion": "resource.nvidia.com/v1beta1",
        "kind": "ComputeDomainChannelConfig",
        "domainID": cd["metadata"]["uid"],
        "allocationMode": "Single",
    }
    assert template["metadata"]["labels"][CD_LABEL] == cd["metadata"]["uid"]
    ds = poll(
        "daemon DaemonSet",
        lambda: (
            kube_apps(kube)
            .list_namespaced_daemon_set(
                bed.driver_namespace, label_selector=f"{CD_LABEL}={cd['metadata']['uid']}"
            )
            .items
        ),
    )
    assert ds[0].metadata.name == daemon_object_name(cd["metadata"]["uid"])
    assert ds[0].spec.template.spec.node_selector == {CD_LABEL: cd["metadata"]["uid"]}


@pytest.mark.needs("node")
def test_two_node_workload_readiness_daemon_failure_and_deletion(
    kube: Kube, ns: str, bed: TestBed, nodes: list[str]
) -> None:
    first, second = nodes[:2]
    cd = create_cd(kube, ns, cd_manifest("cd", "imex-channel-0", num_nodes=2))
    uid = cd["metadata"]["uid"]
    poll("workload template", lambda: get_template(kube, ns, "imex-channel-0"))
    for name in ("worker-0", "worker-1"):
        kube.core.create_namespaced_pod(ns, channel_pod(name, "imex-channel-0"))
    # A workload runs only after its node's IMEX daemon is Ready: the plugin retries prepare within
    # the kubelet's call until then (docs/computedomain.md#prepare-retries).
    pods = [kube.wait_running(ns, name, timeout=DOMAIN_WORKLOAD_SECONDS) for name in ("worker-0", "worker-1")]
    assert {p["spec"]["nodeName"] for p in pods} == {first, second}
    for name in ("worker-0", "worker-1"):
        assert channels_seen(bed, ns, name) == ["channel0"]
        env = bed.container(ns, name).env()
        assert env["COMPUTE_DOMAIN_UUID"] == uid
        assert env["COMPUTE_DOMAIN_NAMESPACE"] == ns and env["COMPUTE_DOMAIN_NAME"] == "cd"
    assert poll(
        "CD Ready on both nodes",
        lambda: node_statuses(kube, ns, "cd") == ("Ready", {first: "Ready", second: "Ready"}),
        60,
    )
    assert {n: v for n, v in node_labels(kube).items() if v} == {first: uid, second: uid}

    # Kill the IMEX daemon on the first node: that node turns NotReady, and with it the global status.
    bed.crash_imex_daemon(first, uid)
    assert poll(
        f"{first} NotReady",
        lambda: node_statuses(kube, ns, "cd") == ("NotReady", {first: "NotReady", second: "Ready"}),
        60,
    )
    # It is restarted (CrashLoopBackOff), and the domain becomes Ready again.
    assert poll("CD Ready again", lambda: node_statuses(kube, ns, "cd")[0] == "Ready", 120)

    for name in ("worker-0", "worker-1"):
        kube.delete_pod(ns, name)
    delete_cd_and_wait_clean(bed, ns, "cd", uid)


def test_allocation_mode_all_injects_every_channel(
    kube: Kube, ns: str, bed: TestBed, nodes: list[str]
) -> None:
    cd = create_cd(kube, ns, cd_manifest("all", "all-channels", mode="All"))
    poll("workload template", lambda: get_template(kube, ns, "all-channels"))
    kube.core.create_namespaced_pod(ns, channel_pod("p", "all-channels", node=nodes[-1]))
    kube.wait_running(ns, "p", timeout=180)
    channels = channels_seen(bed, ns, "p")
    assert len(channels) == 2048
    assert {"channel0", "channel222", "channel2047"} <= set(channels)
    assert bed.container(ns, "p").env()["DRA_FAKE_IMEX_CHANNELS"] == "0-2047"
    kube.delete_pod(ns, "p")
    delete_cd_and_wait_clean(bed, ns, "all", cd["metadata"]["uid"])


def copy_template(kube: Kube, template: dict[str, Any], name: str, namespace: str) -> None:
    """A user's copy of one of the controller's ResourceClaimTemplates, in `namespace`."""
    kube.create(
        {
            "apiVersion": f"resource.k8s.io/{kube.resource_version}",
            "kind": "ResourceClaimTemplate",
            "metadata": {"name": name},
            "spec": template["spec"],
        },
        namespace,
    )


def test_claim_from_another_namespace_is_refused(kube: Kube, ns: str, bed: TestBed, nodes: list[str]) -> None:
    cd = create_cd(kube, ns, cd_manifest("home", "home-channel"))
    template = poll("workload template", lambda: get_template(kube, ns, "home-channel"))
    other = kube.namespace("e2e-other")
    try:
        copy_template(kube, template, "stolen", other)
        kube.core.create_namespaced_pod(other, channel_pod("thief", "stolen", node=nodes[0]))
        assert NAMESPACE_MISMATCH in prepare_failures(kube, other, "thief")
        assert kube.pod(other, "thief")["status"]["phase"] == "Pending"
        assert node_labels(kube)[nodes[0]] is None  # refused before the node was claimed
    finally:
        kube.delete_namespace(other, wait=True)
    delete_cd_and_wait_clean(bed, ns, "home", cd["metadata"]["uid"])


def test_a_daemon_claim_outside_the_driver_namespace_is_refused(
    kube: Kube, ns: str, bed: TestBed, nodes: list[str]
) -> None:
    """The daemon's device mounts the domain's IMEX directory read-write: a copy of the daemon
    template in a user namespace must not get it."""
    cd = create_cd(kube, ns, cd_manifest("guarded", "guarded-channel"))
    uid = cd["metadata"]["uid"]
    daemon = poll(
        "daemon template", lambda: get_template(kube, bed.driver_namespace, daemon_object_name(uid))
    )
    copy_template(kube, daemon, "borrowed-daemon", ns)
    kube.core.create_namespaced_pod(ns, channel_pod("intruder", "borrowed-daemon", node=nodes[0]))
    assert (
        f"daemon claims are only prepared in the driver namespace '{bed.driver_namespace}'"
        in prepare_failures(kube, ns, "intruder")
    )
    assert kube.pod(ns, "intruder")["status"]["phase"] == "Pending"
    kube.delete_pod(ns, "intruder")
    delete_cd_and_wait_clean(bed, ns, "guarded", uid)


def test_second_domain_on_an_owned_node_is_refused(
    kube: Kube, ns: str, bed: TestBed, nodes: list[str]
) -> None:
    """The first node belongs to `first` (its label, as `first`'s channel prepare sets it; channel-0
    itself stays free, or the scheduler alone would keep `second` away): `second`'s channel is refused."""
    node = nodes[0]
    first = create_cd(kube, ns, cd_manifest("first", "first-channel"))
    second = create_cd(kube, ns, cd_manifest("second", "second-channel"))
    poll("template", lambda: get_template(kube, ns, "second-channel"))
    kube.core.patch_node(node, {"metadata": {"labels": {CD_LABEL: first["metadata"]["uid"]}}})
    kube.core.create_namespaced_pod(ns, channel_pod("b", "second-channel", node=node, app="b"))
    assert LABEL_OWNED in prepare_failures(kube, ns, "b")
    assert kube.pod(ns, "b")["status"]["phase"] == "Pending"
    assert node_labels(kube)[node] == first["metadata"]["uid"]
    kube.delete_pod(ns, "b")
    delete_cd_and_wait_clean(bed, ns, "first", first["metadata"]["uid"])  # removes first's label
    delete_cd_and_wait_clean(bed, ns, "second", second["metadata"]["uid"])


def test_a_foreign_template_in_the_way_is_reported_once_and_replaced_once_gone(
    kube: Kube, ns: str, bed: TestBed
) -> None:
    """Retrying cannot remove someone else's ResourceClaimTemplate: one Warning, not one per retry;
    once its owner deletes it, the periodic sync creates the ComputeDomain's own."""
    foreign = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "taken"},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}
            }
        },
    }
    kube.create(foreign, ns)
    cd = create_cd(kube, ns, cd_manifest("blocked", "taken"))
    uid = cd["metadata"]["uid"]

    def warnings() -> list[str]:
        """One entry per posting: a repeated Event may be one object with a higher count."""
        return [
            e.get("message", "")
            for e in kube.events(ns, "blocked")
            if e.get("type") == "Warning" and "does not belong to this ComputeDomain" in e.get("message", "")
            for _ in range(e.get("count") or 1)
        ]

    first = poll("a Warning about the foreign template", warnings)
    assert "ResourceClaimTemplate" in first[0] and "taken" in first[0]
    # Several retry periods of the old behaviour (a Warning every 2 s) and status syncs later:
    window = time.monotonic() + 6
    while time.monotonic() < window:
        assert len(warnings()) == 1, warnings()
        time.sleep(0.5)
    kube.custom.delete_namespaced_custom_object(*kube.resource, ns, "resourceclaimtemplates", "taken")

    def ours() -> dict[str, Any] | None:
        template = get_template(kube, ns, "taken")
        labels = (template or {}).get("metadata", {}).get("labels") or {}
        return template if labels.get(CD_LABEL) == uid else None

    poll("the ComputeDomain's own template", ours)
    assert len(warnings()) == 1
    delete_cd_and_wait_clean(bed, ns, "blocked", uid)


@pytest.mark.needs("node")  # a test bed that can stop and start the controller
def test_a_domain_created_while_the_controller_is_down_gets_its_objects_and_only_nvidias_finalizer(
    kube: Kube, ns: str, controller: TestBed
) -> None:
    """The controller finds domains created while it was away in its first listing. What it leaves
    on a domain is NVIDIA's: the finalizer, no bookkeeping annotations of its framework (kopf's
    "last handled configuration" of each domain cost a write per domain)."""
    controller.stop_controller()
    cd = create_cd(kube, ns, cd_manifest("away", "away-channel"))
    uid = cd["metadata"]["uid"]
    controller.start_controller()
    wait_for_objects(kube, controller, ns, "away-channel", uid)

    def finalized() -> dict[str, Any] | None:
        meta: dict[str, Any] = get_cd(kube, ns, "away")["metadata"]
        return meta if FINALIZER in (meta.get("finalizers") or []) else None

    meta = poll("the finalizer", finalized)
    assert not [key for key in meta.get("annotations") or {} if "dra-fake" in key or "kopf" in key], meta
    delete_cd_and_wait_clean(controller, ns, "away", uid)


@pytest.mark.needs("node")
def test_controller_restart_mid_flow_converges(
    kube: Kube, ns: str, controller: TestBed, nodes: list[str]
) -> None:
    node = nodes[0]
    cd = create_cd(kube, ns, cd_manifest("restart", "restart-channel"))
    uid = cd["metadata"]["uid"]
    # All of them: stopped after the workload template alone, no daemon would ever start.
    wait_for_objects(kube, controller, ns, "restart-channel", uid)
    controller.stop_controller()  # harness: SIGKILL; kind: scaled to 0, its pod killed
    kube.core.create_namespaced_pod(ns, channel_pod("p", "restart-channel", node=node))
    # Without a controller the node's daemon joins, but nobody publishes the CD status.
    poll(
        "daemon pod running",
        lambda: [
            p
            for p in kube.core.list_namespaced_pod(
                controller.driver_namespace, label_selector=f"{CD_LABEL}={uid}"
            ).items
            if p.status.phase == "Running"
        ],
        120,
    )
    assert not (get_cd(kube, ns, "restart").get("status") or {}).get("nodes")
    controller.start_controller()
    kube.wait_running(ns, "p", timeout=180)
    assert poll(
        f"status Ready with {node}",
        lambda: node_statuses(kube, ns, "restart") == ("Ready", {node: "Ready"}),
        60,
    )
    kube.delete_pod(ns, "p")
    delete_cd_and_wait_clean(controller, ns, "restart", uid)
