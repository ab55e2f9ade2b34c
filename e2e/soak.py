"""Kill soak: the GPU plugin under a stream of prepare/unprepare calls, SIGKILLed at random
moments and restarted, its files checked after every restart (docs/reliability.md#kill-soak).

The plugin serves a Node of its own that no kubelet runs: the real scheduler allocates the
claims of pods bound there, and this module is the kubelet, calling the plugin's DRA socket as
the kubelet does (each claim handled by one caller at a time, as the kubelet serialises a claim's
calls; several callers at once). After each restart:

- the checkpoint holds only PrepareCompleted claims (start-up rolled back the rest), and they are
  exactly the claims with a CDI spec: no spec without a claim, no claim without its spec;
- no temporary file is left in the CDI or the plugin directory;
- every claim whose last answered call was a successful prepare is still prepared, every claim
  whose last answered call was a successful unprepare is gone;
- a claim whose call the kill interrupted is settled by one more prepare or unprepare, which
  must succeed.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_fake.kubelet.pb.dra.v1 import api_pb2, api_pb2_grpc
from e2e.kube import Kube, poll
from e2e.localcluster.cluster import LocalCluster

log = logging.getLogger("soak")
DRIVER = "gpu.nvidia.com"
PREPARED, UNPREPARED, UNKNOWN = "prepared", "unprepared", "unknown"
CALL_TIMEOUT = 30.0
SETTLE_TIMEOUT = 30.0


@dataclass
class Claim:
    name: str
    namespace: str
    uid: str
    state: str = UNPREPARED  # what the last answered call left; UNKNOWN when a kill cut it off

    def pb(self) -> api_pb2.Claim:
        return api_pb2.Claim(namespace=self.namespace, uid=self.uid, name=self.name)


@dataclass
class Report:
    what: str = "kills"
    rounds: int = 0
    calls_ok: int = 0
    calls_cut: int = 0  # calls a kill interrupted
    settled: int = 0
    inconsistencies: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        return (
            f"{self.rounds} {self.what} in {self.seconds:.0f} s: {self.calls_ok} calls answered, "
            f"{self.calls_cut} cut off, {self.settled} claims settled afterwards, "
            f"{len(self.inconsistencies)} inconsistencies"
        )


class KillSoak:
    def __init__(self, cluster: LocalCluster, kube: Kube, claims: int = 8, callers: int = 3) -> None:
        self.cluster, self.kube = cluster, kube
        self.node = f"soak-{uuid.uuid4().hex[:5]}"
        self.claim_count, self.callers = claims, callers
        self.claims: list[Claim] = []
        self.namespace = ""
        self.report = Report()
        self._lock = threading.Lock()
        # Callers call while not paused; a caller whose call failed (a kill) or that finds the
        # soak paused parks until the main thread resumes the next round (a new epoch).
        self._gate = threading.Condition()
        self._paused = False
        self._epoch = 0
        self._parked: set[int] = set()
        self._stop = threading.Event()

    # ---- paths ----------------------------------------------------------------------------
    @property
    def socket(self) -> Path:
        return self.cluster.node_dir(self.node) / "plugins" / DRIVER / "dra.sock"

    @property
    def cdi_dir(self) -> Path:
        return self.cluster.node_dir(self.node) / "cdi"

    @property
    def plugin_dir(self) -> Path:
        return self.cluster.node_dir(self.node) / "plugins" / DRIVER

    # ---- set-up -----------------------------------------------------------------------------
    @contextmanager
    def running(self) -> Iterator[KillSoak]:
        """A kubelet-less Node with the GPU plugin, and `claims` claims allocated on it."""
        self.kube.core.create_node(
            client.V1Node(
                metadata=client.V1ObjectMeta(name=self.node, labels={"kubernetes.io/hostname": self.node})
            )
        )
        room = {"pods": "110", "cpu": "8", "memory": "32Gi"}  # what a kubelet would report
        self.kube.core.patch_node_status(self.node, {"status": {"capacity": room, "allocatable": room}})
        self.namespace = self.kube.namespace("soak")
        try:
            self.cluster.start_plugin(self.node, wait=False)
            poll(f"slices of {self.node}", lambda: self.kube.slices(node=self.node), 60)
            self._allocate()
            yield self
        finally:
            self._stop.set()
            self._resume()  # release parked callers
            self.cluster.stop_plugin(self.node, kill=True)
            for i in range(self.claim_count):
                # No kubelet confirms a graceful deletion on this node: remove the pods at once.
                with contextlib.suppress(ApiException):
                    self.kube.core.delete_namespaced_pod(f"p{i}", self.namespace, grace_period_seconds=0)
            self.kube.delete_namespace(self.namespace, wait=True)
            self.kube.core.delete_node(self.node)  # its slices go with it (owner reference)

    def _allocate(self) -> None:
        for i in range(self.claim_count):
            self.kube.create(
                {
                    "apiVersion": "resource.k8s.io/v1",
                    "kind": "ResourceClaim",
                    "metadata": {"name": f"c{i}"},
                    "spec": {
                        "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}
                    },
                },
                self.namespace,
            )
            self.kube.create(
                {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {"name": f"p{i}"},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": self.node},
                        "tolerations": [{"operator": "Exists"}],  # the node is never Ready
                        "resourceClaims": [{"name": "gpu", "resourceClaimName": f"c{i}"}],
                        "containers": [
                            {"name": "c", "image": "none", "resources": {"claims": [{"name": "gpu"}]}}
                        ],
                    },
                },
                self.namespace,
            )

        def allocated() -> list[dict[str, Any]] | None:
            items = self.kube.claims(self.namespace)
            done = [c for c in items if (c.get("status") or {}).get("allocation")]
            return done if len(done) == self.claim_count else None

        for c in poll(f"{self.claim_count} claims allocated on {self.node}", allocated, 90):
            meta = c["metadata"]
            self.claims.append(Claim(meta["name"], meta["namespace"], meta["uid"]))

    # ---- the kubelet side --------------------------------------------------------------------
    def _call(self, prepare: bool, claims: list[Claim]) -> dict[str, str]:
        """One call for `claims`: uid -> error ("" on success). Raises grpc.RpcError."""
        with grpc.insecure_channel(f"unix://{self.socket}") as channel:
            stub = api_pb2_grpc.DRAPluginStub(channel)  # type: ignore[no-untyped-call]
            if prepare:
                response: Any = stub.NodePrepareResources(
                    api_pb2.NodePrepareResourcesRequest(claims=[c.pb() for c in claims]), timeout=CALL_TIMEOUT
                )
            else:
                response = stub.NodeUnprepareResources(
                    api_pb2.NodeUnprepareResourcesRequest(claims=[c.pb() for c in claims]),
                    timeout=CALL_TIMEOUT,
                )
        return {c.uid: response.claims[c.uid].error for c in claims}

    def _apply(self, prepare: bool, claims: list[Claim]) -> bool:
        """One call; False when it was cut off."""
        for c in claims:
            c.state = UNKNOWN  # until the answer arrives
        try:
            errors = self._call(prepare, claims)
        except grpc.RpcError:
            with self._lock:
                self.report.calls_cut += 1
            return False
        with self._lock:
            self.report.calls_ok += 1
            for c in claims:
                if not errors[c.uid]:
                    c.state = PREPARED if prepare else UNPREPARED
                # else: retryable (the node lock under load, the API server away); the claim
                # stays UNKNOWN until a later call or the settling after this round.
        if any(errors.values()):
            self._stop.wait(0.05)  # the kubelet backs off before retrying a failed claim
        return True

    def _caller(self, index: int, rng: random.Random) -> None:
        mine = self.claims[index :: self.callers]
        while not self._stop.is_set():
            with self._gate:
                epoch = self._epoch
                paused = self._paused
            if paused or not self._apply(
                rng.random() < 0.5, rng.sample(mine, rng.randint(1, min(3, len(mine))))
            ):
                self._park(index, epoch)

    def _park(self, index: int, epoch: int) -> None:
        with self._gate:
            self._parked.add(index)
            self._gate.notify_all()
            self._gate.wait_for(lambda: self._epoch != epoch or self._stop.is_set())

    def _pause(self) -> None:
        with self._gate:
            self._paused = True
            if not self._gate.wait_for(lambda: len(self._parked) == self.callers, CALL_TIMEOUT + 5):
                raise AssertionError("a caller did not return after the kill")

    def _resume(self) -> None:
        with self._gate:
            self._paused = False
            self._parked.clear()
            self._epoch += 1
            self._gate.notify_all()

    # ---- checks ----------------------------------------------------------------------------
    def _serving(self) -> bool:
        try:
            self._call(False, [])
            return True
        except grpc.RpcError:
            return False

    def check(self) -> list[str]:
        """What is inconsistent on disk and against the calls' answers (empty: all is well)."""
        problems: list[str] = []
        path = self.plugin_dir / "checkpoint.json"
        entries: dict[str, Any] = json.loads(path.read_text())["data"]["claims"] if path.exists() else {}
        for uid, entry in entries.items():
            if entry["state"] != "PrepareCompleted":
                problems.append(f"claim {uid} is {entry['state']} after start-up")
        specs = {
            p.name.split("_", 1)[1].removesuffix(".yaml")
            for p in self.cdi_dir.glob("k8s.gpu.nvidia.com-claim_*")
        }
        if specs != set(entries):
            problems.append(f"CDI specs {sorted(specs)} != checkpoint claims {sorted(entries)}")
        for directory in (self.cdi_dir, self.plugin_dir):
            leftovers = [p.name for p in directory.rglob("*") if ".tmp" in p.name]
            if leftovers:
                problems.append(f"temporary files left in {directory.name}: {leftovers}")
        for c in self.claims:
            if c.state == PREPARED and c.uid not in entries:
                problems.append(f"claim {c.name} was prepared but is gone after the restart")
            if c.state == UNPREPARED and c.uid in entries:
                problems.append(f"claim {c.name} was unprepared but is back after the restart")
        return problems

    def settle(self, rng: random.Random) -> None:
        """One more call for each claim a kill cut off, retried as the kubelet retries (a prepare
        fails while the restarted plugin has not reached the API server yet); it must succeed."""
        for c in [c for c in self.claims if c.state == UNKNOWN]:
            prepare = rng.random() < 0.5
            what = f"{'prepare' if prepare else 'unprepare'} of {c.name} after a restart"
            errors: list[str] = []

            def succeeded(c: Claim = c, prepare: bool = prepare, errors: list[str] = errors) -> bool:
                errors.append(self._call(prepare, [c])[c.uid])
                return not errors[-1]

            try:
                poll(what, succeeded, SETTLE_TIMEOUT, every=0.1)
            except AssertionError:
                self.report.inconsistencies.append(f"{what} failed for {SETTLE_TIMEOUT:.0f} s: {errors[-1]}")
                continue
            c.state = PREPARED if prepare else UNPREPARED
            self.report.settled += 1

    # ---- the soak ----------------------------------------------------------------------------
    def kill_plugin(self, rng: random.Random) -> None:
        self.cluster.stop_plugin(self.node, kill=True)
        self.cluster.start_plugin(self.node, wait=False)

    def run(
        self, rounds: int, disrupt: Callable[[random.Random], None], what: str, seed: int | None = None
    ) -> Report:
        """`rounds` times: let the call stream run for a random moment, `disrupt` it, pause the
        callers, wait until the plugin serves, check, settle, resume."""
        rng = random.Random(seed)
        self.report.what = what
        started = time.monotonic()
        threads = [
            threading.Thread(target=self._caller, args=(i, random.Random(rng.random())), daemon=True)
            for i in range(self.callers)
        ]
        for t in threads:
            t.start()
        for n in range(1, rounds + 1):
            # Not a synchronisation: a random moment in the call stream to disrupt (mid-prepare,
            # mid-unprepare, between calls).
            time.sleep(rng.uniform(0.0, 0.4))
            disrupt(rng)
            self._pause()
            poll(f"plugin of {self.node} serving again", lambda: self._serving() or None, 60, every=0.05)
            self.report.rounds = n
            self.report.inconsistencies += [f"{what} {n}: {p}" for p in self.check()]
            self.settle(rng)
            if n % 25 == 0 or n == rounds:
                log.info("soak progress: %s", self.report.line())
            self._resume()
        self._stop.set()
        self._resume()
        for t in threads:
            t.join(CALL_TIMEOUT + 5)
        self.report.seconds = time.monotonic() - started
        return self.report


