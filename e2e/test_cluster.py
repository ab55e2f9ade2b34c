"""The driver end to end: real scheduler allocation, the kubelet's DRA manager calling our plugin,
CDI specs applied (by the official CDI library in the harness, by containerd on kind), and what
the container sees."""

from __future__ import annotations

import os

import grpc
import pytest
import yaml

from dra_fake.gpu.nvidia_smi import CONTAINER_LIVE_DIR
from e2e.kube import Kube, gpu_claim_template, pod_with_claim_template, poll, workload_container
from e2e.localcluster import LocalCluster
from e2e.testbed import (
    CD_DRIVER,
    GPU_DRIVER,
    NODE_CDI_ROOT,
    TestBed,
    assert_sees_its_gpus,
    assert_sees_no_gpu,
)

SHARED_CLAIM = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: shared-gpu}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com}
"""


def pod_with_claim(name: str, claim: str) -> dict[str, object]:
    pod = pod_with_claim_template(name, "unused")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": claim}]  # type: ignore[index]
    return pod


def cdi_spec_path(uid: str) -> str:
    return f"{NODE_CDI_ROOT}/k8s.gpu.nvidia.com-claim_{uid}.yaml"


def test_slices_published_for_each_node(kube: Kube, nodes: list[str]) -> None:
    assert nodes, "no nodes"
    for node in nodes:
        slices = poll(f"slices of {node}", lambda n=node: kube.slices(node=n))
        devices = [d["name"] for s in slices for d in s["spec"].get("devices", [])]
        assert devices and all(d.startswith("gpu-") for d in devices), devices
        owner = slices[0]["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["name"], owner.get("controller")) == ("Node", node, True)


def test_claim_from_template_is_allocated_prepared_and_seen_by_its_container_only(
    kube: Kube, ns: str, bed: TestBed
) -> None:
    kube.create(gpu_claim_template("single-gpu"), ns)
    pod = pod_with_claim_template("p1", "single-gpu")
    pod["spec"]["containers"].append(workload_container("sidecar"))  # type: ignore[index]
    kube.create(pod, ns)
    running = kube.wait_running(ns, "p1")

    claim_name = running["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = kube.claim(ns, claim_name)
    [(request, pool, device)] = kube.allocated_devices(claim)
    assert (request, pool) == ("gpu", running["spec"]["nodeName"])
    assert device.startswith("gpu-")
    assert claim["status"]["reservedFor"][0]["name"] == "p1"

    uid = claim["metadata"]["uid"]
    if "node" in bed.capabilities:
        spec = yaml.safe_load(bed.read_node_file(pool, cdi_spec_path(uid)) or "{}")
        assert spec["kind"] == "k8s.gpu.nvidia.com/claim"
        assert [d["name"] for d in spec["devices"]] == [f"{uid}-{device}"]
    if bed.name == "harness":  # the CDI IDs the kubelet handed to the runtime
        assert kube.cdi_devices(running)["ctr"] == [f"k8s.gpu.nvidia.com/claim={uid}-{device}"]
    output = assert_sees_its_gpus(bed, ns, "p1")
    uuid = _device_attr(kube, pool, device, "uuid")
    assert uuid in output
    # its GPU's live readings and no other GPU's of the node (docs/security.md)
    live = bed.container(ns, "p1").run("ls", CONTAINER_LIVE_DIR)
    assert (live.code, live.output.split()) == (0, [uuid]), live.output
    assert_sees_no_gpu(bed, ns, "p1", "sidecar")


def test_two_pods_sharing_a_claim_get_the_same_device(kube: Kube, ns: str, bed: TestBed) -> None:
    kube.apply_yaml(SHARED_CLAIM, ns)
    kube.create(pod_with_claim("a", "shared-gpu"), ns)
    kube.create(pod_with_claim("b", "shared-gpu"), ns)
    a, b = kube.wait_running(ns, "a"), kube.wait_running(ns, "b")
    assert a["spec"]["nodeName"] == b["spec"]["nodeName"]
    assert assert_sees_its_gpus(bed, ns, "a") == assert_sees_its_gpus(bed, ns, "b")
    reserved = {r["name"] for r in kube.claim(ns, "shared-gpu")["status"]["reservedFor"]}
    assert reserved == {"a", "b"}


def _cpu_count(cpu_list: str) -> int:
    """How many CPUs a Cpus_allowed_list names ("0-3,6" -> 5)."""
    ranges = [part.split("-") for part in cpu_list.split(",")]
    return sum(int(r[-1]) - int(r[0]) + 1 for r in ranges)


@pytest.mark.needs("node")
def test_no_kubelet_plugin_thread_is_tied_to_one_cpu_by_default(bed: TestBed) -> None:
    """The default --cpu-affinity=inherit: every thread of a plugin may run on all the CPUs the
    plugin was started with, not on the one CPU of `one` (the benchmark's setting, pinned by
    tests/test_cpuaffinity.py). On a machine of one CPU there is nothing else to see."""
    node, cpus_here = bed.workers[0], len(os.sched_getaffinity(0))
    for driver in (GPU_DRIVER, CD_DRIVER):
        cpus = bed.plugin_thread_cpus(node, driver)
        assert len(cpus) > 2, f"{driver} plugin on {node}: threads {cpus}"
        assert len(set(cpus)) == 1, f"{driver} plugin on {node}: CPUs {cpus}"
        assert _cpu_count(cpus[0]) >= min(cpus_here, 2), f"{driver} plugin on {node}: CPUs {cpus[0]}"


@pytest.mark.needs("node")
def test_pod_deletion_unprepares_and_removes_the_cdi_spec(kube: Kube, ns: str, bed: TestBed) -> None:
    kube.create(gpu_claim_template("single-gpu"), ns)
    kube.create(pod_with_claim_template("p", "single-gpu"), ns)
    pod = kube.wait_running(ns, "p")
    claim = kube.claim(ns, pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"])
    node, path = pod["spec"]["nodeName"], cdi_spec_path(claim["metadata"]["uid"])
    assert bed.read_node_file(node, path)
    kube.delete_pod(ns, "p")
    poll("CDI spec removed after unprepare", lambda: bed.read_node_file(node, path) is None, 60)
    # The resourceclaim controller deletes the generated claim once its pod is gone.
    poll("generated claim deleted", lambda: not kube.claims(ns), 60)


@pytest.mark.needs("node")
def test_a_crashed_plugin_comes_back_and_its_claims_stay_usable(
    kube: Kube, ns: str, bed: TestBed, full_gpu_node: str
) -> None:
    """SIGKILL the GPU plugin while a pod holds a GPU: the kubelet (or harness) restarts it, the
    pod keeps its GPU, a new pod on that node gets one, and the old claim still unprepares. On a
    node with 8 full GPUs: the MIG node may have only one full GPU, which `before` holds."""
    kube.create(gpu_claim_template("single-gpu"), ns)
    before = pod_with_claim_template("before", "single-gpu")
    before["spec"]["nodeSelector"] = {"kubernetes.io/hostname": full_gpu_node}  # type: ignore[index]
    kube.create(before, ns)
    node = kube.wait_running(ns, "before")["spec"]["nodeName"]
    claim = kube.claim(ns, kube.pod(ns, "before")["status"]["resourceClaimStatuses"][0]["resourceClaimName"])
    bed.crash_plugin(node)
    poll(f"slices of {node} published", lambda: kube.slices(node=node), 60)
    assert_sees_its_gpus(bed, ns, "before")
    after = pod_with_claim_template("after", "single-gpu")
    after["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}  # type: ignore[index]
    kube.create(after, ns)
    kube.wait_running(ns, "after", timeout=120)
    assert_sees_its_gpus(bed, ns, "after")
    kube.delete_pod(ns, "before")
    path = cdi_spec_path(claim["metadata"]["uid"])
    poll("the old claim unprepared after the crash", lambda: bed.read_node_file(node, path) is None, 60)


def test_unsatisfiable_claim_stays_pending_with_the_schedulers_reason(kube: Kube, ns: str) -> None:
    kube.apply_yaml(
        """
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: too-many}
spec:
  spec:
    devices:
      requests:
      - name: gpus
        exactly: {deviceClassName: gpu.nvidia.com, allocationMode: ExactCount, count: 9}  # nodes have 8
