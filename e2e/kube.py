"""Test-side helpers: a thin wrapper over the kubernetes client with polling waits."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from dra_fake.core.resourceapi import ServerInfo, claim_spec_as, discover

T = TypeVar("T")
RESOURCE_GROUP = "resource.k8s.io"
CDI_ANNOTATION = "dra-fake.dev/cdi-devices"
# What test pods run: on kind a real container (it must keep running, and needs only a POSIX
# shell for the injected nvidia-smi): Debian's busybox, built offline by make kind-images; on the
# local harness nothing is executed.
WORKLOAD_IMAGE = "dra-fake-shell:e2e"
# The shell is PID 1: it must handle SIGTERM itself, or every pod deletion waits out the grace period.
WORKLOAD_COMMAND = ["sh", "-c", "nvidia-smi -L; trap 'exit 0' TERM; sleep 2147483647 & wait"]
CLUSTER_SCOPED = {"DeviceClass", "ResourceSlice", "DeviceTaintRule"}


def workload_container(name: str = "ctr", claims: list[str] | None = None) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": name,
        "image": WORKLOAD_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "command": WORKLOAD_COMMAND,
    }
    if claims:
        container["resources"] = {"claims": [{"name": c} for c in claims]}
    return container


def in_version(obj: dict[str, Any], version: str) -> dict[str, Any]:
    """A resource.k8s.io object written as v1, in the shape of `version` (v1beta2, v1beta1)."""
    group, _, written = obj["apiVersion"].partition("/")
    if group != RESOURCE_GROUP or written == version:
        return obj
    if written != "v1":
        raise ValueError(f"test manifests are written in resource.k8s.io/v1, not {written}")
    out = {**obj, "apiVersion": f"{RESOURCE_GROUP}/{version}"}
    kind = obj["kind"]
    if kind == "ResourceClaim":
        out["spec"] = claim_spec_as(version, obj["spec"])  # type: ignore[arg-type]
    elif kind == "ResourceClaimTemplate":
        out["spec"] = {**obj["spec"], "spec": claim_spec_as(version, obj["spec"]["spec"])}  # type: ignore[arg-type]
    elif kind == "DeviceClass":  # extendedResourceName exists in v1 only
        out["spec"] = {k: v for k, v in obj["spec"].items() if k != "extendedResourceName"}
    return out


def v1_device(device: dict[str, Any]) -> dict[str, Any]:
    """A ResourceSlice device as v1 has it (v1beta1 nests everything but the name in `basic`)."""
    if "basic" in device:
        return {"name": device["name"], **device["basic"]}
    return device


def poll(what: str, fn: Callable[[], T | None], timeout: float = 60.0, every: float = 0.25) -> T:
    """Call fn until it returns a truthy value; fail naming what was awaited and the last value."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while True:
        try:
            last = fn()
        except ApiException as err:
            last = f"API error {err.status}: {err.reason}"
        else:
            if last:
                return last
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}; last: {last!r}")
        time.sleep(every)


