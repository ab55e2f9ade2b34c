"""Where the e2e suite runs: the local harness, a kind cluster of ours, or any KUBECONFIG cluster.

Tests ask the test bed for what differs between them:
- `workers`: the GPU nodes in topology order (first: 8 x H100; second: MIG GPUs);
- `container(...)`: what a container got: its environment, `nvidia-smi`, a directory listing. On
  kind that is a real container (exec through the API server); on the harness, which runs no
  containers, it is what the kubelet's CDI library injected (the harness's pod record), with our
  nvidia-smi (the mounted binary) run against the mounted files;
- node files (CDI specs, checkpoints) and node processes (kill a plugin or an IMEX daemon);
- `driver_namespace`: where the driver's ComputeDomain daemons run.

Tests declare what they need with `@pytest.mark.needs(...)`; conftest deselects (does not skip)
the tests a bed or the server cannot run, so a skip in CI is always a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import subprocess
import tempfile
import urllib.request
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes.stream import stream

from dra_fake.core.checkpoint import read_claims
from dra_fake.fleet.workload import WorkloadProfile
from dra_fake.gpu.nvidia_smi import library_dirs
from e2e.kindcluster.cluster import RELEASE, helm_binary
from e2e.kube import Kube, poll
from e2e.localcluster import LocalCluster
from e2e.localcluster.cluster import CD_NAMESPACE
from e2e.localcluster.values import CHART, Values

GPU_DRIVER = "gpu.nvidia.com"
CD_DRIVER = "compute-domain.nvidia.com"
# Each driver's kubelet plugin in the chart's pod: its `dra-fake` command and its container.
KIND_PLUGINS = {
    GPU_DRIVER: ("gpu-kubelet-plugin", "gpus"),
    CD_DRIVER: ("compute-domain-kubelet-plugin", "compute-domains"),
}
# Paths on a real node (kind): the chart's defaults.
NODE_CDI_ROOT = "/var/run/cdi"
NODE_PLUGINS_DIR = "/var/lib/kubelet/plugins"
HELM_WAIT = ("--wait", "--timeout", "5m")


@dataclass(frozen=True)
class Exec:
    code: int
    output: str


class Container(ABC):
    @abstractmethod
    def env(self) -> dict[str, str]:
        """Environment variables the container runtime set (CDI edits included)."""

    @abstractmethod
    def run(self, *argv: str) -> Exec:
        """Run `nvidia-smi ...` or `ls ...` in the container (exit code, stdout + stderr)."""

    def nvidia_smi(self, *args: str) -> Exec:
        return self.run("nvidia-smi", *args)


class TestBed(ABC):
    name: str
    capabilities: frozenset[str]
    driver_namespace: str

    def __init__(self, kube: Kube) -> None:
        self.kube = kube

    @property
    def workers(self) -> list[str]:
        """GPU nodes, first the 8 x H100 one, then the MIG one (e2e topology, docs/kind.md)."""
        nodes = {s["spec"]["nodeName"] for s in self.kube.slices(driver=GPU_DRIVER)}
        return sorted(nodes, key=self._order)

    def _order(self, node: str) -> tuple[int, str]:
        return (0, node)

    @abstractmethod
    def container(self, ns: str, pod: str, container: str = "ctr") -> Container: ...

    @abstractmethod
    def cdi_devices(self, ns: str, pod: str) -> dict[str, list[str]]:
        """Per container with any, the CDI device IDs the kubelet gave the runtime (GetResources)."""

    @abstractmethod
    def read_node_file(self, node: str, path: str) -> str | None:
        """A file on the node, by its path there (NODE_CDI_ROOT, NODE_PLUGINS_DIR); None if absent."""

    @abstractmethod
    def write_node_file(self, node: str, path: str, content: str) -> None: ...

    @abstractmethod
    def node_files(self, node: str, directory: str) -> list[str]:
        """Names in a directory of the node."""

    @abstractmethod
    def crash_plugin(
        self, node: str, driver: str = GPU_DRIVER, meanwhile: Callable[[], None] | None = None
    ) -> None:
        """SIGKILL the driver's kubelet plugin on the node, run `meanwhile` (e.g. delete a pod while
        it is down: on kind the kubelet may have restarted it by then), wait until it serves again."""

    @abstractmethod
    def plugin_values(self, node: str, values: Values) -> contextlib.AbstractContextManager[None]:
        """For the block, the node's GPU plugin runs with these chart values on top of the bed's, then
        as before. The harness restarts that node's plugin; on kind the chart's values are the
        release's, so `helm upgrade --reuse-values` rolls every node's plugins, `helm rollback`
        after. Returns once the new plugins are Ready; their slices may still be on the way."""

    @abstractmethod
    def plugin_checkpoint(self, node: str, driver: str = GPU_DRIVER) -> dict[str, Any]:
        """Claim UID -> entry of the driver's checkpoint on the node, its journal applied."""

    @abstractmethod
    def gpu_metrics(self, node: str) -> str:
        """The node's dcgm-exporter-compatible /metrics, as a scrape of it gets them."""

    @abstractmethod
    def plugin_thread_cpus(self, node: str, driver: str = GPU_DRIVER) -> list[str]:
        """The CPUs each thread of the driver's kubelet plugin on the node may run on
        (`Cpus_allowed_list` of /proc/<pid>/task/<tid>/status, one entry per thread)."""

    @abstractmethod
    def crash_imex_daemon(self, node: str, cd_uid: str) -> None:
        """SIGKILL the IMEX daemon of a ComputeDomain on the node (it is restarted)."""

    @abstractmethod
    def stop_controller(self) -> None: ...

    @abstractmethod
    def start_controller(self) -> None: ...

    def start_kwok(self, profile: WorkloadProfile) -> None:
        """KWOK's controller playing the kubelet of the fleet's nodes (labelled dra-fake.dev/fleet)
        with `profile`'s Stages, replacing a running one: the harness's process, on kind a Deployment
        of the offline image (e2e/kindcluster/kwok.py). Returns once it manages the nodes."""
        raise NotImplementedError(f"no KWOK on the {self.name} test bed")

    def stop_kwok(self) -> None:
        raise NotImplementedError(f"no KWOK on the {self.name} test bed")