# ---- API outages and leader election ----------------------------------------------------------


@dataclass
class Leadership:
    replica: str
    start: float
    end: float  # when it logged the loss, or the end of the run


def leaderships(log_text: str, replica: str, now: float) -> list[Leadership]:
    """The intervals a controller replica led, from its JSON log (all its restarts)."""
    spans: list[Leadership] = []
    began: float | None = None
    for line in log_text.splitlines():
        if line.startswith("===="):  # a restart: a leader that died without a word (none should)
            if began is not None:  # may have led until any time: count it as leading to the end
                spans.append(Leadership(replica, began, now))
                began = None
            continue
        if not line.startswith("{"):
            continue
        entry = json.loads(line)
        ts = dt.datetime.fromisoformat(entry["ts"].replace("Z", "+00:00")).timestamp()
        if entry["msg"] == "became leader":
            began = ts
        elif entry["msg"].startswith("leadership lost") and began is not None:
            spans.append(Leadership(replica, began, ts))
            began = None
    if began is not None:
        spans.append(Leadership(replica, began, now))
    return spans


def overlapping(spans: list[Leadership]) -> list[str]:
    """Pairs of replicas that led at the same time."""
    found = []
    for a in spans:
        for b in spans:
            if a.replica < b.replica and a.start < b.end and b.start < a.end:
                found.append(
                    f"{a.replica} led {a.start:.3f}-{a.end:.3f}, {b.replica} {b.start:.3f}-{b.end:.3f}"
                )
    return found


