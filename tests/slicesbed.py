"""What the slice tests (tests/test_slices*.py) share: the driver, the golden files' directory, the
example inventories, the static MIG layout every MIG profile is rendered with, and a node's inventory
from a config."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from dra_fake.gpu.inventory import Inventory, load_inventory

DRIVER = "gpu.nvidia.com"
GOLDEN_DIR = Path(__file__).resolve().parent / "golden" / "slices"
EXAMPLES_DIR = Path(__file__).resolve().parent.parent / "examples" / "inventory"
UPDATE = os.environ.get("UPDATE_GOLDEN") == "1"
# Static MIG layout used for every MIG profile (by GI profile id, start): 2g, 1g, 1g+me, 1g with
# two memory slices, 1g -- all shapes whose values the reference has for every MIG GPU.
STATIC_LAYOUT = [(14, 0), (19, 2), (20, 3), (15, 4), (19, 6)]


def inventory(tmp_path: Path, config: dict[str, Any]) -> Inventory:
    path = tmp_path / "inv.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return load_inventory(path, "node-1")
