"""The chart's RBAC and admission policy against the real control plane, and the chart's objects
validated with kubeconform against schemas of this API server (issue 5 §2).

A dedicated local cluster (2 harness nodes, no plugins) gets everything `helm template` renders for
it: namespace objects, ServiceAccount, ClusterRole(Binding), ValidatingAdmissionPolicy(+Binding),
DeviceClasses, inventory ConfigMap, metrics Service and the kubelet-plugin DaemonSet, whose pods
the harness nodes "run" (no containers). Each node's GPU plugin then runs as a host process with a
kubeconfig holding a service-account token of the chart's ServiceAccount, issued by the TokenRequest
API and bound to that node's DaemonSet pod (so the token names the node, as in a real pod), with the
inventory from the chart's ConfigMap. The tests prove the plugin works with exactly these rights,
that other rights are refused, and that a node's plugin cannot touch another node's ResourceSlices.

ComputeDomains the same way: the chart's CRDs are applied, each node's compute-domain plugin runs
with the same pod-bound token as its GPU plugin (one pod, two containers, one ServiceAccount), the
controller with a token of its ServiceAccount bound to the chart's controller pod (leader election
on), and the IMEX daemon pods, which the harness execs, with a token of the daemon ServiceAccount.
The harness would exec the chart's own pods too (their command is `dra-fake ...`); their commands
are made inert before applying, so only the processes started here run (with the chart's rights).

Needs helm and kubeconform built by `hack/install-tools.sh` (`make chart-check` does it and runs
this file); without them the module is skipped, unless DRA_FAKE_REQUIRE_TOOLS=1 (then it fails).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, dynamic
from kubernetes.client.exceptions import ApiException

from e2e.harnessbed import HarnessContainer
from e2e.kube import Kube, pod_with_claim_template, poll
from e2e.localcluster import DEFAULT_ROOT, LocalCluster
from e2e.localcluster.cluster import CD_CLIQUE_ID
from e2e.localcluster.processes import Process, free_port, spawn, wait_for

REPO = Path(__file__).resolve().parents[1]
TOOLS = REPO / ".tools" / "bin"
HELM = Path(os.environ.get("HELM", TOOLS / "helm"))
KUBECONFORM = Path(os.environ.get("KUBECONFORM", TOOLS / "kubeconform"))
CHART = REPO / "charts" / "dra-fake"
NS = "dra-fake"
RELEASE = "rbac"
SA = f"{RELEASE}-dra-fake-kubelet-plugin"
CONTROLLER_SA = f"{RELEASE}-dra-fake-compute-domain-controller"
DAEMON_SA = "compute-domain-daemon-service-account"
NODES = ("node-1", "node-2")
# Rendered with leader election on, so its Lease rules are exercised too.
VALUES = ["--set", "computeDomains.controller.leaderElection.enabled=true"]

# A dedicated local control plane; on kind the plugins run with the chart's RBAC anyway, and
# e2e/test_rbac_kind.py runs the refusals of the plugin, controller and IMEX daemon (REFUSED_CALLS,
# CD_REFUSED_CALLS, the assert_* checks below) with tokens of the chart's ServiceAccounts. The
# others would hold there too: not ported yet.
pytestmark = pytest.mark.needs(
    "harness",
    reason="its own control plane (release rbac, 2 harness nodes, plugins as host processes with "
    "pod-bound tokens of the chart's ServiceAccounts); on kind, e2e/test_rbac_kind.py runs the "
    "refusals of the plugin, controller and IMEX daemon, the rest is not ported yet",
)
# Tests that start a plugin outside any container, once per set of rules: harness only.
HOST_PLUGIN = pytest.mark.needs(
    "harness", reason="starts the plugin as a host process with the chart's rules minus one, per case"
)


@pytest.fixture(scope="module", autouse=True)
def tools() -> None:
    if not (HELM.exists() and KUBECONFORM.exists()):
        reason = f"needs {HELM} and {KUBECONFORM}: run hack/install-tools.sh (make chart-check does)"
        if os.environ.get("DRA_FAKE_REQUIRE_TOOLS") == "1":
            raise RuntimeError(reason)
        pytest.skip(reason)


def helm_template(kube_version: str, api_versions: list[str], *extra: str) -> list[dict[str, Any]]:
    args = [str(HELM), "template", RELEASE, str(CHART), "-n", NS, "--kube-version", kube_version]
    for v in api_versions:
        args += ["--api-versions", v]
    out = subprocess.run([*args, *extra], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    root = Path(str(Path(os.environ.get("LOCAL_CLUSTER_DIR", DEFAULT_ROOT)).resolve()) + "-rbac")
    c = LocalCluster(root, nodes=len(NODES), with_plugins=False)
    if c.is_up():
        c.down()
    shutil.rmtree(root, ignore_errors=True)  # a fresh etcd: this module creates fixed names
    # IMEX daemon pods run with the daemon ServiceAccount's token, written by `installed`.
    c = LocalCluster(
        root, nodes=len(NODES), with_plugins=False, exec_kubeconfig=root / "sa-daemon.kubeconfig"
    )
    c.up()
    try:
        yield c
    finally:
        c.down()


@pytest.fixture(scope="module")
def admin(cluster: LocalCluster) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(cluster.kubeconfig))


def served(api: client.ApiClient) -> list[str]:
    """group/version/Kind of everything the server serves, for helm --api-versions."""
    out = []
    for group in client.ApisApi(api).get_api_versions().groups:
        for v in group.versions:
            for r in client.CustomObjectsApi(api).get_api_resources(group.name, v.version).resources:
                if "/" not in r.name:
                    out.append(f"{v.group_version}/{r.kind}")
    return out


@pytest.fixture(scope="module")
def rendered(cluster: LocalCluster, admin: client.ApiClient) -> list[dict[str, Any]]:
    version = client.VersionApi(admin).get_code().git_version.lstrip("v")
    return helm_template(version, served(admin), "--include-crds", *VALUES)


def inert(obj: dict[str, Any]) -> dict[str, Any]:
    """The object with its containers' commands renamed, so the harness does not exec them."""
    template = obj.get("spec", {}).get("template", {}).get("spec")
    if template:
        for ctr in template["containers"]:
            ctr["command"] = ["not-run-by-the-harness", *ctr["command"]]
    return obj


def is_hook(obj: dict[str, Any]) -> bool:
    """A Helm hook: created at uninstall (the node-label cleanup), not at install."""
    return "helm.sh/hook" in (obj["metadata"].get("annotations") or {})


def apply_all(api: client.ApiClient, objs: list[dict[str, Any]]) -> None:
    dyn = dynamic.DynamicClient(api)
    ext = client.ApiextensionsV1Api(api)
    crds = [o for o in objs if o["kind"] == "CustomResourceDefinition"]
    for crd in crds:
        ext.create_custom_resource_definition(crd)
    for crd in crds:
        name = crd["metadata"]["name"]
        poll(
            f"CRD {name} Established",
            lambda n=name: any(
                c.type == "Established" and c.status == "True"
                for c in (ext.read_custom_resource_definition(n).status.conditions or [])
            ),
            30,
        )
    order = [
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "ValidatingAdmissionPolicy",
    ]
    rest = [o for o in objs if o["kind"] != "CustomResourceDefinition" and not is_hook(o)]
    for obj in sorted(rest, key=lambda o: order.index(o["kind"]) if o["kind"] in order else len(order)):
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        # helm sets no namespace on most objects (the release's applies); a few name theirs (the
        # Node-events Role lives in `default`, where the kubelet posts Node events).
        namespace = obj["metadata"].get("namespace", NS) if res.namespaced else None
        res.create(body=inert(json.loads(json.dumps(obj))), namespace=namespace)


