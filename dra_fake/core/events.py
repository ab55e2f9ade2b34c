"""Kubernetes Events about the node, for what an operator must see without reading logs."""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from kubernetes import client

log = logging.getLogger(__name__)


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
    now = datetime.now(UTC)
    event = client.CoreV1Event(
        metadata=client.V1ObjectMeta(generate_name=f"{node_name}."),
        involved_object=client.V1ObjectReference(kind="Node", name=node_name, uid=node_uid, api_version="v1"),
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
        client.CoreV1Api(api).create_namespaced_event("default", event)
    except Exception as err:
        log.warning("could not record a Node event", extra={"reason": reason, "error": str(err)})
