"""A gRPC server on one unix socket, set up before it appears (``SocketServer``)."""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Sequence
from concurrent import futures
from typing import Any

import grpc

from dra_fake.kubelet import sockets

log = logging.getLogger(__name__)

AddServicer = Callable[[Any, Any], None]  # a generated add_<Service>Servicer_to_server


class SocketServer:
    """A gRPC server on one unix socket.

    The socket is bound under a hidden temporary name in the same directory (the kubelet's plugin
    watcher ignores names starting with "."), chmod-ed, served, and only then renamed to ``path``:
    it appears fully set up, never with umask permissions. grpc-core unlinks the path it bound when
    the server stops, which after the rename is the (gone) temporary name, so a successor's socket
    at ``path`` is never removed by accident; ``stop`` removes ``path`` only if it is still our inode.
    A stale socket at ``path`` is removed before the new one is renamed into place.
    """

    def __init__(
        self,
        name: str,
        path: str,
        register: Sequence[tuple[AddServicer, object]],
        max_workers: int,
        socket_mode: int = sockets.SOCKET_MODE,
    ) -> None:
        self.name, self.path = name, path
        self._register, self._max_workers, self._socket_mode = list(register), max_workers, socket_mode
        self._lock = threading.Lock()
        self._server: Any = None
        self._executor: futures.ThreadPoolExecutor | None = None
        self._identity: sockets.SocketIdentity | None = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        with self._lock:
            if self._server is not None:
                return
            sockets.ensure_dir(os.path.dirname(self.path))
            bind_path = sockets.temporary_socket_path(self.path)
            executor = futures.ThreadPoolExecutor(self._max_workers, thread_name_prefix=f"grpc-{self.name}")
            server = grpc.server(executor)
            for add, servicer in self._register:
                add(servicer, server)
            try:
                server.add_insecure_port(sockets.grpc_unix_target(bind_path))  # binds and listens
                os.chmod(bind_path, self._socket_mode)
                server.start()
                sockets.remove_stale_socket(self.path)
                os.rename(bind_path, self.path)
                self._identity = sockets.SocketIdentity.of(self.path)
            except Exception:
                server.stop(None)
                executor.shutdown(wait=False)
                sockets.remove_own_socket(bind_path, None)
                raise
            self._server, self._executor = server, executor
            log.info(
                "serving", extra={"server": self.name, "socket": self.path, "mode": oct(self._socket_mode)}
            )

    def stop(self, grace: float | None = None) -> None:
        """Stop accepting calls; in-flight calls get up to ``grace`` seconds, then are cancelled."""
        with self._lock:
            server, executor = self._server, self._executor
            self._server = self._executor = None
        if server is None:
            return
        log.info("stopping", extra={"server": self.name, "socket": self.path, "grace": grace})
        server.stop(grace).wait((grace or 0.0) + 5.0)
        if executor is not None:
            executor.shutdown(wait=False, cancel_futures=True)
        sockets.remove_own_socket(self.path, self._identity)
        log.info("stopped", extra={"server": self.name, "socket": self.path})