def token_kubeconfig(cluster: LocalCluster, token: str, path: Path) -> Path:
    cfg = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "sa",
        "clusters": [
            {
                "name": "local",
                "cluster": {"server": cluster.api_url, "certificate-authority": str(cluster.ca_file)},
            }
        ],
        "users": [{"name": "sa", "user": {"token": token}}],
        "contexts": [{"name": "sa", "context": {"cluster": "local", "user": "sa"}}],
    }
    path.write_text(yaml.safe_dump(cfg))
    path.chmod(0o600)
    return path


def request_token(admin: client.ApiClient, pod: dict[str, Any] | None, sa: str = SA) -> str:
    spec: dict[str, Any] = {"expirationSeconds": 3600}
    if pod is not None:
        spec["boundObjectRef"] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod["metadata"]["name"],
            "uid": pod["metadata"]["uid"],
        }
    resp = client.CoreV1Api(admin).create_namespaced_service_account_token(sa, NS, {"spec": spec})
    return str(resp.status.token)


@pytest.fixture(scope="module")
def installed(
    cluster: LocalCluster, admin: client.ApiClient, rendered: list[dict[str, Any]]
) -> dict[str, Path]:
    """The chart applied, and each node's plugin running with its SA kubeconfig. -> node: kubeconfig"""
    client.CoreV1Api(admin).create_namespace({"metadata": {"name": NS}})
    apply_all(admin, rendered)
    [cm] = [o for o in rendered if o["kind"] == "ConfigMap"]
    inventory = cluster.root / "chart-inventory.yaml"
    inventory.write_text(cm["data"]["inventory.yaml"])
    core = client.CoreV1Api(admin)

    def ds_pod(node: str) -> dict[str, Any] | None:
        pods = core.list_namespaced_pod(
            NS,
            field_selector=f"spec.nodeName={node}",
            label_selector="app.kubernetes.io/component=kubelet-plugin",
        ).items
        running = [p for p in pods if p.status.phase == "Running"]
        return admin.sanitize_for_serialization(running[0]) if running else None  # type: ignore[no-any-return]

    kubeconfigs = {}
    for node in NODES:
        pod = poll(
            f"kubelet-plugin pod of the chart's DaemonSet Running on {node}", lambda n=node: ds_pod(n), 90
        )
        assert pod["spec"]["serviceAccountName"] == SA
        kc = token_kubeconfig(cluster, request_token(admin, pod), cluster.root / f"sa-{node}.kubeconfig")
        kubeconfigs[node] = kc
        args = [a for a in cluster.plugin_args(node) if not a.startswith(("--kubeconfig=", "--config="))]
        args += [f"--kubeconfig={kc}", f"--config={inventory}"]
        proc = cluster._track(spawn(f"gpu-plugin-{node}", args, cluster.logs, cwd=REPO))
        wait_for(
            f"GPU plugin on {node} publishing with the chart's ServiceAccount",
            lambda n=node: cluster.plugin_ready(n),
            120,
            every=0.5,
            alive=proc.check_alive,
        )
    return kubeconfigs


