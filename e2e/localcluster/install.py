"""Install what a cluster admin (NVIDIA's chart) installs for ComputeDomains: the CRDs in crds/,
the two DeviceClasses, the driver namespace and the daemon service account. Idempotent."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomain.api import DAEMON_SERVICE_ACCOUNT, DEFAULT_DRIVER_NAMESPACE
from computedomain.plugin import slices as classes

CRD_DIR = Path(__file__).resolve().parents[2] / "crds"


def _create(fn: Any, *args: Any) -> None:
    try:
        fn(*args)
    except ApiException as err:
        if err.status != 409:
            raise


def crd_manifests(crd_dir: Path = CRD_DIR) -> list[dict[str, Any]]:
    return [yaml.safe_load(p.read_text()) for p in sorted(crd_dir.glob("*.yaml"))]


def install(api: client.ApiClient, namespace: str = DEFAULT_DRIVER_NAMESPACE, timeout: float = 30.0) -> None:
    ext = client.ApiextensionsV1Api(api)
    names = []
    for crd in crd_manifests():
        _create(ext.create_custom_resource_definition, crd)
        names.append(crd["metadata"]["name"])
    deadline = time.monotonic() + timeout
    for name in names:  # established = served; creating objects before that fails
        while True:
            status = ext.read_custom_resource_definition(name).status
            conditions = (status.conditions if status else None) or []
            if any(c.type == "Established" and c.status == "True" for c in conditions):
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"CRD {name} not Established after {timeout:g}s")
            time.sleep(0.2)
    custom = client.CustomObjectsApi(api)
    for obj in classes.device_classes("v1"):
        _create(custom.create_cluster_custom_object, "resource.k8s.io", "v1", "deviceclasses", obj)
    core = client.CoreV1Api(api)
    _create(core.create_namespace, {"metadata": {"name": namespace}})
    _create(
        core.create_namespaced_service_account,
        namespace,
        {"metadata": {"name": DAEMON_SERVICE_ACCOUNT, "namespace": namespace}},
    )
