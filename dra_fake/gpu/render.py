"""Text output for the CLI: the ResourceSlices a node would publish, and the profile table."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import yaml

from dra_fake.core.slices import API_VERSIONS, slice_manifest, slice_spec
from dra_fake.gpu.deviceclasses import DEFAULT_DRIVER
from dra_fake.gpu.inventory import SharesSetting, load_inventory
from dra_fake.gpu.profiles import GpuProfile
from dra_fake.gpu.shares import parse_mode
from dra_fake.gpu.slices import desired_slices


def render_slices(
    config_path: Path | None,
    node_name: str,
    api_version: str,
    server_version: tuple[int, int],
    *,
    driver_name: str = DEFAULT_DRIVER,
    profile_dirs: Sequence[Path] = (),
    consumable_shares: str = "disabled",
) -> str:
    """A YAML stream of the node's ResourceSlices, named `<node>-<driver>-<index>`, pool = node,
    generation 1. ownerReferences are left out: the Node's UID exists only in a cluster."""
    if api_version not in API_VERSIONS:
        raise ValueError(f"unsupported api version {api_version!r}; one of {API_VERSIONS}")
    shares = SharesSetting(parse_mode(consumable_shares))  # no gate offline: what a plugin with it publishes
    inventory = load_inventory(config_path, node_name, profile_dirs, shares)
    desired = desired_slices(inventory, driver_name, server_version)
    documents = []
    for index, item in enumerate(desired):
        spec = slice_spec(
            item,
            api_version=api_version,
            driver=driver_name,
            pool_name=node_name,
            node_name=node_name,
            generation=1,
            slice_count=len(desired),
        )
        name = f"{node_name}-{driver_name}-{index}"
        manifest = slice_manifest(
            spec, api_version=api_version, name=name, owner_node_name=node_name, owner_node_uid=None
        )
        documents.append(manifest)
    header = (
        f"# ResourceSlices of node {node_name}: driver {driver_name}, resource.k8s.io/{api_version},"
        f" Kubernetes {server_version[0]}.{server_version[1]}, {len(inventory.devices)} devices\n"
    )
    return header + yaml.safe_dump_all(
        documents, sort_keys=False, explicit_start=True, default_flow_style=None, width=120
    )


def profiles_table(profiles: Mapping[str, GpuProfile]) -> str:
    """One line per profile: id, product name, architecture, memory, SMs, MIG, max MIG instances."""
    headers = ("ID", "PRODUCT NAME", "ARCHITECTURE", "MEMORY", "SMS", "MIG", "MAX MIG")
    rows = [headers] + [
        (
            p.id,
            p.product_name,
            p.architecture,
            f"{p.memory_mib} MiB",
            str(p.multiprocessors),
            "yes" if p.mig_capable else "no",
            str(p.max_mig_instances) if p.mig_capable else "-",
        )
        for p in profiles.values()
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(headers))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    return "\n".join(lines) + "\n"
