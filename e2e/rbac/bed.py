"""What the RBAC tests share: the dedicated control plane's release names, rendering the chart for
this server (helm template), applying it, and API clients with a ServiceAccount's token."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client, config, dynamic
from kubernetes.client.exceptions import ApiException

from e2e.kube import poll

REPO = Path(__file__).resolve().parents[2]
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

# Every test file here runs on a bed where this suite installed the chart: the package's own control
# plane (the harness) or a kind cluster of ours (chart.py).
CHART_BED = pytest.mark.needs(
    "node",
    reason="the chart as this suite installs it: the package's own control plane (harness) or "
    "make kind-up's Helm release (kind)",
)


def helm_template(kube_version: str, api_versions: list[str], *extra: str) -> list[dict[str, Any]]:
    args = [str(HELM), "template", RELEASE, str(CHART), "-n", NS, "--kube-version", kube_version]
    for v in api_versions:
        args += ["--api-versions", v]
    out = subprocess.run([*args, *extra], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def served(api: client.ApiClient) -> list[str]:
    """group/version/Kind of everything the server serves, for helm --api-versions."""
    out = []
    for group in client.ApisApi(api).get_api_versions().groups:
        for v in group.versions:
            for r in client.CustomObjectsApi(api).get_api_resources(group.name, v.version).resources:
                if "/" not in r.name:
                    out.append(f"{v.group_version}/{r.kind}")
    return out


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


def delete_all(api: client.ApiClient, objs: list[dict[str, Any]]) -> None:
    """Delete what apply_all created (those still there)."""
    dyn = dynamic.DynamicClient(api)
    for obj in objs:
        res = dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace", NS) if res.namespaced else None
        try:
            res.delete(name=obj["metadata"]["name"], namespace=namespace)
        except ApiException as err:
            if err.status != 404:
                raise


def token_kubeconfig(kubeconfig: Path, token: str, path: Path) -> Path:
    """The admin's kubeconfig with this token as its only user."""
    cfg = yaml.safe_load(kubeconfig.read_text())
    cfg["users"] = [{"name": "sa", "user": {"token": token}}]
    for ctx in cfg["contexts"]:
        ctx["context"]["user"] = "sa"
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


def sa_api(kubeconfig: Path) -> client.ApiClient:
    return config.new_client_from_config(config_file=str(kubeconfig))


_RESOURCE_VERSIONS: dict[str, str] = {}


def resource_version(api: client.ApiClient) -> str:
    """The newest resource.k8s.io version the server serves, which the probes write their objects
    in: v1 from 1.34, v1beta2 on our 1.33 clusters, v1beta1 on 1.32 (docs/kind.md)."""
    host = api.configuration.host
    if host not in _RESOURCE_VERSIONS:
        groups = client.ApisApi(api).get_api_versions().groups
        served = {v.version for g in groups if g.name == "resource.k8s.io" for v in g.versions}
        _RESOURCE_VERSIONS[host] = next(v for v in ("v1", "v1beta2", "v1beta1") if v in served)
    return _RESOURCE_VERSIONS[host]


def slice_body(node: str, name: str, version: str) -> dict[str, Any]:
    """A slice of another driver: the running plugins leave it alone (they own their driver's)."""
    return {
        "apiVersion": f"resource.k8s.io/{version}",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": "vap-test.example.com",
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [],
        },
    }


def refused_by_policy(call: Any, message: str) -> None:
    with pytest.raises(ApiException) as err:
        call()
    assert err.value.status in (403, 422) and message in str(err.value.body), err.value


def forbidden(log: str) -> list[str]:
    """Errors of the plugin's JSON log that are the API server's 403 (an ApiException's text
    starts with its status): not just any "403" in a UID or a timestamp."""
    errors = []
    for line in log.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        error = str(record.get("error", "")) if isinstance(record, dict) else ""
        if error.startswith("(403)") and "Forbidden" in error:
            errors.append(error.splitlines()[0])
    return errors
