"""The local harness as a test bed (e2e/testbed.py): no containers, so a container is what the
kubelet's CDI library injected (the harness's pod record); node files and processes are the local
cluster's directories and processes (e2e/localcluster).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from dra_fake.core.checkpoint import read_claims
from dra_fake.fleet.workload import WorkloadProfile
from dra_fake.gpu.nvidia_smi import library_dirs
from e2e.kube import Kube, poll
from e2e.localcluster import LocalCluster
from e2e.localcluster.cluster import CD_NAMESPACE
from e2e.localcluster.values import Values
from e2e.testbed import (
    GPU_DRIVER,
    NODE_CDI_ROOT,
    NODE_PLUGINS_DIR,
    Container,
    Exec,
    TestBed,
    cpus_allowed,
)


class HarnessContainer(Container):
    """What the CDI-enabled runtime would have done: the harness's record of the container."""

    def __init__(self, record: dict[str, Any]) -> None:
        self.record = record

    def env(self) -> dict[str, str]:
        return dict(e.split("=", 1) for e in self.record.get("env") or [])

    def _mounts(self) -> dict[str, str]:
        return {m["destination"]: m["source"] for m in self.record.get("mounts") or []}

    def run(self, *argv: str) -> Exec:
        mounts = self._mounts()
        if argv[0] == "ls":
            directory = argv[-1].rstrip("/")
            names = {p[len(directory) + 1 :].split("/")[0] for p in mounts if p.startswith(directory + "/")}
            names |= {
                d[len(directory) + 1 :].split("/")[0]
                for d in self.record.get("deviceNodes") or []
                if d.startswith(directory + "/")
            }
            if directory in mounts and Path(mounts[directory]).is_dir():
                names |= {p.name for p in Path(mounts[directory]).iterdir()}
            if not names:
                return Exec(1, f"ls: {directory}: No such file or directory\n")
            return Exec(0, "".join(f"{n}\n" for n in sorted(names)))
        if argv[0] != "nvidia-smi":
            raise NotImplementedError(f"the harness runs no containers: cannot run {argv}")
        binary = mounts.get("/usr/bin/nvidia-smi")
        if not binary:
            return Exec(127, "sh: nvidia-smi: not found\n")
        return self.run_host(binary, *argv[1:])

    @contextlib.contextmanager
    def host_view(self) -> Iterator[tuple[Path, dict[str, str]]]:
        """The container's mounts under a temporary root (each a link to its host path, so the
        live files change as through a bind mount), and the environment a host program needs to
        read them as the container would: the container's own, DRA_FAKE_ROOT (the NVML library
        prefixes it to the device directory), and the mounted NVML library first on the library
        path. None of the library without a claim: the program's dlopen fails as in the container."""
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            for dest, source in self._mounts().items():
                link = root / dest.lstrip("/")
                link.parent.mkdir(parents=True, exist_ok=True)
                link.symlink_to(source)
            libraries = [str(root / d.lstrip("/")) for d in library_dirs() if (root / d.lstrip("/")).is_dir()]
            env = {
                **self.env(),
                "DRA_FAKE_ROOT": str(root),
                "PATH": os.environ.get("PATH", ""),
                "HOME": tmp,
                "LD_LIBRARY_PATH": ":".join(libraries),
            }
            yield root, env

    def run_host(self, *argv: str, timeout: float = 60) -> Exec:
        """A host program run against the container's view (host_view)."""
        with self.host_view() as (_, env):
            proc = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout)
        return Exec(proc.returncode, proc.stdout + proc.stderr)


