"""The node the lending tests (tests/test_lending*.py) lend on: two H100s and an A100 with a MIG
device, with lend views; its claim UIDs, a start time and the owner samples (idle, busy, nobody)."""

from __future__ import annotations

from dra_fake.gpu.inventory import Inventory, build_inventory, parse_config
from dra_fake.gpu.lending import Owners, with_lend_views
from dra_fake.gpu.profiles import load_profiles

DRIVER = "gpu.nvidia.com"
T0 = 1_800_000_000.0
UID_OWNER = "0a000000-0000-0000-0000-000000000001"
UID_SPOT = "0b000000-0000-0000-0000-000000000002"
IDLE, BUSY_OWNER, NOBODY = Owners(True, 3), Owners(True, 85), Owners(False, 0)


def inventory() -> Inventory:
    config = parse_config(
        {
            "gpus": [
                {"profile": "h100-sxm5-80gb", "count": 2},
                {
                    "profile": "a100-sxm4-40gb",
                    "mig": "static",
                    "migDevices": [{"profile": "3g.20gb", "start": 0}],
                },
            ]
        },
        "test",
    )
    return with_lend_views(build_inventory(config, "node-a", load_profiles()))
