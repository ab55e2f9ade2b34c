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

T = TypeVar("T")
RESOURCE = ("resource.k8s.io", "v1")
CDI_ANNOTATION = "dra-fake.dev/cdi-devices"
# What test pods run: on kind a real container (it must keep running, and needs only a POSIX
# shell for the injected nvidia-smi); on the local harness nothing is executed.
WORKLOAD_IMAGE = "busybox:1.36"
WORKLOAD_COMMAND = ["sh", "-c", "nvidia-smi -L; exec sleep 2147483647"]
CLUSTER_SCOPED = {"DeviceClass", "ResourceSlice", "DeviceTaintRule"}


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

    def pod_exists(self, ns: str, name: str) -> bool:
        try:
            self.core.read_namespaced_pod(name, ns)
            return True
        except ApiException as err:
            if err.status == 404:
                return False
            raise

    def claim(self, ns: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(*RESOURCE, ns, "resourceclaims", name)  # type: ignore[no-any-return]

    def claims(self, ns: str) -> list[dict[str, Any]]:
        return list(self.custom.list_namespaced_custom_object(*RESOURCE, ns, "resourceclaims")["items"])

    def slices(
        self, driver: str = "gpu.nvidia.com", node: str | None = None, version: str = "v1"
    ) -> list[dict[str, Any]]:
        selector = f"spec.driver={driver}" + (f",spec.nodeName={node}" if node else "")
        return list(
            self.custom.list_cluster_custom_object(
                "resource.k8s.io", version, "resourceslices", field_selector=selector
            )["items"]
        )

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


def pod_with_claim_template(name: str, template: str, requests: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
            "containers": [
                {
                    "name": "ctr",
                    "image": WORKLOAD_IMAGE,
                    "command": WORKLOAD_COMMAND,
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
