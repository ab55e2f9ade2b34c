"""What the compute-domain plugin publishes: `channel-0` and `daemon-0` per node
(docs/reference/nvidia-compute-domains.md#61-published-devices-and-deviceclasses), and the two
DeviceClasses NVIDIA's chart ships for them."""

from __future__ import annotations

from typing import Any

from computedomain.api import CHANNEL_CLASS, DAEMON_CLASS, DRIVER_NAME
from dra_fake.core.slices import API_VERSIONS, RESOURCE_GROUP, ApiVersion, DesiredSlice


def device(name: str, device_type: str, device_id: int) -> dict[str, Any]:
    return {"name": name, "attributes": {"type": {"string": device_type}, "id": {"int": device_id}}}


def desired_slices() -> list[DesiredSlice]:
    """Only channel-0 and daemon-0 are published: one channel claim and one daemon claim per node."""
    return [DesiredSlice(devices=[device("channel-0", "channel", 0), device("daemon-0", "daemon", 0)])]


def _selector(device_type: str, extra: str = "") -> str:
    attrs = f"device.attributes['{DRIVER_NAME}']"
    return f"device.driver == '{DRIVER_NAME}' && {attrs}.type == '{device_type}'{extra}"


def device_classes(api_version: ApiVersion = "v1") -> list[dict[str, Any]]:
    if api_version not in API_VERSIONS:
        raise ValueError(f"unsupported api version {api_version!r}; one of {API_VERSIONS}")
    specs = {
        DAEMON_CLASS: _selector("daemon"),
        CHANNEL_CLASS: _selector("channel", f" && device.attributes['{DRIVER_NAME}'].id == 0"),
    }
    return [
        {
            "apiVersion": f"{RESOURCE_GROUP}/{api_version}",
            "kind": "DeviceClass",
            "metadata": {"name": name},
            "spec": {"selectors": [{"cel": {"expression": expression}}]},
        }
        for name, expression in specs.items()
    ]
