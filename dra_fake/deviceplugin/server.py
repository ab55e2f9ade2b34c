"""The gRPC side of the device plugin: one DevicePlugin server per resource on
`<device-plugins dir>/nvidia-<name>.sock`, registered with the kubelet (kubelet.sock), served again
and re-registered when the kubelet restarts (its socket is re-created), as NVIDIA's plugin does
(docs/reference/nvidia-device-plugin.md#b8-lifecycle).

Health (#b6): a device whose GPU has an active GpuFault that NVIDIA counts (an Xid not ignored, a
double-bit ECC error, a lost GPU) is sent Unhealthy in ListAndWatch, which takes it out of the
node's allocatable; like NVIDIA's plugin it never turns healthy again while the plugin runs.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import grpc

from dra_fake.deviceplugin import hostguard
from dra_fake.deviceplugin.allocate import AllocationError, container_response
from dra_fake.deviceplugin.config import PluginConfig
from dra_fake.deviceplugin.preferred import PreferredAllocationError, preferred
from dra_fake.deviceplugin.resources import Resource
from dra_fake.gpu.api import NvidiaSmi
from dra_fake.kubelet import sockets
from dra_fake.kubelet.pb.deviceplugin.v1beta1 import api_pb2 as pb
from dra_fake.kubelet.pb.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc
from dra_fake.kubelet.socketserver import SocketServer

log = logging.getLogger(__name__)

API_VERSION = "v1beta1"
HEALTHY, UNHEALTHY = "Healthy", "Unhealthy"
REGISTER_TIMEOUT = 10.0  # the kubelet dials back within its own 10 s
STREAM_WAKE = 5.0  # how often an idle ListAndWatch checks whether it should end


class DeviceHealth:
    """Which GPUs (by UUID) are unhealthy; ListAndWatch streams wait on it. Sticky, as NVIDIA's."""

    def __init__(self) -> None:
        self._unhealthy: set[str] = set()
        self._cond = threading.Condition()
        self._version = 0
        self.closed = False

    def mark(self, uuids: set[str]) -> None:
        with self._cond:
            new = uuids - self._unhealthy
            if new:
                self._unhealthy |= new
                self._version += 1
                self._cond.notify_all()
                log.info("devices unhealthy", extra={"uuids": sorted(new)})

    def snapshot(self) -> tuple[int, set[str]]:
        with self._cond:
            return self._version, set(self._unhealthy)

    def wait_newer(self, version: int, timeout: float) -> bool:
        with self._cond:
            return self._cond.wait_for(lambda: self._version != version or self.closed, timeout)

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


class DevicePluginServicer(pb_grpc.DevicePluginServicer):
    def __init__(
        self, resource: Resource, config: PluginConfig, health: DeviceHealth, nvidia_smi: NvidiaSmi | None
    ) -> None:
        self.resource, self.config, self.health, self.nvidia_smi = resource, config, health, nvidia_smi

    def GetDevicePluginOptions(self, request: Any, context: grpc.ServicerContext) -> Any:
        return options()

    def devices(self, unhealthy: set[str]) -> Any:
        return pb.ListAndWatchResponse(
            devices=[
                pb.Device(ID=d.id, health=UNHEALTHY if d.uuid in unhealthy else HEALTHY)
                for d in self.resource.devices
            ]
        )

    def ListAndWatch(self, request: Any, context: grpc.ServicerContext) -> Iterator[Any]:
        version, unhealthy = self.health.snapshot()
        yield self.devices(unhealthy)
        while context.is_active() and not self.health.closed:
            if self.health.wait_newer(version, STREAM_WAKE) and not self.health.closed:
                version, unhealthy = self.health.snapshot()
                yield self.devices(unhealthy)

    def GetPreferredAllocation(self, request: Any, context: grpc.ServicerContext) -> Any:
        responses = []
        for r in request.container_requests:
            try:
                ids = preferred(
                    self.resource,
                    list(r.available_deviceIDs),
                    list(r.must_include_deviceIDs),
                    r.allocation_size,
                    self.config.shared_devices_allocation_policy,
                )
            except PreferredAllocationError as err:
                why = {"resource": self.resource.name, "error": str(err)}
                log.warning("no preferred allocation", extra=why)
                context.abort(grpc.StatusCode.UNKNOWN, str(err))
            responses.append(pb.ContainerPreferredAllocationResponse(deviceIDs=ids))
        return pb.PreferredAllocationResponse(container_responses=responses)

    def Allocate(self, request: Any, context: grpc.ServicerContext) -> Any:
        if refused := hostguard.refusal(self.config):
            log.warning("allocation refused", extra={"resource": self.resource.name, "error": refused})
            context.abort(grpc.StatusCode.FAILED_PRECONDITION, refused)
        out = []
        for r in request.container_requests:
            try:
                answer = container_response(self.resource, list(r.devices_ids), self.config, self.nvidia_smi)
            except AllocationError as err:
                log.warning("allocation refused", extra={"resource": self.resource.name, "error": str(err)})
                context.abort(grpc.StatusCode.UNKNOWN, str(err))
            out.append(
                pb.ContainerAllocateResponse(
                    envs=answer.envs,
                    mounts=[
                        pb.Mount(
                            container_path=m.container_path, host_path=m.host_path, read_only=m.read_only
                        )
                        for m in answer.mounts
                    ],
                    annotations=answer.annotations,
                    cdi_devices=[pb.CDIDevice(name=n) for n in answer.cdi_devices],
                )
            )
        log.info(
            "allocated",
            extra={
                "resource": self.resource.name,
                "devices": [list(r.devices_ids) for r in request.container_requests],
            },
        )
        return pb.AllocateResponse(container_responses=out)

    def PreStartContainer(self, request: Any, context: grpc.ServicerContext) -> Any:
        return pb.PreStartContainerResponse()


def options() -> Any:
    return pb.DevicePluginOptions(pre_start_required=False, get_preferred_allocation_available=True)


def register(kubelet_socket: str, resource: Resource) -> None:
    """Register one resource with the kubelet (which dials the plugin's socket back)."""
    with grpc.insecure_channel(sockets.grpc_unix_target(kubelet_socket)) as channel:
        stub = pb_grpc.RegistrationStub(channel)  # type: ignore[no-untyped-call]
        stub.Register(
            pb.RegisterRequest(
                version=API_VERSION,
                endpoint=resource.socket_name,
                resource_name=resource.name,
                options=options(),
            ),
            timeout=REGISTER_TIMEOUT,
        )
    log.info(
        "registered with the kubelet", extra={"resource": resource.name, "devices": len(resource.devices)}
    )


class DevicePlugins:
    """Every resource's server, (re)started and (re)registered with the kubelet."""

    def __init__(
        self,
        resources: Sequence[Resource],
        config: PluginConfig,
        kubelet_socket: str,
        health: DeviceHealth,
        nvidia_smi: NvidiaSmi | None,
    ) -> None:
        self.resources, self.config, self.kubelet_socket = list(resources), config, kubelet_socket
        self.health, self.nvidia_smi = health, nvidia_smi
        self.directory = os.path.dirname(kubelet_socket)
        self._servers: list[SocketServer] = []
        self._kubelet: tuple[int, int, int] | None = None

    def start(self) -> None:
        """Serve every resource and register it; raises when the kubelet refuses."""
        self.stop()
        for resource in self.resources:
            servicer = DevicePluginServicer(resource, self.config, self.health, self.nvidia_smi)
            server = SocketServer(
                f"device-plugin {resource.name}",
                os.path.join(self.directory, resource.socket_name),
                [(pb_grpc.add_DevicePluginServicer_to_server, servicer)],
                max_workers=4,
            )
            server.start()
            self._servers.append(server)
        self._kubelet = self._kubelet_identity()
        for resource in self.resources:
            register(self.kubelet_socket, resource)

    def _kubelet_identity(self) -> tuple[int, int, int]:
        # with the change time: a re-created socket may get the inode number of the old one
        st = os.lstat(self.kubelet_socket)
        return st.st_dev, st.st_ino, st.st_ctime_ns

    def kubelet_restarted(self) -> bool:
        """The kubelet's socket is not the one registered with (re-created, or gone)."""
        try:
            return self._kubelet_identity() != self._kubelet
        except OSError:
            return True

    def stop(self, grace: float | None = None) -> None:
        servers, self._servers = self._servers, []
        for server in servers:
            server.stop(grace)


def unhealthy_uuids(health: Mapping[str, tuple[str, str]], devices: Mapping[str, Any]) -> set[str]:
    """GPU and MIG UUIDs of the devices dra_fake.gpu.faults calls Unhealthy (device name -> (health,
    why)). A MIG device's fault also marks its GPU: NVIDIA maps health events by the parent GPU, so a
    GPU handed out whole (MIG strategy none) turns unhealthy."""
    out = set()
    for name, (state, _) in health.items():
        device = devices.get(name)
        if state == UNHEALTHY and device is not None:
            out |= {device.uuid or device.gpu_uuid, device.gpu_uuid}
    return out