def sa_api(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


def slice_body(node: str, name: str) -> dict[str, Any]:
    """A slice of another driver: the running plugins leave it alone (they own their driver's)."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "vap-test.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


# --- kubeconform --------------------------------------------------------------------------------


def test_rendered_objects_valid_against_this_servers_schemas(
    cluster: LocalCluster, admin: client.ApiClient, tmp_path: Path
) -> None:
    schemas = tmp_path / "schemas"
    crds = [REPO / "crds", CHART / "crds"]
    gen = [sys.executable, str(REPO / "hack" / "chart-schemas.py")]
    gen += ["--kubeconfig", str(cluster.kubeconfig), "--out", str(schemas)]
    for c in crds:
        gen += ["--crds", str(c)]
    subprocess.run(gen, check=True, timeout=120)
    targets = {
        "1.32": [
            "resource.k8s.io/v1beta1/DeviceClass",
            "admissionregistration.k8s.io/v1/ValidatingAdmissionPolicy",
        ],
        "1.33": ["resource.k8s.io/v1beta1/DeviceClass", "resource.k8s.io/v1beta2/DeviceClass"],
        "latest": served(admin),
    }
    version = client.VersionApi(admin).get_code().git_version.lstrip("v")
    for target, apis in targets.items():
        for values in (None, CHART / "ci" / "pools-values.yaml"):
            extra = ["-f", str(values)] if values else []
            docs = helm_template(version if target == "latest" else f"{target}.0", apis, *extra)
            manifest = tmp_path / f"{target}.yaml"
            manifest.write_text(yaml.safe_dump_all(docs))
            expected = "v1beta1" if target == "1.32" else ("v1beta2" if target == "1.33" else "v1")
            assert {d["apiVersion"] for d in docs if d["kind"] == "DeviceClass"} == {
                f"resource.k8s.io/{expected}"
            }
            # rendered whatever Helm is told of the server's APIs
            assert any(d["kind"] == "ValidatingAdmissionPolicy" for d in docs), target
            out = subprocess.run(
                [
                    str(KUBECONFORM),
                    "-strict",
                    "-summary",
                    "-schema-location",
                    str(schemas) + "/{{ .ResourceKind }}{{ .KindSuffix }}.json",
                    str(manifest),
                ],
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert out.returncode == 0, f"{target} {values}: {out.stdout}{out.stderr}"
            assert "Skipped: 0" in out.stdout and "Invalid: 0" in out.stdout, out.stdout


# --- RBAC ---------------------------------------------------------------------------------------


def test_plugins_publish_with_the_charts_service_account(
    installed: dict[str, Path], admin: client.ApiClient
) -> None:
    kube = Kube(next(iter(installed.values())).parent / "kubeconfig")
    for node in NODES:
        slices = kube.slices(node=node)
        devices = [d["name"] for s in slices for d in s["spec"]["devices"]]
        assert devices == [f"gpu-{i}" for i in range(8)], devices  # the chart's default inventory
        assert slices[0]["metadata"]["ownerReferences"][0]["name"] == node

        def labelled(node: str = node) -> dict[str, str] | None:
            labels = client.CoreV1Api(admin).read_node(node).metadata.labels or {}
            return labels if "nvidia.com/gpu.product" in labels else None

        # GPU Feature Discovery's labels, written with the chart's rights through its policy
        labels = poll(f"GFD labels on {node}", labelled, 60)
        assert (
            labels["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"
            and labels["nvidia.com/gpu.count"] == "8"
        )


def test_pod_with_gpu_runs_and_nvidia_smi_shows_its_gpu(
    installed: dict[str, Path], cluster: LocalCluster, tmp_path: Path
) -> None:
    kube = Kube(cluster.kubeconfig)
    ns = kube.namespace("rbac")
    try:
        kube.apply_yaml(
            "apiVersion: resource.k8s.io/v1\nkind: ResourceClaimTemplate\nmetadata: {name: one}\n"
            "spec:\n  spec:\n    devices:\n      requests:\n"
            "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}\n",
            ns,
        )
        kube.create(pod_with_claim_template("p", "one"), ns)
        pod = kube.wait_running(ns, "p")  # prepared by a plugin running with the chart's rights
        node = pod["spec"]["nodeName"]
        [record] = (cluster.node_dir(node) / "pods").glob(f"{ns}_p_*.json")
        container = json.loads(record.read_text())["containers"]["ctr"]
        assert any(m["destination"] == "/usr/bin/nvidia-smi" for m in container["mounts"]), container
        # What the CDI library told the runtime to bind-mount, run as the harness runs containers.
        result = HarnessContainer(container).nvidia_smi("-L")
        assert result.code == 0, result.output
        out = result.output
        claim = kube.claims(ns)[0]
        [(_, pool, device)] = kube.allocated_devices(claim)
        uuid = next(
            d["attributes"]["uuid"]["string"]
            for s in kube.slices(node=pool)
            for d in s["spec"]["devices"]
            if d["name"] == device
        )
        assert out == f"GPU 0: NVIDIA H100 80GB HBM3 (UUID: {uuid})\n"
    finally:
        kube.delete_namespace(ns)


def test_plugin_writes_the_status_of_its_nodes_faults(
    installed: dict[str, Path], admin: client.ApiClient
) -> None:
    """The GPU plugin of node-1, with the chart's rights, watches its node's GpuFaults, writes
    their status and taints the device (the local cluster's plugins run with NVMLDeviceHealthCheck)."""
    custom = client.CustomObjectsApi(admin)
    fault = {
        "apiVersion": "dra-fake.dev/v1alpha1",
        "kind": "GpuFault",
        "metadata": {"name": "rbac-xid"},
        "spec": {"nodeName": "node-1", "device": "gpu-3", "kind": "xid", "xid": 79, "recovery": "clear"},
    }
    custom.create_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", fault)
    try:

        def status() -> Any:
            obj = custom.get_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", "rbac-xid")
            return (obj.get("status") or {}).get("phase") == "Active" and obj["status"]

        got = poll("GpuFault rbac-xid Active", status, 60)
        assert got["message"] == "on gpu-3" and got["node"] == "node-1", got
        kube = Kube(next(iter(installed.values())).parent / "kubeconfig")

        def tainted() -> list[str]:
            return [
                d["name"] for s in kube.slices(node="node-1") for d in s["spec"]["devices"] if d.get("taints")
            ]

        assert poll("gpu-3 tainted", tainted, 60) == ["gpu-3"]
    finally:
        custom.delete_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", "rbac-xid")


def test_a_hostile_load_annotation_gets_an_event_and_stops_nothing(
    installed: dict[str, Path], admin: client.ApiClient, cluster: LocalCluster
) -> None:
    """Any pod of a node may carry the simulated-load annotations: one of 5,000 digits (Python's
    int() limit, which stopped the node's sampler) gets a SimulatedLoadIgnored Event, posted by
    node-1's plugin with the chart's rights (events create), and the node's metrics go on."""
    core = client.CoreV1Api(admin)
    pod = {
        "metadata": {"name": "bad-load", "annotations": {"dra-fake.dev/simulated-gpu-memory": "9" * 5000}},
        "spec": {"nodeName": "node-1", "containers": [{"name": "c", "image": "x", "command": ["sleep"]}]},
    }
    core.create_namespaced_pod(NS, pod)
    try:

        def load_event() -> list[str]:
            events = core.list_namespaced_event(NS, field_selector="involvedObject.name=bad-load").items
            return [e.message for e in events if e.reason == "SimulatedLoadIgnored"]

        [message] = poll("the SimulatedLoadIgnored Event on the pod", load_event, 60)
        assert "dra-fake.dev/simulated-gpu-memory" in message and "not a string of at most 64" in message
        log = cluster.logs / "gpu-plugin-node-1.log"
        assert not forbidden(log), forbidden(log)
    finally:
        core.delete_namespaced_pod("bad-load", NS, grace_period_seconds=0)


# Calls a plugin's token is refused (403): RBAC, not the admission policies (e2e/test_rbac_kind.py too).
REFUSED_CALLS = [
    pytest.param(lambda api: client.CoreV1Api(api).list_secret_for_all_namespaces(), id="list-secrets"),
    pytest.param(lambda api: client.CoreV1Api(api).list_node(), id="list-nodes"),
    pytest.param(
        lambda api: client.CoreV1Api(api).create_namespaced_pod(
            "default", {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        ),
        id="create-pod",
    ),
    pytest.param(
        lambda api: client.CustomObjectsApi(api).delete_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims", "x"
        ),
        id="delete-claim",
    ),
    pytest.param(
        lambda api: client.CustomObjectsApi(api).create_cluster_custom_object(
            "resource.k8s.io",
            "v1",
            "deviceclasses",
            {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": "x"}},
        ),
        id="create-deviceclass",
    ),
    pytest.param(
        lambda api: client.CustomObjectsApi(api).patch_namespaced_custom_object(
            "resource.k8s.io", "v1", "default", "resourceclaims", "x", {"spec": {}}
        ),
        id="write-claim",
    ),
    pytest.param(
        lambda api: client.CustomObjectsApi(api).create_cluster_custom_object(
            "dra-fake.dev",
            "v1alpha1",
            "gpufaults",
            {
                "apiVersion": "dra-fake.dev/v1alpha1",
                "kind": "GpuFault",
                "metadata": {"name": "x"},
                "spec": {"nodeName": "node-1", "device": "gpu-0", "kind": "gpu-lost"},
            },
        ),
        id="create-gpufault",
    ),
]


@pytest.mark.parametrize("call", REFUSED_CALLS)
def test_everything_else_is_refused(installed: dict[str, Path], call: Any) -> None:
    with pytest.raises(ApiException) as err:
        call(sa_api(installed["node-1"]))
    assert err.value.status == 403, err.value


def assert_slices_of_its_own_node_only(
    plugin: client.ApiClient, own: str, other: str, other_slice: str
) -> None:
    """A node's plugin (a token bound to its pod) may not create or delete another node's
    ResourceSlices, and may its own node's (e2e/test_rbac_kind.py too)."""
    custom = client.CustomObjectsApi(plugin)
    with pytest.raises(ApiException) as err:
        custom.create_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", slice_body(other, "evil")
        )
    assert err.value.status in (403, 422) and f"may not modify ResourceSlices of node {other}" in str(
        err.value.body
    )
    with pytest.raises(ApiException) as err:
        custom.delete_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", other_slice)
    assert err.value.status in (403, 422), err.value
    # its own node: allowed (and cleaned up)
    custom.create_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", slice_body(own, "own-x"))
    custom.delete_cluster_custom_object("resource.k8s.io", "v1", "resourceslices", "own-x")


def assert_unbound_token_writes_no_slices(unbound: client.ApiClient, node: str) -> None:
    """A token of the plugin's ServiceAccount not bound to a pod names no node: no slice at all."""
    with pytest.raises(ApiException) as err:
        client.CustomObjectsApi(unbound).create_cluster_custom_object(
            "resource.k8s.io", "v1", "resourceslices", slice_body(node, "x")
        )
    assert err.value.status in (403, 422) and "no node name" in str(err.value.body), err.value


def test_admission_policy_keeps_a_plugin_on_its_own_node(
    installed: dict[str, Path], admin: client.ApiClient
) -> None:
    other = Kube(installed["node-2"].parent / "kubeconfig").slices(node="node-2")[0]
    assert_slices_of_its_own_node_only(
        sa_api(installed["node-1"]), "node-1", "node-2", other["metadata"]["name"]
    )


def test_admission_policy_limits_node_patches_to_the_own_nodes_plugin_labels(
    installed: dict[str, Path], admin: client.ApiClient
) -> None:
    """`nodes patch` is cluster-wide in RBAC; the chart's policy narrows it to what the plugins
    do: the resource.nvidia.com/computeDomain label and GFD's labels (with the annotation recording
    them) of their own node."""
    core = client.CoreV1Api(sa_api(installed["node-1"]))
    label = "resource.nvidia.com/computeDomain"

    def refused(node: str, labels: dict[str, str | None]) -> str:
        with pytest.raises(ApiException) as err:
            core.patch_node(node, {"metadata": {"labels": labels}})
        assert err.value.status in (403, 422), err.value
        return str(err.value.body)

    assert "may not modify node node-2" in refused("node-2", {label: "x"})
    assert "may not modify node node-2" in refused("node-2", {"nvidia.com/gpu.count": "9"})
    assert "only the label resource.nvidia.com/computeDomain and GPU Feature Discovery" in refused(
        "node-1", {"kubernetes.io/hostname": "node-2"}
    )
    assert "only the label" in refused("node-1", {"evil.example/owned": "yes"})
    assert "only the label" in refused("node-1", {"nvidia.com/gpu-evil": "yes"})  # not a GFD key
    with pytest.raises(ApiException) as err:
        core.patch_node("node-1", {"spec": {"unschedulable": True}})
    assert err.value.status in (403, 422) and "only the label" in str(err.value.body)
    with pytest.raises(ApiException) as err:
        core.patch_node("node-1", {"metadata": {"annotations": {"evil.example/note": "x"}}})
    assert err.value.status in (403, 422) and "only the label" in str(err.value.body)
    # GFD's keys and the annotation recording them: allowed on its own node
    core.patch_node("node-1", {"metadata": {"labels": {"nvidia.com/mig-1g.10gb.count": "1"}}})
    core.patch_node("node-1", {"metadata": {"labels": {"nvidia.com/mig-1g.10gb.count": None}}})
    # its own node's domain label: allowed, set and removed
    core.patch_node("node-1", {"metadata": {"labels": {label: "0f000000-0000-4000-8000-000000000000"}}})
    core.patch_node("node-1", {"metadata": {"labels": {label: None}}})
    assert label not in (client.CoreV1Api(admin).read_node("node-1").metadata.labels or {})


def test_token_without_node_binding_cannot_write_slices(
    installed: dict[str, Path], admin: client.ApiClient, cluster: LocalCluster
) -> None:
    kc = token_kubeconfig(cluster, request_token(admin, None), cluster.root / "sa-unbound.kubeconfig")
    assert_unbound_token_writes_no_slices(sa_api(kc), "node-1")


# --- ComputeDomains with the chart's RBAC -------------------------------------------------------


@pytest.fixture(scope="module")
def cd_installed(
    installed: dict[str, Path], cluster: LocalCluster, admin: client.ApiClient
) -> dict[str, Path]:
    """The compute-domain plugins (the plugin pods' tokens), the controller (a token bound to the
    chart's controller pod) and the daemon credentials. -> role or node: kubeconfig"""
    core = client.CoreV1Api(admin)
    token_kubeconfig(cluster, request_token(admin, None, DAEMON_SA), cluster.root / "sa-daemon.kubeconfig")
    for node in NODES:
        args = [
            a for a in cluster.cd_plugin_args(node) if not a.startswith(("--kubeconfig=", "--namespace="))
        ]
        args += [f"--kubeconfig={installed[node]}", f"--namespace={NS}"]
        proc = cluster._track(spawn(f"cd-plugin-{node}", args, cluster.logs, cwd=REPO))
        wait_for(
            f"compute-domain plugin on {node} publishing with the chart's ServiceAccount",
            lambda n=node: Kube(cluster.kubeconfig).slices(driver="compute-domain.nvidia.com", node=n),
            120,
            every=0.5,
            alive=proc.check_alive,
        )

    def controller_pod() -> dict[str, Any] | None:
        pods = core.list_namespaced_pod(
            NS, label_selector="app.kubernetes.io/component=compute-domain-controller"
        ).items
        running = [p for p in pods if p.status.phase == "Running"]
        return admin.sanitize_for_serialization(running[0]) if running else None  # type: ignore[no-any-return]

    pod = poll("the chart's controller pod Running", controller_pod, 90)
    assert pod["spec"]["serviceAccountName"] == CONTROLLER_SA
    kc = token_kubeconfig(
        cluster, request_token(admin, pod, CONTROLLER_SA), cluster.root / "sa-controller.kubeconfig"
    )
    args = [
        sys.executable,
        "-m",
        "dra_fake",
        "compute-domain-controller",
        f"--kubeconfig={kc}",
        f"--namespace={NS}",
        "--status-sync-seconds=1",
        "--leader-elect=true",
        f"--leader-elect-identity={pod['metadata']['name']}",
        # the chart's daemon image: its admission policy pins the DaemonSets to it
        *(
            f"--daemon-image={e['value']}"
            for e in pod["spec"]["containers"][0]["env"]
            if e["name"] == "IMAGE_NAME"
        ),
        f"--metrics-port={free_port()}",
    ]
    ctrl: Process = cluster._track(spawn("cd-controller", args, cluster.logs, cwd=REPO))
    coord = client.CoordinationV1Api(admin)

    def leader() -> str | None:
        ctrl.check_alive()
        try:
            return coord.read_namespaced_lease("compute-domain-controller", NS).spec.holder_identity  # type: ignore[no-any-return]
        except ApiException:
            return None

    assert poll("controller holds the Lease", leader, 60) == pod["metadata"]["name"]
    return {**installed, "controller": kc, "daemon": cluster.root / "sa-daemon.kubeconfig"}


def test_compute_domain_flow_with_the_charts_rbac(
    cd_installed: dict[str, Path], cluster: LocalCluster
) -> None:
    """CD -> workload template (controller) -> 2 pods on 2 nodes: node labels (plugins), daemon
    DaemonSet (controller), daemons join their clique (daemon SA) -> channels injected -> Ready ->
    deleted: every object and label gone (controller). No 403 in any of their logs."""
    from e2e.computedomainbed import (
        cd_manifest,
        channel_pod,
        create_cd,
        get_cd,
        get_template,
        node_statuses,
    )

    kube = Kube(cluster.kubeconfig)
    ns = kube.namespace("rbac-cd")
    try:
        uid = create_cd(kube, ns, cd_manifest("cd", "imex-channel-0", num_nodes=2))["metadata"]["uid"]
        template = poll("workload template", lambda: get_template(kube, ns, "imex-channel-0"), 60)
        assert template["metadata"]["labels"]["resource.nvidia.com/computeDomain"] == uid
        for name in ("worker-0", "worker-1"):
            kube.core.create_namespaced_pod(ns, channel_pod(name, "imex-channel-0"))
        pods = [kube.wait_running(ns, name, timeout=120) for name in ("worker-0", "worker-1")]
        assert {p["spec"]["nodeName"] for p in pods} == set(NODES)
        for pod in pods:
            record = json.loads(
                next(
                    (cluster.node_dir(pod["spec"]["nodeName"]) / "pods").glob(
                        f"{ns}_{pod['metadata']['name']}_*.json"
                    )
                ).read_text()
            )["containers"]["ctr"]
            # a read-only directory of placeholder files mounted there (computedomain/plugin/edits.py)
            channels = []
            for m in record.get("mounts", []):
                if m["destination"] == "/dev/nvidia-caps-imex-channels":
                    channels += [f"{m['destination']}/{f}" for f in sorted(os.listdir(m["source"]))]
            assert channels == ["/dev/nvidia-caps-imex-channels/channel0"]
            assert f"COMPUTE_DOMAIN_UUID={uid}" in record["env"]
        assert poll(
            "CD Ready on both nodes",
            lambda: node_statuses(kube, ns, "cd") == ("Ready", {n: "Ready" for n in NODES}),
            60,
        )
        clique = kube.custom.get_namespaced_custom_object(
            "resource.nvidia.com", "v1beta1", NS, "computedomaincliques", f"{uid}.{CD_CLIQUE_ID}"
        )
        assert sorted(d["nodeName"] for d in clique["daemons"]) == list(NODES)  # written by the daemon SA
        for name in ("worker-0", "worker-1"):
            kube.delete_pod(ns, name)
        kube.custom.delete_namespaced_custom_object(
            "resource.nvidia.com", "v1beta1", ns, "computedomains", "cd"
        )

        def gone() -> bool:
            try:
                get_cd(kube, ns, "cd")
                return False
            except ApiException as err:
                return err.status == 404

        poll("ComputeDomain deleted by the controller", gone, 90)
        apps = client.AppsV1Api(kube.api)
        assert not apps.list_namespaced_daemon_set(
            NS, label_selector=f"resource.nvidia.com/computeDomain={uid}"
        ).items
        assert not [
            n.metadata.name
            for n in kube.core.list_node(label_selector=f"resource.nvidia.com/computeDomain={uid}").items
        ]
        for log in [
            cluster.logs / "cd-controller.log",
            *(cluster.logs / f"cd-plugin-{n}.log" for n in NODES),
        ]:
            text = log.read_text()
            assert " 403" not in text and "Forbidden" not in text, f"{log}: {text[-3000:]}"
        for exec_log in cluster.root.glob("nodes/*/exec/*.log"):
            assert "Forbidden" not in exec_log.read_text(), exec_log
    finally:
        kube.delete_namespace(ns)


CD = ("resource.nvidia.com", "v1beta1")


# Calls each ComputeDomain component's token is refused (403): who is "node-1" (a plugin),
# "controller" or "daemon" (e2e/test_rbac_kind.py too).
CD_REFUSED_CALLS = [
    pytest.param(
        "node-1",
        lambda api: client.CustomObjectsApi(api).create_namespaced_custom_object(
            *CD,
            "default",
            "computedomains",
            {
                "apiVersion": "resource.nvidia.com/v1beta1",
                "kind": "ComputeDomain",
                "metadata": {"name": "x"},
                "spec": {"channel": {"resourceClaimTemplate": {"name": "x"}}},
            },
        ),
        id="plugin-create-computedomain",
    ),
    pytest.param(
        "node-1",
        lambda api: client.CustomObjectsApi(api).list_namespaced_custom_object(
            *CD, NS, "computedomaincliques"
        ),
        id="plugin-list-cliques",
    ),
    pytest.param("node-1", lambda api: client.CoreV1Api(api).delete_node("node-2"), id="plugin-delete-node"),
    pytest.param(
        "controller",
        lambda api: client.CoreV1Api(api).list_secret_for_all_namespaces(),
        id="controller-list-secrets",
    ),
    pytest.param(
        "controller",
        lambda api: client.AppsV1Api(api).list_namespaced_daemon_set("kube-system"),
        id="controller-daemonsets-elsewhere",
    ),
    pytest.param(
        "controller",
        lambda api: client.CoreV1Api(api).create_namespaced_pod(
            NS, {"metadata": {"name": "x"}, "spec": {"containers": [{"name": "c", "image": "x"}]}}
        ),
        id="controller-create-pod",
    ),
    pytest.param(
        "controller",
        lambda api: client.CoordinationV1Api(api).read_namespaced_lease("other-lease", NS),
        id="controller-other-lease",
    ),
    pytest.param(
        "daemon",
        lambda api: client.CustomObjectsApi(api).list_cluster_custom_object(*CD, "computedomains"),
        id="daemon-list-computedomains",
    ),
    pytest.param(
        "daemon",
        lambda api: client.CustomObjectsApi(api).get_namespaced_custom_object(
            *CD, "default", "computedomaincliques", "x"
        ),
        id="daemon-cliques-elsewhere",
    ),
    pytest.param("daemon", lambda api: client.CoreV1Api(api).list_node(), id="daemon-list-nodes"),
]


@pytest.mark.parametrize(("who", "call"), CD_REFUSED_CALLS)
def test_compute_domain_components_are_refused_the_rest(
    cd_installed: dict[str, Path], who: str, call: Any
) -> None:
    with pytest.raises(ApiException) as err:
        call(sa_api(cd_installed[who]))
    assert err.value.status == 403, err.value


# --- admission policies: each account on its own objects (issue 46, docs/security.md) -----------


def refused_by_policy(call: Any, message: str) -> None:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status in (403, 422) and message in str(err.value.body), err.value


def test_admission_policy_keeps_a_plugin_to_its_own_nodes_fault_status(
    installed: dict[str, Path], admin: client.ApiClient
) -> None:
    """`gpufaults/status patch` is cluster-wide in RBAC: node-1's plugin may not write the status of
    another node's GpuFault (a node without a plugin here, so no one else acts on it)."""
    custom = client.CustomObjectsApi(admin)
    fault = {
        "apiVersion": "dra-fake.dev/v1alpha1",
        "kind": "GpuFault",
        "metadata": {"name": "rbac-elsewhere"},
        "spec": {"nodeName": "node-9", "device": "gpu-0", "kind": "gpu-lost"},
    }
    custom.create_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", fault)
    try:
        plugin = client.CustomObjectsApi(sa_api(installed["node-1"]))
        refused_by_policy(
            lambda: plugin.patch_cluster_custom_object_status(
                "dra-fake.dev", "v1alpha1", "gpufaults", "rbac-elsewhere", {"status": {"phase": "Failed"}}
            ),
            "may not write the status of GpuFaults of node node-9",
        )
    finally:
        custom.delete_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", "rbac-elsewhere")


def test_only_admins_create_a_noexecute_gpufault(
    installed: dict[str, Path], admin: client.ApiClient, cluster: LocalCluster, tmp_path: Path
) -> None:
    """A GpuFault with effect NoExecute evicts every pod on the device: a user allowed to create
    GpuFaults, outside validatingAdmissionPolicy.adminGroups, may create other faults but not that one."""
    rbac, core = client.RbacAuthorizationV1Api(admin), client.CoreV1Api(admin)
    name = "fault-author"
    core.create_namespaced_service_account(NS, {"metadata": {"name": name}})
    rule = {"apiGroups": ["dra-fake.dev"], "resources": ["gpufaults"], "verbs": ["create", "delete"]}
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": [rule]})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NS}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        }
    )
    token = core.create_namespaced_service_account_token(name, NS, {"spec": {"expirationSeconds": 600}})
    author = client.CustomObjectsApi(
        sa_api(token_kubeconfig(cluster, str(token.status.token), tmp_path / "kc"))
    )

    def fault(effect: str) -> dict[str, Any]:
        spec = {"nodeName": "node-9", "device": "gpu-0", "kind": "gpu-lost", "effect": effect}
        return {
            "apiVersion": "dra-fake.dev/v1alpha1",
            "kind": "GpuFault",
            "metadata": {"name": f"by-author-{effect.lower()}"},
            "spec": spec,
        }

    try:
        refused_by_policy(
            lambda: author.create_cluster_custom_object(
                "dra-fake.dev", "v1alpha1", "gpufaults", fault("NoExecute")
            ),
            "a GpuFault with effect NoExecute evicts other tenants' pods",
        )
        author.create_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", fault("NoSchedule"))
        author.delete_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", "by-author-noschedule")
        admin_custom = client.CustomObjectsApi(admin)  # system:masters
        admin_custom.create_cluster_custom_object("dra-fake.dev", "v1alpha1", "gpufaults", fault("NoExecute"))
        admin_custom.delete_cluster_custom_object(
            "dra-fake.dev", "v1alpha1", "gpufaults", "by-author-noexecute"
        )
    finally:
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
        core.delete_namespaced_service_account(name, NS)


def test_admission_policy_keeps_the_controller_to_imex_daemonsets_and_its_node_label(
    cd_installed: dict[str, Path],
) -> None:
    """The controller's `daemonsets create, patch, delete` would reach the kubelet plugin's
    DaemonSet (root, host paths), its `nodes patch` every label: the policies allow only the
    DaemonSets it renders and the ComputeDomain label."""
    assert_controller_kept_to_imex_daemonsets(
        sa_api(cd_installed["controller"]), f"{RELEASE}-dra-fake-kubelet-plugin", "node-1"
    )


def assert_controller_kept_to_imex_daemonsets(
    controller: client.ApiClient, plugin_ds: str, node: str
) -> None:
    """The controller's token may not touch the plugin's DaemonSet, create a DaemonSet it would not
    render, or label a node with anything but the ComputeDomain label (e2e/test_rbac_kind.py too)."""
    apps, core = client.AppsV1Api(controller), client.CoreV1Api(controller)
    refused_by_policy(
        lambda: apps.patch_namespaced_daemon_set(plugin_ds, NS, {"metadata": {"labels": {"x": "y"}}}),
        "may change only IMEX daemon DaemonSets",
    )
    refused_by_policy(
        lambda: apps.delete_namespaced_daemon_set(plugin_ds, NS), "may change only IMEX daemon DaemonSets"
    )
    label = {"resource.nvidia.com/computeDomain": "0f000000-0000-4000-8000-000000000000"}
    rogue = {
        "metadata": {"name": "rogue", "labels": label},
        "spec": {
            "selector": {"matchLabels": label},
            "template": {
                "metadata": {"labels": label},
                "spec": {
                    "serviceAccountName": DAEMON_SA,
                    "hostPID": True,
                    "containers": [
                        {"name": "c", "image": "x", "command": ["dra-fake", "imex-daemon", "run"]}
                    ],
                },
            },
        },
    }
    refused_by_policy(
        lambda: apps.create_namespaced_daemon_set(NS, rogue), "may create only IMEX daemon DaemonSets"
    )
    refused_by_policy(
        lambda: core.patch_node(node, {"metadata": {"labels": {"evil.example/owned": "yes"}}}),
        "may change only the label resource.nvidia.com/computeDomain",
    )


def test_the_controller_releases_an_imex_daemonset_an_earlier_release_rendered(
    cd_installed: dict[str, Path], admin: client.ApiClient
) -> None:
    assert_controller_releases_an_earlier_daemonset(sa_api(cd_installed["controller"]), admin)


def assert_controller_releases_an_earlier_daemonset(
    controller: client.ApiClient, admin: client.ApiClient
) -> None:
    """After an upgrade the IMEX DaemonSets of existing domains still run the previous release's
    image: the controller may still drop its finalizer from one (else the domain never goes), and
    still may not change its spec (e2e/test_rbac_kind.py too)."""
    apps_admin, apps = client.AppsV1Api(admin), client.AppsV1Api(controller)
    label = {"resource.nvidia.com/computeDomain": "0e000000-0000-4000-8000-000000000000"}
    name = "computedomain-daemon-0e000000-0000-4000-8000-000000000000"
    container = {"name": "d", "image": "dra-fake:0.0.1", "command": ["dra-fake", "imex-daemon", "run"]}
    old = {
        "metadata": {"name": name, "labels": label, "finalizers": ["resource.nvidia.com/computeDomain"]},
        "spec": {
            "selector": {"matchLabels": label},
            "template": {
                "metadata": {"labels": label},
                "spec": {
                    "serviceAccountName": DAEMON_SA,
                    "containers": [container],
                    "nodeSelector": {"dra-fake.dev/e2e": "no-such-node"},  # no pods on kind
                },
            },
        },
    }
    apps_admin.create_namespaced_daemon_set(NS, old)
    try:
        new_image = {"spec": {"template": {"spec": {"containers": [{**container, "image": "x"}]}}}}
        refused_by_policy(
            lambda: apps.patch_namespaced_daemon_set(name, NS, new_image),
            "may change only the metadata of an IMEX daemon DaemonSet",
        )
        drop = [
            {"op": "test", "path": "/metadata/finalizers/0", "value": "resource.nvidia.com/computeDomain"},
            {"op": "remove", "path": "/metadata/finalizers/0"},
        ]
        released = apps.patch_namespaced_daemon_set(name, NS, drop)  # a list: a JSON patch
        assert not released.metadata.finalizers
    finally:
        apps_admin.delete_namespaced_daemon_set(name, NS)


def test_admission_policy_keeps_the_imex_daemon_to_its_own_pod(
    cd_installed: dict[str, Path], admin: client.ApiClient
) -> None:
    assert_daemon_patches_no_other_pod(sa_api(cd_installed["daemon"]), admin)


def assert_daemon_patches_no_other_pod(daemon: client.ApiClient, admin: client.ApiClient) -> None:
    """The daemon's `pods patch` is for its own pod's clique label: a token not bound to that pod
    (the credentials here) patches no pod (e2e/test_rbac_kind.py too)."""
    plugin_pod = (
        client.CoreV1Api(admin)
        .list_namespaced_pod(NS, label_selector="app.kubernetes.io/component=kubelet-plugin")
        .items[0]
    )
    refused_by_policy(
        lambda: client.CoreV1Api(daemon).patch_namespaced_pod(
            plugin_pod.metadata.name,
            NS,
            {"metadata": {"labels": {"resource.nvidia.com/computeDomain.cliqueID": ""}}},
        ),
        "may not modify pod " + plugin_pod.metadata.name,
    )


@pytest.mark.parametrize("kind", ["resourceclaims", "resourceclaimtemplates"])
@pytest.mark.parametrize(
    "device_class", ["compute-domain-default-channel.nvidia.com", "compute-domain-daemon.nvidia.com"]
)
def test_compute_domain_devices_are_claimed_only_through_the_controllers_templates(
    cd_installed: dict[str, Path],
    admin: client.ApiClient,
    cluster: LocalCluster,
    tmp_path: Path,
    kind: str,
    device_class: str,
) -> None:
    """A tenant's claim of a node's one daemon or channel device, in a namespace without the
    ComputeDomain, would block every ComputeDomain on that node: refused at admission, before any
    allocation, though RBAC lets the tenant create claims there; a GPU claim passes. (The
    controller's own templates pass: the ComputeDomain flow above ran with this policy.)"""
    kube = Kube(cd_installed["controller"].parent / "kubeconfig")
    ns = kube.namespace("tenant")
    rbac, core = client.RbacAuthorizationV1Api(admin), client.CoreV1Api(admin)
    try:
        core.create_namespaced_service_account(ns, {"metadata": {"name": "tenant"}})
        rule = {"apiGroups": ["resource.k8s.io"], "resources": [kind], "verbs": ["create"]}
        rbac.create_namespaced_role(ns, {"metadata": {"name": "tenant"}, "rules": [rule]})
        rbac.create_namespaced_role_binding(
            ns,
            {
                "metadata": {"name": "tenant"},
                "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": ns}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "tenant"},
            },
        )
        token = core.create_namespaced_service_account_token(
            "tenant", ns, {"spec": {"expirationSeconds": 600}}
        )
        tenant = client.CustomObjectsApi(
            sa_api(token_kubeconfig(cluster, str(token.status.token), tmp_path / "kc"))
        )

        def body(name: str, device_class: str) -> dict[str, Any]:
            spec = {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": device_class}}]}}
            return {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim" if kind == "resourceclaims" else "ResourceClaimTemplate",
                "metadata": {"name": name},
                "spec": spec if kind == "resourceclaims" else {"spec": spec},
            }

        refused_by_policy(
            lambda: tenant.create_namespaced_custom_object(
                "resource.k8s.io", "v1", ns, kind, body("grab", device_class)
            ),
            "are claimed only through the templates the ComputeDomain controller creates",
        )
        tenant.create_namespaced_custom_object(
            "resource.k8s.io", "v1", ns, kind, body("gpu", "gpu.nvidia.com")
        )
    finally:
        kube.delete_namespace(ns)


# --- every rule is needed -----------------------------------------------------------------------

PROBE_SA = "rbac-probe"


def without(rules: list[dict[str, Any]], resource: str, verb: str) -> list[dict[str, Any]]:
    out = []
    for r in rules:
        verbs = [v for v in r["verbs"] if not (resource in r["resources"] and v == verb)]
        if verbs:
            out.append({**r, "verbs": verbs})
    return out


def forbidden(log: Path) -> list[str]:
    """Errors of the plugin's JSON log that are the API server's 403 (an ApiException's text
    starts with its status): not just any "403" in a UID or a timestamp."""
    errors = []
    for line in log.read_text().splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        error = str(record.get("error", "")) if isinstance(record, dict) else ""
        if error.startswith("(403)") and "Forbidden" in error:
            errors.append(error.splitlines()[0])
    return errors


@HOST_PLUGIN
@pytest.mark.parametrize(
    ("resource", "verb"),
    [
        ("", ""),
        ("nodes", "get"),
        ("resourceslices", "list"),
        ("resourceslices", "watch"),
        ("resourceslices", "create"),
        ("gpufaults", "list"),
        ("gpufaults", "watch"),
        ("nodes", "patch"),
        ("pods", "list"),
        ("pods", "watch"),
    ],
    ids=[
        "all-rules-publish",
        "nodes-get",
        "slices-list",
        "slices-watch",
        "slices-create",
        "faults-list",
        "faults-watch",
        "nodes-patch",
        "pods-list",
        "pods-watch",
    ],
)
def test_each_startup_rule_is_needed(
    installed: dict[str, Path],
    admin: client.ApiClient,
    cluster: LocalCluster,
    rendered: list[dict[str, Any]],
    tmp_path: Path,
    resource: str,
    verb: str,
) -> None:
    """The plugin, given the chart's rules minus one, runs into a 403 on the startup path (and
    with all of them publishes). Not proven here: resourceslices update/delete (used when the
    inventory changes, dra_fake/core/publisher.py) and resourceclaims get (every prepare). A separate
    ServiceAccount, which the admission policy does not cover, and a separate driver name keep
    this apart from the running plugins."""
    [role] = [o for o in rendered if o["kind"] == "ClusterRole" and o["metadata"]["name"] == SA]
    rbac = client.RbacAuthorizationV1Api(admin)
    core = client.CoreV1Api(admin)
    name = f"probe-{resource or 'all'}-{verb or 'all'}"
    driver = f"{(resource or 'all')[:6]}-{verb or 'all'}.example.com"
    short = Path(tempfile.mkdtemp(prefix="rbac", dir="/tmp"))  # unix socket paths are short
    with contextlib.suppress(ApiException):
        core.create_namespaced_service_account(NS, {"metadata": {"name": PROBE_SA}})
    rbac.create_cluster_role({"metadata": {"name": name}, "rules": without(role["rules"], resource, verb)})
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "subjects": [{"kind": "ServiceAccount", "name": PROBE_SA, "namespace": NS}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        }
    )
    token = core.create_namespaced_service_account_token(PROBE_SA, NS, {"spec": {"expirationSeconds": 600}})
    kc = token_kubeconfig(cluster, str(token.status.token), tmp_path / "probe.kubeconfig")
    args = [
        sys.executable,
        "-m",
        "dra_fake",
        "gpu-kubelet-plugin",
        "--node-name=node-1",
        f"--driver-name={driver}",
        f"--kubeconfig={kc}",
        f"--kubelet-registrar-directory-path={short / 'registry'}",
        f"--kubelet-plugins-directory-path={short / 'plugins'}",
        f"--cdi-root={short / 'cdi'}",
        "--log-level=debug",
        "--log-format=json",
        # GFD's labels (nodes patch), other than those the node has (a MIG strategy), so it patches;
        # the pod watch of the metrics runs anyway
        "--node-labels=true",
        "--mig-strategy=mixed",
    ]
    # so the probe's labels differ from the node's (an earlier probe may have written them)
    core.patch_node("node-1", {"metadata": {"labels": {"nvidia.com/mig.strategy": None}}})
    proc = spawn(name, args, tmp_path / "logs", cwd=REPO)
    log = Path(proc.log)
    try:
        if not resource:
            poll(f"{driver} slices published", lambda: Kube(cluster.kubeconfig).slices(driver=driver), 60)
            assert not forbidden(log), forbidden(log)
        else:
            poll(f"an API call refused with 403 in {log}", lambda: forbidden(log), 60)
            # Without a watch it publishes, but misses changes made by others; faults, node labels
            # and the pod watch of the metrics are beside publishing.
            if (
                verb != "watch"
                and resource not in ("gpufaults", "pods")
                and (resource, verb) != ("nodes", "patch")
            ):
                assert not Kube(cluster.kubeconfig).slices(driver=driver)
    finally:
        proc.stop()
        shutil.rmtree(short, ignore_errors=True)
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)
        for s in Kube(cluster.kubeconfig).slices(driver=driver):
            client.CustomObjectsApi(admin).delete_cluster_custom_object(
                "resource.k8s.io", "v1", "resourceslices", s["metadata"]["name"]
            )


