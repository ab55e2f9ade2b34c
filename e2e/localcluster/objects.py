"""Small API helpers the launcher needs (generic dicts through the kubernetes client)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from dra_fake.core.resourceapi import as_dict


def api_client(kubeconfig: Path) -> client.ApiClient:
    return cast(client.ApiClient, config.new_client_from_config(config_file=str(kubeconfig)))  # type: ignore[no-untyped-call]


def node_slices(kubeconfig: Path, node: str, driver: str) -> list[dict[str, Any]]:
    with api_client(kubeconfig) as api:
        objs = client.CustomObjectsApi(api).list_cluster_custom_object(
            "resource.k8s.io",
            "v1",
            "resourceslices",
            field_selector=f"spec.nodeName={node},spec.driver={driver}",
        )
    return list(as_dict(objs)["items"])


def install_device_classes(kubeconfig: Path, driver: str = "gpu.nvidia.com") -> None:
    from dra_fake.gpu.deviceclasses import device_classes

    with api_client(kubeconfig) as api:
        custom = client.CustomObjectsApi(api)
        for obj in device_classes(driver, "v1", (1, 37)):
            try:
                custom.create_cluster_custom_object("resource.k8s.io", "v1", "deviceclasses", obj)
            except ApiException as err:
                if err.status != 409:
                    raise
