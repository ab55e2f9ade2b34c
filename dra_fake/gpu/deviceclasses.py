"""DeviceClasses as NVIDIA's chart ships them for gpu.nvidia.com
(docs/reference/nvidia-gpu-driver.md#36-deviceclasses).

With the default driver name the classes are exactly NVIDIA's: `gpu.nvidia.com` (full GPUs) and
`mig.nvidia.com` (MIG devices). With another driver name D, the GPU class is named D and the MIG
class `mig.<D without a leading "gpu.">`; the CEL selectors test D, and the extended resource
becomes `<D without a leading "gpu.">/gpu`. E.g. gpu.fake.example.com -> classes
gpu.fake.example.com and mig.fake.example.com, extended resource fake.example.com/gpu.
"""

from __future__ import annotations

from typing import Any

from dra_fake.core.slices import API_VERSIONS, RESOURCE_GROUP, ApiVersion

DEFAULT_DRIVER = "gpu.nvidia.com"
# DeviceClass.spec.extendedResourceName exists from 1.34 on, and only in resource.k8s.io/v1
# (KEP-5004); NVIDIA's chart sets it only when rendering for v1.
EXTENDED_RESOURCE_SINCE = (1, 34)


def driver_domain(driver_name: str) -> str:
    """gpu.nvidia.com -> nvidia.com; names not starting with "gpu." are kept whole."""
    return driver_name.removeprefix("gpu.")


def gpu_class_name(driver_name: str) -> str:
    return driver_name


def mig_class_name(driver_name: str) -> str:
    return f"mig.{driver_domain(driver_name)}"


def type_selector(driver_name: str, device_type: str) -> str:
    return f"device.driver == '{driver_name}' && device.attributes['{driver_name}'].type == '{device_type}'"


def device_classes(
    driver_name: str, api_version: ApiVersion, server_version: tuple[int, int]
) -> list[dict[str, Any]]:
    """The GPU and MIG DeviceClass objects for `api_version` on a server of `server_version`."""
    if api_version not in API_VERSIONS:
        raise ValueError(f"unsupported api version {api_version!r}; one of {API_VERSIONS}")
    gpu_spec: dict[str, Any] = {"selectors": [{"cel": {"expression": type_selector(driver_name, "gpu")}}]}
    if api_version == "v1" and server_version >= EXTENDED_RESOURCE_SINCE:
        gpu_spec["extendedResourceName"] = f"{driver_domain(driver_name)}/gpu"
    mig_spec = {"selectors": [{"cel": {"expression": type_selector(driver_name, "mig")}}]}
    return [
        _device_class(api_version, gpu_class_name(driver_name), gpu_spec),
        _device_class(api_version, mig_class_name(driver_name), mig_spec),
    ]


def spot_class_name(driver_name: str) -> str:
    """Ours: the class of idle-GPU lending's lend views (dra_fake.gpu.lending), named after NVIDIA's
    `vfio.gpu.nvidia.com` pattern."""
    return f"spot.{driver_name}"


def spot_class(driver_name: str, api_version: ApiVersion = "v1") -> dict[str, Any]:
    """The DeviceClass spot claims use: lend views only (no extended resource)."""
    spec = {"selectors": [{"cel": {"expression": type_selector(driver_name, "spot")}}]}
    return _device_class(api_version, spot_class_name(driver_name), spec)


def _device_class(api_version: ApiVersion, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": f"{RESOURCE_GROUP}/{api_version}",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }
