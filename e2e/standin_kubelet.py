"""A stand-in for the kubelet's device manager, for the device plugin where no kubelet of ours has
one (the unit tests; the local harness, whose dra-kubelet runs the plugin and DRA managers only):
serves Registration on kubelet.sock, dials each registering plugin back, reads its options and its
first ListAndWatch answer, as the kubelet does, and records them."""

from __future__ import annotations

import threading
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from dra_fake.kubelet.pb.deviceplugin.v1beta1 import api_pb2 as pb
from dra_fake.kubelet.pb.deviceplugin.v1beta1 import api_pb2_grpc as pb_grpc


class StandInKubelet(pb_grpc.RegistrationServicer):
    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.registered: list[Any] = []  # (version, endpoint, resource name, options) per Register
        self.first_list: dict[str, list[tuple[str, str]]] = {}  # resource -> its latest (ID, health)
        self._lock = threading.Lock()
        self.server = grpc.server(futures.ThreadPoolExecutor(4))
        pb_grpc.add_RegistrationServicer_to_server(self, self.server)
        self.server.add_insecure_port(f"unix://{directory / 'kubelet.sock'}")
        self.server.start()

    def Register(self, request: Any, context: Any) -> Any:
        with grpc.insecure_channel(f"unix://{self.directory / request.endpoint}") as channel:
            stub = pb_grpc.DevicePluginStub(channel)
            options = stub.GetDevicePluginOptions(pb.Empty(), timeout=10)
            first = next(stub.ListAndWatch(pb.Empty(), timeout=10))
        with self._lock:
            self.first_list[request.resource_name] = [(d.ID, d.health) for d in first.devices]
            self.registered.append((request.version, request.endpoint, request.resource_name, options))
        return pb.Empty()

    def registrations(self) -> list[tuple[str, int]]:
        """(resource name, device count) per Register call, in order."""
        with self._lock:
            return [(name, len(self.first_list[name])) for _, _, name, _ in self.registered]

    def stop(self) -> None:
        self.server.stop(None).wait(5)
