"""The devices and claim UIDs of the CDI spec tests (tests/test_cdi.py, tests/test_devnodes.py)."""

from __future__ import annotations

from typing import Any

from dra_fake.core import cdi
from dra_fake.gpu import edits
from dra_fake.gpu.devices import AllocatableDevice, MigPlacement, gpu_uuid

DRIVER = "gpu.nvidia.com"
UID_DIGIT = "0f3c2b1a-9d8e-4c7b-a6f5-e4d3c2b1a098"
UID_LETTER = "af3c2b1a-9d8e-4c7b-a6f5-e4d3c2b1a098"

GPU = AllocatableDevice(
    name="gpu-0",
    kind="gpu",
    minor=0,
    index=0,
    gpu_uuid=gpu_uuid("n", 0),
    uuid=gpu_uuid("n", 0),
    pci_bus_id="0000:10:00.0",
    product_name="NVIDIA A100-SXM4-40GB",
    profile_name="a100-sxm4-40gb",
    memory_bytes=40 * 1024**3,
)
MIG = AllocatableDevice(
    name="gpu-1-mig-1g5gb-19-3",
    kind="mig",
    minor=1,
    index=1,
    gpu_uuid=gpu_uuid("n", 1),
    uuid="MIG-1234",
    pci_bus_id="0000:11:00.0",
    product_name="NVIDIA A100-SXM4-40GB",
    profile_name="a100-sxm4-40gb",
    memory_bytes=5 * 1024**3,
    mig=MigPlacement("1g.5gb", 19, 3, 1),
)


def spec_device(uid: str, device: AllocatableDevice, **kw: Any) -> edits.SpecDevice:
    return edits.SpecDevice(cdi.cdi_device_name(uid, device.name), device, device.uuid or "", **kw)