class Kube:
    def __init__(self, kubeconfig: Path) -> None:
        self.api = config.new_client_from_config(config_file=str(kubeconfig))
        self.core = client.CoreV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self._info: ServerInfo | None = None

    @property
    def info(self) -> ServerInfo:
        if self._info is None:
            self._info = discover(self.api)
        return self._info

    @property
    def resource_version(self) -> str:
        """The resource.k8s.io version the server prefers: v1 (1.34+), v1beta2 (1.33), v1beta1 (1.32)."""
        return self.info.resource_version

    @property
    def resource(self) -> tuple[str, str]:
        return (RESOURCE_GROUP, self.resource_version)

    # ---- namespaces and generic objects ------------------------------------------------
    def namespace(self, prefix: str = "e2e") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.core.create_namespace({"metadata": {"name": name}})
        poll(f"service account default in {name}", lambda: self._has_default_sa(name), 30)
        return name

    def _has_default_sa(self, ns: str) -> bool:
        try:
            self.core.read_namespaced_service_account("default", ns)
            return True
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    def delete_namespace(self, name: str, wait: bool = False) -> None:
        try:
            self.core.delete_namespace(name)
        except ApiException as err:
            if err.status != 404:
                raise
        if wait:
            poll(f"namespace {name} deleted", lambda: not self._namespace_exists(name), 120)

    def _namespace_exists(self, name: str) -> bool:
        try:
            self.core.read_namespace(name)
            return True
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    def create(self, obj: dict[str, Any], namespace: str | None = None) -> dict[str, Any]:
        """Create a core/v1 Pod or any namespaced or cluster-scoped object of an API group."""
        obj = in_version(obj, self.resource_version)
        kind = obj["kind"]
        ns = namespace or obj["metadata"].get("namespace")
        if kind == "Pod":
            return self.api.sanitize_for_serialization(self.core.create_namespaced_pod(ns, obj))  # type: ignore[no-any-return]
        group, version = obj["apiVersion"].split("/")
        plural = kind.lower() + ("es" if kind.endswith("s") else "s")  # DeviceClass -> deviceclasses
        if kind in CLUSTER_SCOPED:
            return self.custom.create_cluster_custom_object(group, version, plural, obj)  # type: ignore[no-any-return]
        return self.custom.create_namespaced_custom_object(group, version, ns, plural, obj)  # type: ignore[no-any-return]

    def apply_yaml(self, text: str, namespace: str) -> list[dict[str, Any]]:
        return [self.create(doc, namespace) for doc in yaml.safe_load_all(text) if doc]

    # ---- reads -------------------------------------------------------------------------
    def pod(self, ns: str, name: str) -> dict[str, Any]:
        return self.api.sanitize_for_serialization(self.core.read_namespaced_pod(name, ns))  # type: ignore[no-any-return]

    def unschedulable(self, ns: str, name: str) -> str | None:
        """The scheduler's message while the pod is Unschedulable, else None."""
        for cond in self.pod(ns, name).get("status", {}).get("conditions") or []:
            if (
                cond["type"] == "PodScheduled"
                and cond["status"] == "False"
                and cond.get("reason") == "Unschedulable"
            ):
                return str(cond.get("message"))
        return None

    def pod_exists(self, ns: str, name: str) -> bool:
        try:
            self.core.read_namespaced_pod(name, ns)
            return True
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    def claim(self, ns: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(*self.resource, ns, "resourceclaims", name)  # type: ignore[no-any-return]

    def claims(self, ns: str) -> list[dict[str, Any]]:
        return list(self.custom.list_namespaced_custom_object(*self.resource, ns, "resourceclaims")["items"])

    def device_class(self, name: str) -> dict[str, Any] | None:
        try:
            return self.custom.get_cluster_custom_object(*self.resource, "deviceclasses", name)  # type: ignore[no-any-return]
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    def slices(self, driver: str = "gpu.nvidia.com", node: str | None = None) -> list[dict[str, Any]]:
        """ResourceSlices of a driver (and node), their devices in the v1 shape whatever was served."""
        selector = f"spec.driver={driver}" + (f",spec.nodeName={node}" if node else "")
        items = self.custom.list_cluster_custom_object(
            *self.resource, "resourceslices", field_selector=selector
        )
        slices = list(items["items"])
        for s in slices:
            s["spec"]["devices"] = [v1_device(d) for d in s["spec"].get("devices") or []]
        return slices

    def delete_slice(self, name: str) -> None:
        self.custom.delete_cluster_custom_object(*self.resource, "resourceslices", name)

    def events(self, ns: str, name: str) -> list[dict[str, Any]]:
        evs = self.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={name}").items
        return [self.api.sanitize_for_serialization(e) for e in evs]

    # ---- pod lifecycle -----------------------------------------------------------------
    def wait_running(self, ns: str, name: str, timeout: float = 90) -> dict[str, Any]:
        def running() -> dict[str, Any] | None:
            pod = self.pod(ns, name)
            return pod if pod.get("status", {}).get("phase") == "Running" else None

        try:
            return poll(f"pod {ns}/{name} Running", running, timeout)
        except AssertionError as err:
            events = [f"{e.get('reason')}: {e.get('message')}" for e in self.events(ns, name)]
            raise AssertionError(f"{err}\nevents: {events}") from None

    def delete_pod(self, ns: str, name: str, wait: bool = True) -> None:
        self.core.delete_namespaced_pod(name, ns)
        if wait:
            poll(f"pod {ns}/{name} gone", lambda: not self.pod_exists(ns, name), 60)

    def cdi_devices(self, pod: dict[str, Any]) -> dict[str, list[str]]:
        """Per container, the CDI device IDs the harness recorded (the kubelet's GetResources)."""
        raw = pod["metadata"].get("annotations", {}).get(CDI_ANNOTATION)
        return json.loads(raw) if raw else {}

    def allocated_devices(self, claim: dict[str, Any]) -> list[tuple[str, str, str]]:
        results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
        return [(r["request"], r["pool"], r["device"]) for r in results]


def gpu_claim_template(name: str, count: int = 1) -> dict[str, Any]:
    """A ResourceClaimTemplate asking for `count` GPUs of class gpu.nvidia.com, in request `gpu`."""
    exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com"}
    if count != 1:
        exactly["count"] = count
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def pod_with_claim_template(name: str, template: str, requests: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [workload_container(claims=["gpu"])],
        },
    }
