"""The node the device plugin tests (tests/test_deviceplugin*.py) serve: its name, NVIDIA's documented
time-slicing config, and its inventory (by default an A100 with static MIG devices)."""

from __future__ import annotations

from typing import Any

from dra_fake.gpu.inventory import Inventory, build_inventory, parse_config
from dra_fake.gpu.profiles import load_profiles

NODE = "node-a"
TIME_SLICING = """
version: v1
flags:
  migStrategy: none
  failOnInitError: true
  nvidiaDriverRoot: /
  plugin: {passDeviceSpecs: false, deviceListStrategy: envvar, deviceIDStrategy: uuid}
sharing:
  timeSlicing:
    resources:
    - name: nvidia.com/gpu
      replicas: 4
"""  # NVIDIA's documented example, with the flags section its chart writes
A100_STATIC = {
    "gpus": [
        {"profile": "h100-sxm5-80gb"},
        {
            "profile": "a100-sxm4-40gb",
            "mig": "static",
            "migDevices": [
                {"profile": "1g.5gb", "start": 0},
                {"profile": "1g.5gb", "start": 1},
                {"profile": "3g.20gb", "start": 4},
            ],
        },
    ]
}


def inventory(config: dict[str, Any] | None = None) -> Inventory:
    return build_inventory(
        parse_config(config or {"gpus": [{"profile": "h100-sxm5-80gb", "count": 8}]}, "t"),
        NODE,
        load_profiles(),
    )
