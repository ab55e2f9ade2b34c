"""What NVIDIA's device plugin answers to Allocate, for simulated GPUs, and the CDI spec its CDI
strategies name (GetPreferredAllocation: dra_fake.deviceplugin.preferred). Pure. Facts (sections B.4, B.5):
docs/reference/nvidia-device-plugin.md#b4-device-ids-allocate-responses.

Per `DEVICE_LIST_STRATEGY` (several may be set): `envvar` puts the devices in
NVIDIA_VISIBLE_DEVICES, `volume-mounts` mounts `/dev/null` at
`/var/run/nvidia-container-devices/<id>`, `cdi-annotations` names the CDI devices in an annotation,
`cdi-cri` in the response's CDI devices. IDs per `DEVICE_ID_STRATEGY` (UUIDs or NVML indices).

On a real node the NVIDIA container runtime reads NVIDIA_VISIBLE_DEVICES (or the mounts) and adds
the driver and nvidia-smi; here, for the `envvar` and `volume-mounts` strategies, the response
itself carries the simulated nvidia-smi's mounts (dra_fake.gpu.nvidia_smi), so `nvidia-smi` inside
the pod works as with DRA. The CDI strategies get them from the CDI spec (with the device nodes,
which only CDI can create: there are none on the host to pass as DeviceSpecs).
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_fake.core.cdi import EARLIEST_VERSION, minimum_version
from dra_fake.deviceplugin.config import PluginConfig
from dra_fake.deviceplugin.resources import PluginDevice, Resource, order_key
from dra_fake.gpu.api import DeviceNodes, NvidiaSmi, common_edits, gpu_edits

CDI_VENDOR = "k8s.device-plugin.nvidia.com"
CDI_CLASS = "gpu"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"
CDI_SPEC_FILE = f"{CDI_VENDOR}-{CDI_CLASS}.yaml"
CDI_ANNOTATION_KEY = "nvidia-device-plugin"
VISIBLE_DEVICES = "NVIDIA_VISIBLE_DEVICES"
VOLUME_MOUNTS_DIR = "/var/run/nvidia-container-devices"
MPS_PIPE_DIRECTORY = "CUDA_MPS_PIPE_DIRECTORY"


class AllocationError(ValueError):
    """A request NVIDIA's plugin refuses; the message is its."""


@dataclass(frozen=True)
class Mount:
    container_path: str
    host_path: str
    read_only: bool = True


@dataclass
class ContainerResponse:
    envs: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)
    annotations: dict[str, str] = field(default_factory=dict)
    cdi_devices: list[str] = field(default_factory=list)


def requested_devices(resource: Resource, ids: Sequence[str]) -> list[PluginDevice]:
    """The physical devices of a request (replicas of one device count once), validated as NVIDIA's
    resource manager does; in the request's order, as NVIDIA keeps it for UUIDs (the kubelet's own
    order is unspecified; for indices NVIDIA uses map order, ours is the request's too)."""
    known = resource.by_id()
    prefix = f'invalid allocation request for "{resource.name}": invalid request'
    for device_id in ids:
        if device_id not in known:
            raise AllocationError(f"{prefix}: unknown device: {device_id}")
    if resource.replicas > 1 and resource.fail_requests_greater_than_one and len(ids) > 1:
        raise AllocationError(f"{prefix}: maximum request size for shared resources is 1; found {len(ids)}")
    unique: dict[str, PluginDevice] = {}
    for device_id in ids:
        device = known[device_id]
        unique.setdefault(device.uuid, device)
    return list(unique.values())


def names_cdi(strategies: Sequence[str]) -> bool:
    return bool({"cdi-annotations", "cdi-cri"} & set(strategies))


def device_ref(device: PluginDevice, config: PluginConfig) -> str:
    return device.index if config.device_id_strategy == "index" else device.uuid


def container_response(
    resource: Resource,
    ids: Sequence[str],
    config: PluginConfig,
    nvidia_smi: NvidiaSmi | None,
    annotation_id: str | None = None,
) -> ContainerResponse:
    devices = requested_devices(resource, ids)
    refs = [device_ref(d, config) for d in devices]
    out = ContainerResponse()
    strategies = config.device_list_strategy
    if "envvar" in strategies:
        out.envs[VISIBLE_DEVICES] = ",".join(refs)
    if "volume-mounts" in strategies:
        out.envs[VISIBLE_DEVICES] = VOLUME_MOUNTS_DIR
        out.mounts += [Mount(f"{VOLUME_MOUNTS_DIR}/{ref}", "/dev/null") for ref in refs]
    names = [f"{CDI_KIND}={ref}" for ref in refs]
    if "cdi-annotations" in strategies:
        key = f"{config.cdi_annotation_prefix}{CDI_ANNOTATION_KEY}_{annotation_id or uuidlib.uuid4()}"
        out.annotations[key] = ",".join(names)
    if "cdi-cri" in strategies:
        out.cdi_devices = names
    if resource.sharing == "mps":
        out.envs[MPS_PIPE_DIRECTORY] = f"{config.mps_root.rstrip('/')}/{resource.name.split('/', 1)[1]}/pipe"
    if nvidia_smi is not None and not names_cdi(strategies):
        # what the NVIDIA container runtime would add: nvidia-smi, for exactly these devices (with
        # a CDI strategy the CDI spec brings them)
        edits = nvidia_smi.spec_mounts()
        for d in devices:
            edits += [nvidia_smi.device_mount(d.device, d.uuid), *nvidia_smi.live_mounts(d.device, d.uuid)]
        # MIG devices of one GPU name its live directory each: one mount per container path
        unique = {e["containerPath"]: e["hostPath"] for e in edits}
        out.mounts += [Mount(path, host) for path, host in unique.items()]
    return out


def cdi_spec(resources: Sequence[Resource], config: PluginConfig, nvidia_smi: NvidiaSmi | None,
             device_nodes: DeviceNodes | None) -> dict[str, Any]:  # fmt: skip
    """The spec the CDI strategies name: one device per GPU / MIG device (named by the ID
    strategy, in numeric order), with the simulated nvidia-smi and NVIDIA's device nodes where they
    reach nothing."""
    physical: dict[str, PluginDevice] = {}
    for resource in resources:
        for device in resource.devices:
            physical.setdefault(device.uuid, device)

    def edits(device: PluginDevice) -> dict[str, Any]:
        env = {"env": [f"DRA_FAKE_VISIBLE_DEVICES={device.uuid}"]}
        return env | gpu_edits(device.device, device.uuid, nvidia_smi, device_nodes)

    common = {"env": ["NVIDIA_VISIBLE_DEVICES=void"]} | common_edits(nvidia_smi, device_nodes)
    spec: dict[str, Any] = {
        "cdiVersion": EARLIEST_VERSION,
        "kind": CDI_KIND,
        "devices": [
            {"name": device_ref(d, config), "containerEdits": edits(d)}
            for d in sorted(physical.values(), key=order_key)
        ],
        "containerEdits": common,
    }
    spec["cdiVersion"] = minimum_version(spec)
    return spec