""",
        ns,
    )
    kube.create(pod_with_claim_template("greedy", "too-many"), ns)

    message = poll("pod Unschedulable", lambda: kube.unschedulable(ns, "greedy"), 60)
    assert "cannot allocate all claims" in message, message
    assert kube.pod(ns, "greedy")["status"]["phase"] == "Pending"


@pytest.mark.needs("node")
def test_a_kubelet_restart_wipes_slices_and_the_driver_recreates_them(
    kube: Kube, bed: TestBed, nodes: list[str]
) -> None:
    node = nodes[0]
    before = {s["metadata"]["uid"] for s in kube.slices(node=node)}
    assert before
    bed.restart_kubelet(node)  # the kubelet's DRA manager deletes the node's slices at start
    poll(
        "slices re-created with new UIDs",
        lambda: (lambda now: now and not (now & before))(
            {s["metadata"]["uid"] for s in kube.slices(node=node)}
        ),
        60,
    )


@pytest.mark.needs(
    "harness",
    reason="calls the plugin's DRA socket from the test machine (kind's is inside the node container; "
    "the kubelet's own calls after a crash are e2e/test_cluster.py's crashed-plugin test)",
)
def test_plugin_restart_republishes_and_answers_prepared_claims_idempotently(
    kube: Kube, ns: str, harness: LocalCluster
) -> None:
    from e2e.draclient import prepare

    kube.create(gpu_claim_template("single-gpu"), ns)
    kube.create(pod_with_claim_template("p", "single-gpu"), ns)
    pod = kube.wait_running(ns, "p")
    node = pod["spec"]["nodeName"]
    claim = kube.claim(ns, pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"])
    socket = harness.node_dir(node) / "plugins" / "gpu.nvidia.com" / "dra.sock"
    first = prepare(socket, claim)

    harness.stop_plugin(node, kill=True)  # crash, not a graceful stop
    for s in kube.slices(node=node):  # as the kubelet would 30 s after the plugin vanished
        kube.delete_slice(s["metadata"]["name"])
    harness.start_plugin(node)  # waits until slices are back
    assert kube.slices(node=node)
    assert prepare(socket, claim) == first
    assert kube.cdi_devices(kube.pod(ns, "p")) == {"ctr": first["cdi_device_ids"]}


def _device_attr(kube: Kube, pool: str, device: str, attr: str) -> str:
    for s in kube.slices(node=pool):
        for d in s["spec"].get("devices", []):
            if d["name"] == device:
                return str(d["attributes"][attr]["string"])
    raise AssertionError(f"device {device} not in pool {pool}")


@pytest.mark.needs("node")
def test_the_driver_survives_an_api_server_restart(
    kube: Kube, ns: str, bed: TestBed, nodes: list[str]
) -> None:
    node = nodes[0]
    bed.restart_apiserver()  # the plugin's watch breaks; it must reconnect with backoff
    # The kubelet would wipe slices while the server was away; the plugin must put them back.
    for s in poll("API server back", lambda: kube.slices(node=node), 60):
        kube.delete_slice(s["metadata"]["name"])
    poll(f"slices of {node} re-created after the restart", lambda: kube.slices(node=node), 60)
    # And claims are still prepared through the restarted server.
    kube.create(gpu_claim_template("single-gpu"), ns)
    pod = pod_with_claim_template("after-restart", "single-gpu")
    pod["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}  # type: ignore[index]
    kube.create(pod, ns)
    kube.wait_running(ns, "after-restart")


@pytest.mark.needs(
    "harness",
    reason="stops the harness's kube-apiserver and calls the plugin's DRA socket from the test machine "
    "while it is away (kind's socket is inside the node container)",
)
def test_a_plugin_started_during_an_api_outage_serves_unprepare_from_its_checkpoint(
    kube: Kube, ns: str, harness: LocalCluster
) -> None:
    """The kubelet must be able to unprepare when the API server is away: the plugin comes up
    from its checkpoint and answers before it has reached the server."""
    from e2e.draclient import unprepare

    kube.create(gpu_claim_template("single-gpu"), ns)
    kube.create(pod_with_claim_template("p", "single-gpu"), ns)
    pod = kube.wait_running(ns, "p")
    node = pod["spec"]["nodeName"]
    claim = kube.claim(ns, pod["status"]["resourceClaimStatuses"][0]["resourceClaimName"])
    spec = harness.node_dir(node) / "cdi" / f"k8s.gpu.nvidia.com-claim_{claim['metadata']['uid']}.yaml"
    socket = harness.node_dir(node) / "plugins" / "gpu.nvidia.com" / "dra.sock"
    harness.stop_plugin(node, kill=True)
    harness.stop_apiserver()
    try:
        harness.start_plugin(node, wait=False)

        def unprepared() -> str | None:  # the killed plugin's socket file lingers until the new one binds
            try:
                return f"error={unprepare(socket, claim)!r}"
            except grpc.RpcError:
                return None

        assert poll("unprepare answered by the restarted plugin", unprepared, 30) == "error=''"
        assert not spec.exists()
    finally:
        harness.start_apiserver()
    poll(f"slices of {node} published after the outage", lambda: kube.slices(node=node), 90)