@HOST_PLUGIN
@pytest.mark.parametrize(
    ("verb"), ["", "get", "watch"], ids=["all-rules-follow-the-label", "nodes-get", "nodes-watch"]
)
def test_device_plugin_config_label_rules(
    admin: client.ApiClient, cluster: LocalCluster, rendered: list[dict[str, Any]], tmp_path: Path, verb: str
) -> None:
    """The device plugin's per-node config (NVIDIA's config-manager: docs/classic-requests.md) with
    the chart's rules for a device-plugin pool with configs: the plugin role plus the label watch's
    `nodes watch`. With all of them it follows its Node's label (GET, then WATCH by field selector);
    without `nodes get` or `nodes watch` it runs into a 403; listing Nodes stays refused."""
    [base] = [o for o in rendered if o["kind"] == "ClusterRole" and o["metadata"]["name"] == SA]
    pool = helm_template(
        client.VersionApi(admin).get_code().git_version.lstrip("v"),
        served(admin),
        *VALUES,
        "--set", "mode=device-plugin", "--set", "devicePlugin.config.map.default=version: v1",
    )  # fmt: skip
    [label_role] = [
        o for o in pool if o["kind"] == "ClusterRole" and o["metadata"]["name"] == f"{SA}-node-config-label"
    ]
    rules = base["rules"] + label_role["rules"]
    rbac = client.RbacAuthorizationV1Api(admin)
    core = client.CoreV1Api(admin)
    name = f"probe-dp-label-{verb or 'all'}"
    short = Path(tempfile.mkdtemp(prefix="rbdp", dir="/tmp"))  # unix socket paths are short
    configs = tmp_path / "configs"
    configs.mkdir()
    (configs / "default").write_text("version: v1\n")
    (configs / "ts-2").write_text(
        "version: v1\nsharing: {timeSlicing: {resources: [{name: gpu, replicas: 2}]}}\n"
    )
    with contextlib.suppress(ApiException):
        core.create_namespaced_service_account(NS, {"metadata": {"name": PROBE_SA}})
    rbac.create_cluster_role(
        {"metadata": {"name": name}, "rules": without(rules, "nodes", verb) if verb else rules}
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": name},
            "subjects": [{"kind": "ServiceAccount", "name": PROBE_SA, "namespace": NS}],
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        }
    )
    token = core.create_namespaced_service_account_token(PROBE_SA, NS, {"spec": {"expirationSeconds": 600}})
    kc = token_kubeconfig(cluster, str(token.status.token), tmp_path / "probe.kubeconfig")
    args = [
        sys.executable, "-m", "dra_fake", "device-plugin", "--node-name=node-1", f"--kubeconfig={kc}",
        f"--kubelet-socket={short / 'kubelet.sock'}",
        f"--kubelet-registrar-directory-path={short / 'registry'}", f"--cdi-root={short / 'cdi'}",
        f"--data-dir={short / 'data'}", f"--config-file-srcdir={configs}",
        "--fallback-strategies=named", "--log-format=json",
    ]  # fmt: skip
    proc = spawn(name, args, tmp_path / "logs", cwd=REPO)
    log = Path(proc.log)
    try:
        if verb:
            poll(f"an API call refused with 403 in {log}", lambda: forbidden(log), 60)
        else:
            poll("the label watch started", lambda: "Waiting for change" in log.read_text(), 60)
            core.patch_node("node-1", {"metadata": {"labels": {"nvidia.com/device-plugin.config": "ts-2"}}})
            poll("the relabel followed", lambda: "Updating to config: ts-2" in log.read_text(), 60)
            assert not forbidden(log), forbidden(log)
            with pytest.raises(ApiException) as err:
                client.CoreV1Api(sa_api(kc)).list_node()
            assert err.value.status == 403
    finally:
        proc.stop()
        core.patch_node("node-1", {"metadata": {"labels": {"nvidia.com/device-plugin.config": None}}})
        shutil.rmtree(short, ignore_errors=True)
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)