# ---- the local harness ---------------------------------------------------------------------------


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
        return [_cpus_allowed(status) for status in statuses]

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


# ---- kind ------------------------------------------------------------------------------------------


class KindContainer(Container):
    def __init__(self, kube: Kube, ns: str, pod: str, container: str) -> None:
        self.kube, self.ns, self.pod, self.container_name = kube, ns, pod, container

    def _exec(self, command: list[str]) -> Exec:
        # The shell's exit status is appended to the output: the websocket API reports it apart.
        script = " ".join(shlex.quote(c) for c in command) + ' 2>&1; echo "@exit=$?"'
        out = stream(
            self.kube.core.connect_get_namespaced_pod_exec,
            self.pod,
            self.ns,
            container=self.container_name,
            command=["sh", "-c", script],
            stderr=True,
            stdout=True,
            stdin=False,
            tty=False,
            _request_timeout=60,
        )
        text, _, code = str(out).rpartition("@exit=")
        return Exec(int(code.strip()), text)

    def env(self) -> dict[str, str]:
        result = self._exec(["env"])
        return dict(line.split("=", 1) for line in result.output.splitlines() if "=" in line)

    def run(self, *argv: str) -> Exec:
        return self._exec(list(argv))


class KindBed(TestBed):
    name = "kind"
    capabilities = frozenset({"kind", "node"})

    def __init__(self, kube: Kube, cluster: str, kubeconfig: Path, namespace: str = "dra-fake") -> None:
        super().__init__(kube)
        self.cluster = cluster
        self.driver_namespace = namespace
        self.kubeconfig = kubeconfig  # for helm (plugin_values)

    def _order(self, node: str) -> tuple[int, str]:
        suffix = node.rsplit("worker", 1)[-1]
        return (int(suffix or 1), node)

    def container(self, ns: str, pod: str, container: str = "ctr") -> Container:
        return KindContainer(self.kube, ns, pod, container)

    def _docker(self, node: str, *cmd: str, input: str | None = None) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["docker", "exec", "-i", node, *cmd], input=input, capture_output=True, text=True, timeout=60
        )

    def cdi_devices(self, ns: str, pod: str) -> dict[str, list[str]]:
        """What containerd holds in each running container's CRI config (crictl inspect)."""
        node = self.kube.pod(ns, pod)["spec"]["nodeName"]
        labels = ("--label", f"io.kubernetes.pod.namespace={ns}", "--label", f"io.kubernetes.pod.name={pod}")
        listing = self._docker(node, "crictl", "ps", "-o", "json", *labels)
        assert listing.returncode == 0, listing.stderr
        found = {}
        for container in json.loads(listing.stdout)["containers"]:
            inspect = self._docker(node, "crictl", "inspect", container["id"])
            assert inspect.returncode == 0, inspect.stderr
            devices = json.loads(inspect.stdout)["info"]["config"].get("CDI_devices") or []
            if devices:
                found[container["metadata"]["name"]] = [d["name"] for d in devices]
        return found

    def read_node_file(self, node: str, path: str) -> str | None:
        proc = self._docker(node, "cat", path)
        return proc.stdout if proc.returncode == 0 else None

    def write_node_file(self, node: str, path: str, content: str) -> None:
        proc = self._docker(node, "sh", "-c", f"cat > {shlex.quote(path)}", input=content)
        assert proc.returncode == 0, proc.stderr

    def node_files(self, node: str, directory: str) -> list[str]:
        proc = self._docker(node, "ls", "-1", directory)
        return sorted(proc.stdout.split()) if proc.returncode == 0 else []

    def _plugin_pod(self, node: str) -> dict[str, Any]:
        pods = self.kube.core.list_namespaced_pod(
            self.driver_namespace,
            label_selector="app.kubernetes.io/component=kubelet-plugin",
            field_selector=f"spec.nodeName={node}",
        ).items
        [pod] = pods
        return self.kube.api.sanitize_for_serialization(pod)  # type: ignore[no-any-return]

    def gpu_metrics(self, node: str) -> str:
        """Scraped from the node itself, where the plugin pod's IP is reachable (port 9400)."""
        ip = self._plugin_pod(node)["status"]["podIP"]
        proc = self._docker(node, "curl", "-sf", "--max-time", "10", f"http://{ip}:9400/metrics")
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    def _restarts(self, node: str, container: str) -> int:
        statuses = self._plugin_pod(node)["status"].get("containerStatuses") or []
        return next((s["restartCount"] for s in statuses if s["name"] == container), 0)

    def plugin_thread_cpus(self, node: str, driver: str = GPU_DRIVER) -> list[str]:
        command, _ = KIND_PLUGINS[driver]
        script = (  # a thread that ends meanwhile is left out
            f'pid=$(pgrep -of "dra-fake {command}") || exit 1; '
            'for t in /proc/$pid/task/*; do cat "$t/status" 2>/dev/null; done; exit 0'
        )
        proc = self._docker(node, "sh", "-c", script)
        assert proc.returncode == 0, f"no {command} process on {node}: {proc.stderr}"
        return [_cpus_allowed(status) for status in proc.stdout.split("Name:")[1:]]

    def crash_plugin(
        self, node: str, driver: str = GPU_DRIVER, meanwhile: Callable[[], None] | None = None
    ) -> None:
        command, container = KIND_PLUGINS[driver]
        before = self._restarts(node, container)
        proc = self._docker(node, "pkill", "-KILL", "-f", f"dra-fake {command}")
        assert proc.returncode == 0, f"no {command} process on {node}: {proc.stderr}"
        if meanwhile:
            meanwhile()

        def serving_again() -> bool:
            statuses = self._plugin_pod(node)["status"].get("containerStatuses") or []
            status = next(s for s in statuses if s["name"] == container)
            return bool(status["restartCount"] > before and status.get("ready"))

        poll(f"{container} on {node} restarted and ready", serving_again, 120)

    def _helm(self, *args: str) -> str:
        proc = subprocess.run(
            [str(helm_binary()), "--kubeconfig", str(self.kubeconfig), "-n", self.driver_namespace, *args],
            capture_output=True,
            text=True,
            timeout=400,
        )
        assert proc.returncode == 0, f"helm {' '.join(args[:2])}: {proc.stderr}"
        return proc.stdout

    @contextlib.contextmanager
    def plugin_values(self, node: str, values: Values) -> Iterator[None]:
        revision = json.loads(self._helm("status", RELEASE, "-o", "json"))["version"]
        with tempfile.NamedTemporaryFile("w", suffix=".yaml") as extra:
            yaml.safe_dump(values, extra)
            extra.flush()
            self._helm("upgrade", RELEASE, str(CHART), "--reuse-values", "--values", extra.name, *HELM_WAIT)
        try:
            yield
        finally:
            self._helm("rollback", RELEASE, str(revision), *HELM_WAIT)

    def plugin_checkpoint(self, node: str, driver: str = GPU_DRIVER) -> dict[str, Any]:
        """The plugin's directory copied out of the node (the journal is binary)."""
        with tempfile.TemporaryDirectory() as tmp:
            copy = subprocess.run(
                ["docker", "cp", f"{node}:{NODE_PLUGINS_DIR}/{driver}/.", tmp],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert copy.returncode == 0, copy.stderr
            return read_claims(Path(tmp))

    def crash_imex_daemon(self, node: str, cd_uid: str) -> None:
        proc = self._docker(node, "pkill", "-KILL", "-f", "dra-fake imex-daemon run")
        assert proc.returncode == 0, f"no IMEX daemon on {node}: {proc.stderr}"

    def _scale_controller(self, replicas: int) -> None:
        from kubernetes import client

        apps = client.AppsV1Api(self.kube.api)
        [deploy] = apps.list_namespaced_deployment(
            self.driver_namespace, label_selector="app.kubernetes.io/component=compute-domain-controller"
        ).items
        apps.patch_namespaced_deployment_scale(
            deploy.metadata.name, self.driver_namespace, {"spec": {"replicas": replicas}}
        )
        label = "app.kubernetes.io/component=compute-domain-controller"

        def settled() -> bool:
            pods = self.kube.core.list_namespaced_pod(self.driver_namespace, label_selector=label).items
            if replicas == 0:
                return not pods
            return any(
                any(c.type == "Ready" and c.status == "True" for c in (p.status.conditions or []))
                for p in pods
            )

        poll(f"controller scaled to {replicas}", settled, 120)

    def stop_controller(self) -> None:
        self._scale_controller(0)

    def start_controller(self) -> None:
        self._scale_controller(1)

    def start_kwok(self, profile: WorkloadProfile) -> None:
        from e2e.kindcluster import kwok

        kwok.load_image(self.cluster)
        kwok.install(self.kube.api, profile)

    def stop_kwok(self) -> None:
        from e2e.kindcluster import kwok

        kwok.uninstall(self.kube.api)


class ApiOnlyBed(TestBed):
    """Any other cluster: the API server only (tests needing nodes are deselected)."""

    name = "api"
    capabilities = frozenset()
    driver_namespace = os.environ.get("DRA_FAKE_NAMESPACE", "dra-fake")

    def container(self, ns: str, pod: str, container: str = "ctr") -> Container:
        return KindContainer(self.kube, ns, pod, container)

    def cdi_devices(self, ns: str, pod: str) -> dict[str, list[str]]:
        raise NotImplementedError

    def read_node_file(self, node: str, path: str) -> str | None:
        raise NotImplementedError

    def write_node_file(self, node: str, path: str, content: str) -> None:
        raise NotImplementedError

    def node_files(self, node: str, directory: str) -> list[str]:
        raise NotImplementedError

    def crash_plugin(
        self, node: str, driver: str = GPU_DRIVER, meanwhile: Callable[[], None] | None = None
    ) -> None:
        raise NotImplementedError

    def plugin_values(self, node: str, values: Values) -> contextlib.AbstractContextManager[None]:
        raise NotImplementedError

    def plugin_checkpoint(self, node: str, driver: str = GPU_DRIVER) -> dict[str, Any]:
        raise NotImplementedError

    def gpu_metrics(self, node: str) -> str:
        raise NotImplementedError

    def plugin_thread_cpus(self, node: str, driver: str = GPU_DRIVER) -> list[str]:
        raise NotImplementedError

    def crash_imex_daemon(self, node: str, cd_uid: str) -> None:
        raise NotImplementedError

    def stop_controller(self) -> None:
        raise NotImplementedError

    def start_controller(self) -> None:
        raise NotImplementedError


def kind_cluster_of(kubeconfig: Path) -> str | None:
    """The kind cluster a kubeconfig points at (context kind-<name>) if its nodes run here."""
    import yaml

    try:
        config = yaml.safe_load(kubeconfig.read_text())
    except OSError:
        return None
    context = str(config.get("current-context") or "")
    if not context.startswith("kind-"):
        return None
    name = context.removeprefix("kind-")
    proc = subprocess.run(
        ["docker", "ps", "-q", "--filter", f"label=io.x-k8s.kind.cluster={name}"],
        capture_output=True,
        text=True,
    )
    return name if proc.returncode == 0 and proc.stdout.strip() else None


# ---- what a container must see ------------------------------------------------------------------

UUID_RE = re.compile(r"\(UUID: ((?:GPU|MIG)-[^)]+)\)")


def pod_claims(pod: dict[str, Any], container: str | None = None) -> list[str]:
    """ResourceClaim names a pod (or one of its containers) uses: named, generated from a template, or
    created by the scheduler for its extended resources."""
    generated = {
        s["name"]: s.get("resourceClaimName") for s in pod["status"].get("resourceClaimStatuses") or []
    }
    wanted = None
    if container is not None:
        [ctr] = [c for c in pod["spec"]["containers"] if c["name"] == container]
        wanted = {c["name"] for c in (ctr.get("resources") or {}).get("claims") or []}
    names = []
    for ref in pod["spec"].get("resourceClaims") or []:
        if wanted is not None and ref["name"] not in wanted:
            continue
        name = ref.get("resourceClaimName") or generated.get(ref["name"])
        if name:
            names.append(name)
    extended = pod["status"].get("extendedResourceClaimStatus")  # `nvidia.com/gpu: N` served by DRA
    if extended and any(container in (None, m["containerName"]) for m in extended["requestMappings"]):
        names.append(extended["resourceClaimName"])
    return names


def expected_gpus(kube: Kube, ns: str, claims: list[str]) -> tuple[set[str], set[str], int]:
    """(GPU UUIDs, known MIG UUIDs, MIG device count) that nvidia-smi -L must show for the claims."""
    results = [
        r
        for name in claims
        for r in kube.claim(ns, name)["status"]["allocation"]["devices"]["results"]
        if r["driver"] == GPU_DRIVER
    ]

    def published() -> dict[tuple[str, str], dict[str, Any]] | None:
        # Polled: a kubelet wipes a node's slices when its plugin re-registers (restart, upgrade),
        # and the plugin publishes them again.
        devices = {
            (s["spec"]["pool"]["name"], d["name"]): d
            for s in kube.slices(driver=GPU_DRIVER)
            for d in s["spec"]["devices"]
        }
        return devices if all((r["pool"], r["device"]) in devices for r in results) else None

    devices = poll("the allocated devices in ResourceSlices", published, 60)
    gpus: set[str] = set()
    migs: set[str] = set()
    mig_count = 0
    for result in results:
        device = devices[(result["pool"], result["device"])]
        attrs = {k: next(iter(v.values())) for k, v in device["attributes"].items()}
        if attrs.get("type") == "mig":
            mig_count += 1
            gpus.add(str(attrs["parentUUID"]))
            if "uuid" in attrs:  # pre-created; a dynamic MIG device gets its UUID at prepare
                migs.add(str(attrs["uuid"]))
        else:
            gpus.add(str(attrs["uuid"]))
    return gpus, migs, mig_count


def assert_sees_its_gpus(bed: TestBed, ns: str, pod_name: str, container: str = "ctr") -> str:
    """Inside the container: `nvidia-smi -L` names exactly the GPUs and MIG devices allocated to its
    claims, and the environment of the claims' CDI specs is set. Returns what nvidia-smi printed."""
    kube = bed.kube
    pod = kube.pod(ns, pod_name)
    claims = pod_claims(pod, container)
    gpus, migs, mig_count = expected_gpus(kube, ns, claims)
    view = bed.container(ns, pod_name, container)
    result = view.nvidia_smi("-L")
    assert result.code == 0, f"nvidia-smi -L in {ns}/{pod_name}/{container}: {result.output}"
    printed = UUID_RE.findall(result.output)
    assert {u for u in printed if u.startswith("GPU-")} == gpus, result.output
    printed_migs = [u for u in printed if u.startswith("MIG-")]
    assert len(printed_migs) == mig_count and migs <= set(printed_migs), result.output
    assert_device_nodes(bed, view, gpu_minors(kube, ns, claims))
    if "node" in bed.capabilities:
        env = view.env()
        node = pod["spec"]["nodeName"]
        for name in claims:
            uid = kube.claim(ns, name)["metadata"]["uid"]
            text = bed.read_node_file(node, f"{NODE_CDI_ROOT}/k8s.gpu.nvidia.com-claim_{uid}.yaml")
            assert text, f"no CDI spec of claim {name} on {node}"
            spec = yaml.safe_load(text)
            wanted = list(spec.get("containerEdits", {}).get("env", []))
            for device in spec["devices"]:
                wanted += device.get("containerEdits", {}).get("env", [])
            missing = [e for e in wanted if env.get(e.split("=", 1)[0]) != e.split("=", 1)[1]]
            assert not missing, f"CDI environment missing in {ns}/{pod_name}/{container}: {missing}"
    return result.output


def gpu_minors(kube: Kube, ns: str, claims: list[str]) -> set[int]:
    """Minors of the GPUs the claims were allocated (a MIG device's parent): device names are
    gpu-<minor>[-mig-...] (docs/inventory.md)."""
    return {
        int(r["device"].split("-")[1])
        for name in claims
        for r in kube.claim(ns, name)["status"]["allocation"]["devices"]["results"]
        if r["driver"] == GPU_DRIVER
    }


def nvidia_nodes(view: Container) -> set[str]:
    listing = view.run("ls", "/dev")
    return {n for n in listing.output.split() if n.startswith("nvidia")}


def assert_device_nodes(bed: TestBed, view: Container, minors: set[int]) -> None:
    """NVIDIA's device nodes, exactly the allocated GPUs' (these hosts have no NVIDIA driver:
    docs/prepare.md); in a real container, opening one reaches no device."""
    wanted = {f"nvidia{m}" for m in minors} | {"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"}
    assert nvidia_nodes(view) == wanted
    if "kind" in bed.capabilities:
        opened = view.run("cat", f"/dev/nvidia{min(minors)}")
        assert opened.code != 0 and "No such device or address" in opened.output, opened.output


def assert_sees_no_gpu(bed: TestBed, ns: str, pod_name: str, container: str) -> None:
    """A container without a claim has no nvidia-smi, no device node and none of the driver's
    environment."""
    view = bed.container(ns, pod_name, container)
    result = view.nvidia_smi("-L")
    assert result.code == 127, f"{container} without a claim ran nvidia-smi: {result.output}"
    assert nvidia_nodes(view) == set()
    leaked = [k for k in view.env() if k.startswith(("NVIDIA_", "DRA_FAKE_"))]
    assert not leaked, f"{container} without a claim has {leaked}"


def _cpus_allowed(status: str) -> str:
    """The `Cpus_allowed_list` line of a /proc status file."""
    return next(
        line.split(":", 1)[1].strip() for line in status.splitlines() if line.startswith("Cpus_allowed_list:")
    )