class HarnessBed(TestBed):
    name = "harness"
    capabilities = frozenset({"harness", "node"})
    driver_namespace = CD_NAMESPACE

    def __init__(self, kube: Kube, cluster: LocalCluster) -> None:
        super().__init__(kube)
        self.cluster = cluster

    def _order(self, node: str) -> tuple[int, str]:
        return (int(node.rsplit("-", 1)[1]), node)

    def container(self, ns: str, pod: str, container: str = "ctr") -> Container:
        obj = self.kube.pod(ns, pod)
        node, uid = obj["spec"]["nodeName"], obj["metadata"]["uid"]
        path = self.cluster.node_dir(node) / "pods" / f"{ns}_{pod}_{uid}.json"
        record = poll(
            f"harness record of {ns}/{pod}", lambda: path.exists() and json.loads(path.read_text()), 30
        )
        return HarnessContainer(record["containers"].get(container) or {})

    def cdi_devices(self, ns: str, pod: str) -> dict[str, list[str]]:
        return self.kube.cdi_devices(self.kube.pod(ns, pod))  # the harness's record of them

    def _host_path(self, node: str, path: str) -> Path:
        for prefix, local in ((NODE_CDI_ROOT, "cdi"), (NODE_PLUGINS_DIR, "plugins")):
            if path == prefix or path.startswith(prefix + "/"):
                return self.cluster.node_dir(node) / local / path[len(prefix) :].lstrip("/")
        raise ValueError(f"the harness keeps no {path}")

    def read_node_file(self, node: str, path: str) -> str | None:
        local = self._host_path(node, path)
        return local.read_text() if local.exists() else None

    def write_node_file(self, node: str, path: str, content: str) -> None:
        self._host_path(node, path).write_text(content)

    def node_files(self, node: str, directory: str) -> list[str]:
        local = self._host_path(node, directory)
        return sorted(p.name for p in local.iterdir()) if local.is_dir() else []

    def gpu_metrics(self, node: str) -> str:
        port = self.cluster.state.ports[f"dcgm-{node}"]
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as resp:
            return resp.read().decode()  # type: ignore[no-any-return]

    def plugin_thread_cpus(self, node: str, driver: str = GPU_DRIVER) -> list[str]:
        name = f"gpu-plugin-{node}" if driver == GPU_DRIVER else f"cd-plugin-{node}"
        statuses = []
        for task in Path(f"/proc/{self.cluster.process(name).pid}/task").iterdir():
            with contextlib.suppress(FileNotFoundError):  # the thread ended meanwhile
                statuses.append((task / "status").read_text())
        return [cpus_allowed(status) for status in statuses]

    def crash_plugin(
        self, node: str, driver: str = GPU_DRIVER, meanwhile: Callable[[], None] | None = None
    ) -> None:
        if driver == GPU_DRIVER:
            self.cluster.stop_plugin(node, kill=True)
            if meanwhile:
                meanwhile()
            self.cluster.start_plugin(node)
        else:
            self.cluster.stop_cd_plugin(node, kill=True)
            if meanwhile:
                meanwhile()
            self.cluster.start_cd_plugin(node)

    @contextlib.contextmanager
    def plugin_values(self, node: str, values: Values) -> Iterator[None]:
        self._restart_plugin(node, values)
        try:
            yield
        finally:
            self._restart_plugin(node, {})

    def _restart_plugin(self, node: str, values: Values) -> None:
        self.cluster.stop_plugin(node)
        self.cluster.set_node_values(node, values)
        self.cluster.start_plugin(node)

    def plugin_checkpoint(self, node: str, driver: str = GPU_DRIVER) -> dict[str, Any]:
        return read_claims(self._host_path(node, f"{NODE_PLUGINS_DIR}/{driver}"))

    def crash_imex_daemon(self, node: str, cd_uid: str) -> None:
        import glob
        import signal

        from computedomain.api import daemon_object_name

        pattern = self.cluster.node_dir(node) / "exec" / f"{CD_NAMESPACE}_{daemon_object_name(cd_uid)}-*.pid"
        [pid_file] = glob.glob(str(pattern))
        os.kill(int(Path(pid_file).read_text()), signal.SIGKILL)

    def stop_controller(self) -> None:
        self.cluster.stop_cd_controller(kill=True)

    def start_controller(self) -> None:
        if "cd-controller" not in self.cluster.state.processes:
            self.cluster.start_cd_controller()

    def start_kwok(self, profile: WorkloadProfile) -> None:
        self.cluster.start_kwok(profile)

    def stop_kwok(self) -> None:
        self.cluster.stop_kwok()

    def restart_kubelet(self, node: str) -> None:
        self.cluster.stop_harness(node)
        self.cluster.start_harness(node)

    def restart_apiserver(self) -> None:
        self.cluster.restart_apiserver()
