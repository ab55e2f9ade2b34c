"""GPU Feature Discovery's labels (dra_fake.gpu.gfd) on Node objects, and their removal.

The keys written are recorded in the Node annotation RECORD_ANNOTATION (as node-feature-discovery
records the labels it manages), so a later write removes keys the inventory no longer produces and
`dra-fake node-labels remove` (the chart's pre-delete hook) removes exactly what was written,
never a label someone else set.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_fake.core import logs
from dra_fake.core.kube import get_json, load_kube_client, merge_patch, read_node
from dra_fake.core.kubeconfig import StartupError
from dra_fake.gpu.gfd import PREFIX

log = logging.getLogger(__name__)
NODE_PATH = "/api/v1/nodes/{name}"

RECORD_ANNOTATION = "dra-fake.dev/gfd-labels"  # comma-separated keys, without the nvidia.com/ prefix
TIMESTAMP_LABEL = PREFIX + "gfd.timestamp"
DMI_PRODUCT = Path("/sys/class/dmi/id/product_name")  # GFD's --machine-type-file


def machine_type(path: Path = DMI_PRODUCT) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip() or "unknown"
    except OSError:
        return "unknown"


def recorded(node: Mapping[str, Any]) -> set[str]:
    raw = ((node.get("metadata") or {}).get("annotations") or {}).get(RECORD_ANNOTATION, "")
    return {PREFIX + k for k in raw.split(",") if k}


def label_patch(node: Mapping[str, Any], wanted: Mapping[str, str], now: float) -> dict[str, Any] | None:
    """The merge patch that makes the node carry `wanted` (plus a fresh timestamp when anything
    changes) and no longer carry keys it recorded earlier; None when nothing changes."""
    current = (node.get("metadata") or {}).get("labels") or {}
    stale = recorded(node) - set(wanted) - {TIMESTAMP_LABEL}
    changed = {k: v for k, v in wanted.items() if current.get(k) != v}
    if not changed and not (stale & set(current)) and TIMESTAMP_LABEL in current:
        return None
    labels: dict[str, str | None] = {k: None for k in stale}
    labels |= changed | {TIMESTAMP_LABEL: str(int(now))}
    return {"metadata": {"labels": labels, "annotations": {RECORD_ANNOTATION: _record(wanted)}}}


def new_node_labels(wanted: Mapping[str, str], now: float) -> tuple[dict[str, str], dict[str, str]]:
    """Labels and annotations of a Node created with the labels (fleet mode)."""
    return {**wanted, TIMESTAMP_LABEL: str(int(now))}, {RECORD_ANNOTATION: _record(wanted)}


def _record(wanted: Mapping[str, str]) -> str:
    return ",".join(sorted(k.removeprefix(PREFIX) for k in set(wanted) | {TIMESTAMP_LABEL}))


def removal_patch(node: Mapping[str, Any]) -> dict[str, Any] | None:
    keys = recorded(node)
    if not keys and RECORD_ANNOTATION not in ((node.get("metadata") or {}).get("annotations") or {}):
        return None
    return {"metadata": {"labels": {k: None for k in keys}, "annotations": {RECORD_ANNOTATION: None}}}


def apply_labels(api: client.ApiClient, node: str, wanted: Mapping[str, str]) -> bool:
    """Label `node`; returns whether it was patched."""
    current = read_node(api, node)
    patch = label_patch(current, wanted, time.time())
    if patch is None:
        return False
    merge_patch(api, NODE_PATH, patch, name=node)
    log.info("GPU Feature Discovery labels written", extra={"node": node, "labels": len(wanted)})
    return True


def remove_labels(api: client.ApiClient, node_names: list[str] | None = None) -> int:
    """Remove what apply_labels wrote from the named nodes (None: every node); returns how many
    nodes changed."""
    nodes = get_json(api, "/api/v1/nodes").get("items") or []
    changed = 0
    for node in nodes:
        name = node["metadata"]["name"]
        if node_names is not None and name not in node_names:
            continue
        patch = removal_patch(node)
        if patch is None:
            continue
        try:
            merge_patch(api, NODE_PATH, patch, name=name)
        except ApiException as err:
            if err.status != 404:
                raise
            continue
        changed += 1
        log.info("GPU Feature Discovery labels removed", extra={"node": name})
    return changed


def run_node_labels(args: argparse.Namespace) -> int:
    """`dra-fake node-labels remove [--node N ...]`."""
    logs.setup(args.log_level, "text")
    try:
        api = load_kube_client(args.kubeconfig)
        changed = remove_labels(api, args.node or None)
    except (StartupError, ApiException, OSError) as err:
        print(f"dra-fake node-labels: error: {err}", file=sys.stderr)
        return 1
    print(f"labels removed from {changed} node(s)")
    return 0
