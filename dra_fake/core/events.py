"""Kubernetes Events about a node or a pod, for what an operator must see without reading logs."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from kubernetes import client

log = logging.getLogger(__name__)

TIMEOUT = 10.0  # seconds for the create


def post_node_event(
    api: client.ApiClient,
    node_name: str,
    node_uid: str,
    *,
    reason: str,
    message: str,
    component: str,
    warning: bool = True,
) -> None:
    """Record a core/v1 Event on the Node (in the default namespace, as the kubelet does). Never raises:
    an event is a courtesy, not a reason to fail."""
    involved = client.V1ObjectReference(kind="Node", name=node_name, uid=node_uid, api_version="v1")
    _post(api, "default", involved, node_name, reason, message, component, warning)


def post_pod_event(
    api: client.ApiClient,
    namespace: str,
    pod_name: str,
    pod_uid: str,
    node_name: str,
    *,
    reason: str,
    message: str,
    component: str,
) -> None:
    """Record a Warning Event on a Pod (in its namespace). Never raises."""
    involved = client.V1ObjectReference(
        kind="Pod", namespace=namespace, name=pod_name, uid=pod_uid, api_version="v1"
    )
    _post(api, namespace, involved, node_name, reason, message, component, True)


def _post(
    api: client.ApiClient,
    namespace: str,
    involved: client.V1ObjectReference,
    node_name: str,
    reason: str,
    message: str,
    component: str,
    warning: bool,
) -> None:
    now = datetime.now(UTC)
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{involved.name}."),
        involved_object=involved,
        reason=reason,
        message=message[:1024],
        type="Warning" if warning else "Normal",
        source=client.V1EventSource(component=component, host=node_name),
        reporting_component=component,
        reporting_instance=node_name,
        first_timestamp=now,
        last_timestamp=now,
        count=1,
    )
    try:
        client.CoreV1Api(api).create_namespaced_event(namespace, event, _request_timeout=TIMEOUT)
    except Exception as err:
        log.warning(
            "could not record an Event",
            extra={"kind": involved.kind, "name": involved.name, "reason": reason, "error": str(err)},
        )
