"""A KUBECONFIG cluster as a test bed (e2e/testbed.py): a kind cluster of ours (real containers,
exec through the API server; node files and processes through `docker exec`; the chart's values
through Helm), or any other cluster, the API server only.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import urllib3
import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from dra_fake.core.checkpoint import read_claims
from dra_fake.fleet.workload import WorkloadProfile
from e2e.kindcluster.cluster import RELEASE, helm_binary
from e2e.kube import Kube, poll
from e2e.localcluster.values import CHART, Values
from e2e.testbed import (
    CD_DRIVER,
    GPU_DRIVER,
    NODE_PLUGINS_DIR,
    Container,
    Exec,
    TestBed,
    cpus_allowed,
)

# Each driver's kubelet plugin in the chart's pod: its `dra-fake` command and its container.
KIND_PLUGINS = {
    GPU_DRIVER: ("gpu-kubelet-plugin", "gpus"),
    CD_DRIVER: ("compute-domain-kubelet-plugin", "compute-domains"),
}
HELM_WAIT = ("--wait", "--timeout", "5m")


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
        return [cpus_allowed(status) for status in proc.stdout.split("Name:")[1:]]

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

    def restart_kubelet(self, node: str) -> None:
        proc = self._docker(node, "systemctl", "restart", "kubelet")
        assert proc.returncode == 0, proc.stderr
        poll(
            f"the kubelet of {node} active again",
            lambda: self._docker(node, "systemctl", "is-active", "kubelet").stdout.strip() == "active",
            60,
        )

    def restart_apiserver(self) -> None:
        node = f"{self.cluster}-control-plane"

        def running() -> list[str]:
            ps = self._docker(node, "crictl", "ps", "-q", "--name", "kube-apiserver", "--state", "running")
            return ps.stdout.split()

        [old] = running()
        proc = self._docker(node, "crictl", "stop", old)
        assert proc.returncode == 0, proc.stderr

        def serving() -> bool:
            if running() in ([], [old]):
                return False
            try:
                self.kube.core.list_namespace(limit=1, _request_timeout=5)
            except (ApiException, urllib3.exceptions.HTTPError):  # not serving yet: refused, reset, 5xx
                return False
            return True

        poll("kube-apiserver restarted by the kubelet and serving", serving, 180)

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