class ApiOutages:
    """Stops the API server for 1-12 s (longer than the leader's renew deadline, 10 s, now and
    then) while the call stream runs and two controller replicas compete for the lease."""

    REPLICAS = ("cd-controller-a", "cd-controller-b")

    def __init__(self, soak: KillSoak) -> None:
        self.soak, self.cluster = soak, soak.cluster
        self.restarts = 0
        # Only what this run logs counts: earlier runs appended to the same files.
        self.log_offsets = {
            name: self._log(name).stat().st_size if self._log(name).exists() else 0 for name in self.REPLICAS
        }

    def _log(self, name: str) -> Path:
        return self.cluster.logs / f"{name}.log"

    @contextmanager
    def replicas(self) -> Iterator[ApiOutages]:
        for name in self.REPLICAS:
            self.start(name)
        poll("a controller replica leading", lambda: self.leader_overlaps() != ["no replica ever led"], 60)
        try:
            yield self
        finally:
            for name in self.REPLICAS:
                self.cluster.stop_cd_controller(name=name)

    def start(self, name: str) -> None:
        self.cluster.start_cd_controller(
            name, ["--leader-elect=true", f"--leader-elect-identity={name}", "--log-format=json"]
        )

    def outage(self, rng: random.Random) -> None:
        self.cluster.stop_apiserver()
        time.sleep(rng.uniform(1.0, 12.0))  # the outage's length, not a synchronisation
        self.cluster.start_apiserver()
        for name in self.REPLICAS:  # a replica that lost the lease exits; its kubelet restarts it
            if not self.cluster.process(name).alive():
                self.restarts += 1
                self.start(name)
        poll(f"slices of {self.soak.node} back", lambda: self.soak.kube.slices(node=self.soak.node), 60)

    def leader_overlaps(self) -> list[str]:
        now = time.time()
        spans = []
        for name in self.REPLICAS:
            with self._log(name).open("rb") as f:
                f.seek(self.log_offsets[name])
                spans += leaderships(f.read().decode(errors="replace"), name, now)
        return overlapping(spans) if spans else ["no replica ever led"]
