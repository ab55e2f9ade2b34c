"""The control plane of the local cluster (e2e/localcluster/cluster.py): etcd, kube-apiserver,
kube-scheduler and kube-controller-manager, the upstream binaries built by `make cluster-build`,
their flags, and the processes of a cluster as its saved state tracks them."""

from __future__ import annotations

import json
import os
import secrets
import ssl
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from e2e.localcluster.pki import write_service_account_key
from e2e.localcluster.processes import Process, free_port, spawn, wait_for
from e2e.localcluster.values import Values

REPO = Path(__file__).resolve().parents[2]
BIN_DIR = REPO / "e2e" / "cluster" / "bin"
STARTUP_TIMEOUT = float(os.environ.get("LOCAL_CLUSTER_STARTUP_TIMEOUT", "120"))

# Beta DRA gates of the pinned release (GA ones are on and locked). Kept in one place so the
# pin can be bumped; the API server refuses unknown gates, which makes a stale list loud.
FEATURE_GATES = "DRAConsumableCapacity=true,DRADeviceBindingConditions=true,DRAPartitionableDevices=true"
# How long the scheduler waits in PreBind for a device's binding conditions (its default: 10 min);
# short here so the attach timeout path of fabric-attached GPUs can be tested (e2e/test_attach.py).
BINDING_TIMEOUT_SECONDS = 20
# Older resource.k8s.io versions, so the driver's fallbacks (v1beta2, v1beta1) can be exercised.
RUNTIME_CONFIG = "resource.k8s.io/v1beta1=true,resource.k8s.io/v1beta2=true"
CONTROLLERS = ",".join(
    [
        "resourceclaim-controller",
        "garbage-collector-controller",
        "namespace-controller",
        "daemonset-controller",
        "deployment-controller",
        "replicaset-controller",
        "serviceaccount-controller",
        "serviceaccount-token-controller",
        "root-ca-certificate-publisher-controller",
        "pod-garbage-collector-controller",
        "device-taint-eviction-controller",  # NoExecute device taints evict pods (e2e/test_faults.py)
    ]
)


def scheduler_config(kubeconfig: str, leader_elect: bool = False) -> dict[str, Any]:
    """kube-scheduler's configuration: its defaults, but DynamicResources' bindingTimeout (the local
    cluster's scheduler and, from 1.36, our kind clusters': e2e/kindcluster/config.py)."""
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": kubeconfig},
        "leaderElection": {"leaderElect": leader_elect},
        "profiles": [
            {
                "schedulerName": "default-scheduler",
                "pluginConfig": [
                    {
                        "name": "DynamicResources",
                        "args": {
                            "apiVersion": "kubescheduler.config.k8s.io/v1",
                            "kind": "DynamicResourcesArgs",
                            "bindingTimeout": f"{BINDING_TIMEOUT_SECONDS}s",
                        },
                    }
                ],
            }
        ],
    }


@dataclass
class State:
    """Everything needed to find and stop a running cluster; saved as <root>/state.json."""

    root: str
    ports: dict[str, int] = field(default_factory=dict)
    processes: dict[str, dict[str, object]] = field(default_factory=dict)
    nodes: list[str] = field(default_factory=list)
    inventory_config: str | None = None  # every node's GPU plugin, unless node_configs names the node
    node_configs: dict[str, str] = field(default_factory=dict)
    node_labels: dict[str, dict[str, str]] = field(default_factory=dict)  # extra labels per node
    # The user's chart values (VALUES, FEATURE_GATES) for the plugins, on top of the chart's
    # defaults and the test bed's (e2e/localcluster/values.py).
    values: Values = field(default_factory=dict)
    # More values for one node's GPU plugin, on top of those (set_node_values): a node with shared
    # GPUs or lending for a test module (e2e/testbed.py, plugin_values).
    node_values: dict[str, Values] = field(default_factory=dict)
    admin_token: str = ""

    @classmethod
    def load(cls, root: Path) -> State | None:
        path = root / "state.json"
        if not path.exists():
            return None
        return cls(**json.loads(path.read_text()))

    def save(self) -> None:
        path = Path(self.root) / "state.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2))
        tmp.replace(path)


