"""The Nodes fleet mode creates: their labels, and each created without the taints admission adds."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_fake.core.kube import read_node, send_json
from dra_fake.fleet.core import NodeTemplate, node_manifest, untaint_patch
from dra_fake.fleet.options import FleetOptions
from dra_fake.gpu.api import GpuProfile, InventoryConfig, build_inventory, gfd_labels, new_node_labels


def node_template(
    options: FleetOptions, inventory: InventoryConfig, profiles: dict[str, GpuProfile]
) -> NodeTemplate:
    """What every created Node carries: GPU Feature Discovery's labels of the inventory (unless
    turned off) and the --node-label ones, which win."""
    labels, annotations = dict(options.node_labels), dict[str, str]()
    if options.gfd_labels:
        inv = build_inventory(inventory, f"{options.prefix}labels", profiles)
        gfd, annotations = new_node_labels(gfd_labels(inv, options.mig_strategy), time.time())
        labels = gfd | labels
    return NodeTemplate(fleet=options.fleet, labels=labels, annotations=annotations)


def create_untainted_node(
    api: client.ApiClient,
    name: str,
    template: NodeTemplate,
    on_created: Callable[[str, str], None] = lambda name, uid: None,
) -> dict[str, Any]:
    """Create the Node (or read it, if it exists), call `on_created(name, uid)` (fleet mode queues
    its slices then), and remove the taints admission adds. Returns the Node as created."""
    try:
        node = send_json(api, "POST", "/api/v1/nodes", node_manifest(name, template))
    except ApiException as err:
        if err.status != 409:
            raise
        node = read_node(api, name)
    on_created(name, node["metadata"]["uid"])
    current = node
    for _ in range(5):
        patch = untaint_patch(current)
        if patch is None:
            return node
        try:
            send_json(api, "PATCH", "/api/v1/nodes/{name}", patch, "application/json-patch+json", name=name)
            return node
        except ApiException as err:
            # 422: the patch's `test` failed, the taints changed meanwhile (a node lifecycle
            # controller manages them too): look again
            if err.status != 422:
                raise
        current = read_node(api, name)
    raise RuntimeError(f"node {name}: taints kept changing while removing the admission taints")