def test_uninstall_hook_removes_the_gfd_labels_with_its_own_rights(
    installed: dict[str, Path], admin: client.ApiClient, cluster: LocalCluster, rendered: list[dict[str, Any]]
) -> None:
    """The chart's pre-delete hook (its ServiceAccount, ClusterRole and the Job's command) removes
    exactly the labels the plugins recorded; a label someone else set on the node stays. Last in
    this module: the labels are gone afterwards."""
    hook = [o for o in rendered if is_hook(o)]
    [job] = [o for o in hook if o["kind"] == "Job"]
    pod = job["spec"]["template"]["spec"]
    for obj in hook:
        if obj["kind"] != "Job":
            obj = json.loads(json.dumps(obj))
            del obj["metadata"]["annotations"]
            apply_all(admin, [obj])
    core = client.CoreV1Api(admin)
    core.patch_node("node-1", {"metadata": {"labels": {"nvidia.com/gpu.deploy.test": "true"}}})
    for node in NODES:
        poll(
            f"GFD labels on {node}",
            lambda n=node: "nvidia.com/gpu.count" in (core.read_node(n).metadata.labels or {}),
            60,
        )
    kc = token_kubeconfig(
        cluster, request_token(admin, None, pod["serviceAccountName"]), cluster.root / "sa-hook.kubeconfig"
    )
    [program, *args] = pod["containers"][0]["command"]
    assert program == "dra-fake"
    out = subprocess.run(
        [sys.executable, "-m", "dra_fake", *args, f"--kubeconfig={kc}"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert out.returncode == 0 and out.stdout == "labels removed from 2 node(s)\n", out.stdout + out.stderr
    for node in NODES:
        meta = core.read_node(node).metadata
        left = {k for k in meta.labels or {} if k.startswith("nvidia.com/")}
        assert left == ({"nvidia.com/gpu.deploy.test"} if node == "node-1" else set()), left
        assert "dra-fake.dev/gfd-labels" not in (meta.annotations or {})