class ControlPlane:
    """A local cluster's processes (tracked in its State) and its control plane; LocalCluster adds
    the nodes, the plugins and what runs beside them."""

    root: Path
    state: State
    controllers: str  # kube-controller-manager's --controllers

    # ---- paths -------------------------------------------------------------------------
    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def pki(self) -> Path:
        return self.root / "pki"

    def node_dir(self, node: str) -> Path:
        return self.root / "nodes" / node

    def process(self, name: str) -> Process:
        p = self.state.processes[name]
        return Process(name=str(p["name"]), pid=int(str(p["pid"])), log=str(p["log"]))

    def _track(self, proc: Process) -> Process:
        self.state.processes[proc.name] = asdict(proc)
        self.state.save()
        return proc

    def dead_processes(self) -> list[Process]:
        return [p for p in map(self.process, self.state.processes) if not p.alive()]

    def is_up(self) -> bool:
        return "kube-apiserver" in self.state.processes and self.process("kube-apiserver").alive()

    def down(self) -> None:
        # Nodes and plugins first, then the scheduler and controller manager, the API server after its
        # clients (with their watches open it takes 15 s to stop instead of 1), etcd last.
        order = sorted(
            self.state.processes,
            key=lambda n: (n.startswith("etcd"), n == "kube-apiserver", n.startswith("kube-"), n),
        )
        for name in order:
            self.process(name).stop()
            del self.state.processes[name]
            self.state.save()

    def restart_apiserver(self) -> None:
        """Stop kube-apiserver and start it again (same port, token and etcd data)."""
        self.stop_apiserver()
        self.start_apiserver()

    def stop_apiserver(self) -> None:
        self._stop("kube-apiserver")

    def start_apiserver(self) -> None:
        self._start_apiserver()

    def _stop(self, name: str, kill: bool = False) -> None:
        if name not in self.state.processes:
            return
        proc = self.process(name)
        proc.kill() if kill else proc.stop()
        del self.state.processes[name]
        self.state.save()

    # ---- control plane -----------------------------------------------------------------
    def _start_etcd(self) -> None:
        client, peer = free_port(), free_port()
        self.state.ports.update(etcd=client, etcd_peer=peer)
        data = self.root / "etcd"
        proc = self._track(
            spawn(
                "etcd",
                [
                    str(BIN_DIR / "etcd"),
                    "--name=local",
                    f"--data-dir={data}",
                    f"--listen-client-urls=http://127.0.0.1:{client}",
                    f"--advertise-client-urls=http://127.0.0.1:{client}",
                    f"--listen-peer-urls=http://127.0.0.1:{peer}",
                    f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
                    f"--initial-cluster=local=http://127.0.0.1:{peer}",
                    "--unsafe-no-fsync",
                    "--log-level=warn",
                ],
                self.logs,
            )
        )
        wait_for(
            "etcd health",
            lambda: http_ok(f"http://127.0.0.1:{client}/health"),
            STARTUP_TIMEOUT,
            alive=proc.check_alive,
        )

    def _start_apiserver(self) -> None:
        """Start kube-apiserver; a restart keeps its port, token and keys, so clients reconnect."""
        port = self.state.ports.setdefault("apiserver", free_port())
        self.pki.mkdir(parents=True, exist_ok=True, mode=0o700)
        sa_key = write_service_account_key(self.pki)
        self.state.admin_token = self.state.admin_token or secrets.token_hex(24)
        tokens = self.pki / "tokens.csv"
        tokens.write_text(f'{self.state.admin_token},admin,admin-uid,"system:masters"\n')
        tokens.chmod(0o600)
        proc = self._track(
            spawn(
                "kube-apiserver",
                [
                    str(BIN_DIR / "kube-apiserver"),
                    f"--etcd-servers=http://127.0.0.1:{self.state.ports['etcd']}",
                    f"--secure-port={port}",
                    "--bind-address=127.0.0.1",
                    "--advertise-address=127.0.0.1",
                    f"--cert-dir={self.pki / 'serving'}",
                    f"--token-auth-file={tokens}",
                    "--authorization-mode=Node,RBAC",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    f"--service-account-key-file={sa_key}",
                    f"--service-account-signing-key-file={sa_key}",
                    "--service-cluster-ip-range=10.96.0.0/16",
                    "--endpoint-reconciler-type=none",
                    "--allow-privileged=true",
                    f"--feature-gates={FEATURE_GATES}",
                    f"--runtime-config={RUNTIME_CONFIG}",
                    "--enable-priority-and-fairness=false",
                    "--v=1",
                ],
                self.logs,
            )
        )
        wait_for(
            "kube-apiserver /readyz",
            lambda: self._api_ok("/readyz"),
            STARTUP_TIMEOUT,
            every=0.5,
            alive=proc.check_alive,
        )

    @property
    def api_url(self) -> str:
        return f"https://127.0.0.1:{self.state.ports['apiserver']}"

    @property
    def ca_file(self) -> Path:
        return self.pki / "serving" / "apiserver.crt"

    def _api_get(self, path: str) -> Any:
        """GET `path` of the API server as the admin (its certificate checked once it exists)."""
        ctx = ssl.create_default_context(cafile=str(self.ca_file)) if self.ca_file.exists() else None
        req = urllib.request.Request(
            self.api_url + path, headers={"Authorization": f"Bearer {self.state.admin_token}"}
        )
        return urllib.request.urlopen(req, timeout=5, context=ctx)

    def _api_ok(self, path: str) -> bool:
        with self._api_get(path) as resp:
            return bool(resp.status == 200)

    def api_json(self, path: str) -> dict[str, Any]:
        with self._api_get(path) as resp:
            obj: dict[str, Any] = json.load(resp)
        return obj

    def _write_kubeconfig(self) -> None:
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "local",
            "clusters": [
                {
                    "name": "local",
                    "cluster": {"server": self.api_url, "certificate-authority": str(self.ca_file)},
                }
            ],
            "users": [{"name": "admin", "user": {"token": self.state.admin_token}}],
            "contexts": [{"name": "local", "context": {"cluster": "local", "user": "admin"}}],
        }
        self.kubeconfig.write_text(yaml.safe_dump(config))
        self.kubeconfig.chmod(0o600)

    def _start_controllers(self) -> None:
        kc = str(self.kubeconfig)
        sched_port, kcm_port = free_port(), free_port()
        self.state.ports.update(scheduler=sched_port, controller_manager=kcm_port)
        sched_config = self.root / "kube-scheduler.yaml"
        sched_config.write_text(yaml.safe_dump(scheduler_config(kc)))
        sched = self._track(
            spawn(
                "kube-scheduler",
                [
                    str(BIN_DIR / "kube-scheduler"),
                    f"--config={sched_config}",
                    f"--authentication-kubeconfig={kc}",
                    f"--authorization-kubeconfig={kc}",
                    f"--secure-port={sched_port}",
                    "--bind-address=127.0.0.1",
                    f"--feature-gates={FEATURE_GATES}",
                    "--v=2",
                ],
                self.logs,
            )
        )
        kcm = self._track(
            spawn(
                "kube-controller-manager",
                [
                    str(BIN_DIR / "kube-controller-manager"),
                    f"--kubeconfig={kc}",
                    "--leader-elect=false",
                    f"--authentication-kubeconfig={kc}",
                    f"--authorization-kubeconfig={kc}",
                    f"--secure-port={kcm_port}",
                    "--bind-address=127.0.0.1",
                    f"--controllers={self.controllers}",
                    f"--service-account-private-key-file={self.pki / 'service-account.key'}",
                    f"--root-ca-file={self.ca_file}",
                    "--use-service-account-credentials=false",
                    f"--feature-gates={FEATURE_GATES}",
                    "--v=1",
                ],
                self.logs,
            )
        )
        insecure = ssl._create_unverified_context()  # their serving certs are self-signed, per process
        for proc, port in ((sched, sched_port), (kcm, kcm_port)):
            url = f"https://127.0.0.1:{port}/healthz"
            wait_for(
                f"{proc.name} /healthz",
                lambda url=url: http_ok(url, insecure),  # type: ignore[misc]
                STARTUP_TIMEOUT,
                every=0.5,
                alive=proc.check_alive,
            )


def http_ok(url: str, ctx: ssl.SSLContext | None = None) -> bool:
    with urllib.request.urlopen(url, timeout=5, context=ctx) as resp:
        return bool(resp.status == 200)
