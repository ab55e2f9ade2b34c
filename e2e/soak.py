"""Kill soak: the GPU and compute-domain plugins under a stream of prepare/unprepare calls,
SIGKILLed at random moments and restarted, their files checked after every restart
(docs/reliability.md#kill-soak).

The plugins serve a Node of their own that no kubelet runs: the real scheduler allocates the
claims of pods bound there (GPU claims; a ComputeDomain's channel claim and its daemon claim), and
this module is the kubelet, calling each plugin's DRA socket as the kubelet does (each claim
handled by one caller at a time, as the kubelet serialises a claim's calls; several callers at
once). It is also the domain's IMEX daemon: the ComputeDomainClique says this node is Ready, so a
channel prepare goes through. After each restart, for each plugin:

The GPU claims include shares of one GPU with consumable shares (three claims of 20Gi of memory,
with one time slice; docs/sharing-design.md): one share's unprepare cut off must leave the others.

- the checkpoint holds only PrepareCompleted claims (start-up rolled back the rest), and they are
  exactly the claims with a CDI spec: no spec without a claim, no claim without its spec;
- no temporary file is left in the CDI or the plugin directory;
- the node carries the ComputeDomain label exactly while the channel claim is prepared, and the
  domain's IMEX directory exists exactly while the daemon claim is prepared;
- every claim whose last answered call was a successful prepare is still prepared, every claim
  whose last answered call was a successful unprepare is gone;
- a claim whose call the kill interrupted is settled by one more prepare or unprepare, which
  must succeed.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import grpc
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomain.api import (
    CD_LABEL,
    CHANNEL_CLASS,
    CHANNEL_KIND,
    DAEMON_CLASS,
    DAEMON_KIND,
)
from computedomain.api import DRIVER_NAME as CD_DRIVER
from computedomain.imex import domain_dir
from dra_fake.core.atomic import TEMP_SUFFIX
from dra_fake.core.checkpoint import read_claims
from dra_fake.core.resourceapi import as_dict
from dra_fake.kubelet.pb.dra.v1 import api_pb2, api_pb2_grpc
from e2e.kube import Kube, poll
from e2e.localcluster.cluster import CD_NAMESPACE, LocalCluster
from e2e.pluginflags import SHARES_GATES, start_gpu_plugin
from e2e.soakobjects import GPU_DRIVER, Wanted, claim_with_pod, create_domain, delete_custom, remove_domain

log = logging.getLogger("soak")
DRIVERS = (GPU_DRIVER, CD_DRIVER)
PREPARED, UNPREPARED, UNKNOWN = "prepared", "unprepared", "unknown"
CALL_TIMEOUT = 30.0
SETTLE_TIMEOUT = 30.0
# The soak node: 8 GPUs for the whole-GPU claims, and one whose memory the shares divide.
SOAK_INVENTORY = {
    "gpus": [
        {"profile": "h100-sxm5-80gb", "count": 8},
        {"profile": "h100-sxm5-80gb", "count": 1, "consumableShares": "memory"},
    ]
}
SHARES = 3  # of 20Gi each: they fit one H100 (81559 MiB)


@dataclass
class Claim:
    name: str
    namespace: str
    uid: str
    driver: str
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
    kills: dict[str, int] = field(default_factory=lambda: dict.fromkeys(DRIVERS, 0))

    def line(self) -> str:
        killed = ", ".join(f"{driver} {n}" for driver, n in self.kills.items() if n)
        return (
            f"{self.rounds} {self.what} in {self.seconds:.0f} s"
            + (f" (SIGKILLs: {killed})" if killed else "")
            + f": {self.calls_ok} calls answered, "
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
        self.domain_uid = ""
        self.inventory = cluster.root / f"{self.node}-inventory.yaml"
        self._start = {GPU_DRIVER: self._start_gpu_plugin, CD_DRIVER: cluster.start_cd_plugin}
        self._stop_plugin = {GPU_DRIVER: cluster.stop_plugin, CD_DRIVER: cluster.stop_cd_plugin}
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
    def socket(self, driver: str) -> Path:
        return self.plugin_dir(driver) / "dra.sock"

    @property
    def cdi_dir(self) -> Path:
        return self.cluster.node_dir(self.node) / "cdi"

    def plugin_dir(self, driver: str) -> Path:
        return self.cluster.node_dir(self.node) / "plugins" / driver

    # ---- set-up -----------------------------------------------------------------------------
    def _start_gpu_plugin(self, node: str, wait: bool = True) -> None:
        start_gpu_plugin(self.cluster, node, SHARES_GATES, config=self.inventory, wait=wait)

    @contextmanager
    def running(self) -> Iterator[KillSoak]:
        """A kubelet-less Node with both plugins, `claims` GPU claims and a ComputeDomain's channel
        and daemon claims allocated on it."""
        self.kube.core.create_node(
            client.V1Node(
                metadata=client.V1ObjectMeta(name=self.node, labels={"kubernetes.io/hostname": self.node})
            )
        )
        room = {"pods": "110", "cpu": "8", "memory": "32Gi"}  # what a kubelet would report
        self.kube.core.patch_node_status(self.node, {"status": {"capacity": room, "allocatable": room}})
        self.namespace = self.kube.namespace("soak")
        self.inventory.write_text(json.dumps(SOAK_INVENTORY))
        pods: list[tuple[str, str]] = []  # (namespace, name)
        try:
            for driver in DRIVERS:
                self._start[driver](self.node, wait=False)
            for driver in DRIVERS:
                poll(f"{driver} slices of {self.node}", partial(self.kube.slices, driver, self.node), 60)
            self.domain_uid = create_domain(self.kube, self.namespace, self.node)
            # The shares first, allocated before any whole-GPU claim could take their GPU.
            shares: list[Wanted] = [(self.namespace, f"s{i}", GPU_DRIVER, None) for i in range(SHARES)]
            allocated_shares = self._allocate(shares, pods, share=True)
            wanted: list[Wanted] = [
                (self.namespace, f"c{i}", GPU_DRIVER, None) for i in range(self.claim_count)
            ]
            wanted += [
                (self.namespace, "channel", CHANNEL_CLASS, CHANNEL_KIND),
                (CD_NAMESPACE, f"{self.node}-daemon", DAEMON_CLASS, DAEMON_KIND),
            ]
            self.claims = self._allocate(wanted, pods) + allocated_shares
            yield self
        finally:
            self._stop.set()
            self._resume()  # release parked callers
            for driver in DRIVERS:
                self._stop_plugin[driver](self.node, kill=True)
            for namespace, name in pods:
                # No kubelet confirms a graceful deletion on this node: remove the pods at once.
                with contextlib.suppress(ApiException):
                    self.kube.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
                if namespace == CD_NAMESPACE:
                    delete_custom(self.kube, *self.kube.resource, namespace, "resourceclaims", name)
            if self.domain_uid:
                remove_domain(self.kube, self.namespace, self.domain_uid)
            self.kube.delete_namespace(self.namespace, wait=True)
            self.kube.core.delete_node(self.node)  # its slices go with it (owner reference)

    def _allocate(
        self, wanted: list[Wanted], pods: list[tuple[str, str]], share: bool = False
    ) -> list[Claim]:
        """Each wanted claim with its pod (soakobjects.claim_with_pod; added to `pods` for the
        clean-up), once the scheduler allocated them all."""
        for claim in wanted:
            claim_with_pod(self.kube, self.node, self.domain_uid, claim, share)
            pods.append(claim[:2])

        def allocated() -> list[Claim] | None:
            found = []
            for namespace, name, device_class, _ in wanted:
                claim = as_dict(
                    self.kube.custom.get_namespaced_custom_object(
                        *self.kube.resource, namespace, "resourceclaims", name
                    )
                )
                if not (claim.get("status") or {}).get("allocation"):
                    return None
                driver = GPU_DRIVER if device_class == GPU_DRIVER else CD_DRIVER
                found.append(Claim(name, namespace, claim["metadata"]["uid"], driver))
            return found

        return poll(f"{len(wanted)} claims allocated on {self.node}", allocated, 90)

    # ---- the kubelet side --------------------------------------------------------------------
    def _call(self, prepare: bool, claims: list[Claim], driver: str = "") -> dict[str, str]:
        """One call for `claims` (all of one driver): uid -> error ("" on success). Raises
        grpc.RpcError."""
        driver = driver or claims[0].driver
        with grpc.insecure_channel(f"unix://{self.socket(driver)}") as channel:
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
        drivers = sorted({c.driver for c in mine})
        while not self._stop.is_set():
            with self._gate:
                epoch = self._epoch
                paused = self._paused
            driver = rng.choice(drivers)
            pool = [c for c in mine if c.driver == driver]
            if paused or not self._apply(
                rng.random() < 0.5, rng.sample(pool, rng.randint(1, min(3, len(pool))))
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
            for driver in DRIVERS:
                self._call(False, [], driver)
            return True
        except grpc.RpcError:
            return False

    def check(self, restarted: bool) -> list[str]:
        """What is inconsistent on disk, on the Node and against the calls' answers (empty: all
        is well). After a restart no claim is half-prepared (start-up rolled them back); without
        one (an API outage), a claim whose last call failed may be."""
        problems: list[str] = []
        completed: dict[str, Any] = {}  # uid -> PrepareCompleted checkpoint entry, of both plugins
        partial: dict[str, Any] = {}  # uid -> PrepareStarted entry
        unknown = {c.uid for c in self.claims if c.state == UNKNOWN}
        for driver in DRIVERS:
            entries = read_claims(self.plugin_dir(driver))  # the checkpoint with its journal
            for uid, entry in entries.items():
                if entry["state"] == "PrepareCompleted":
                    completed[uid] = entry
                    continue
                partial[uid] = entry
                if restarted or uid not in unknown:
                    problems.append(f"{driver} claim {uid} is {entry['state']} (restarted: {restarted})")
            specs = {
                p.name.split("_", 1)[1].removesuffix(".yaml")
                for p in self.cdi_dir.glob(f"k8s.{driver}-claim_*")
            }
            without_spec = sorted(set(entries) - specs - set(partial))
            if without_spec:
                problems.append(f"{driver} claims prepared without a CDI spec: {without_spec}")
            if specs - set(entries):
                problems.append(f"{driver} CDI specs of no claim: {sorted(specs - set(entries))}")
            # The GPU plugin rewrites its nvidia-smi live files every sample (NvidiaSmi.live_dir).
            live = self.plugin_dir(driver) / "nvidia-smi" / "live"
            leftovers = leftover_temp_files(self.plugin_dir(driver), rewritten=live)
            if leftovers:
                problems.append(f"temporary files left in {driver}'s directory: {leftovers}")
        leftovers = leftover_temp_files(self.cdi_dir)
        if leftovers:
            problems.append(f"temporary files left in the CDI directory: {leftovers}")
        for c in self.claims:
            if c.state == PREPARED and c.uid not in completed:
                problems.append(f"claim {c.name} was prepared but is gone")
            if c.state == UNPREPARED and (c.uid in completed or c.uid in partial):
                problems.append(f"claim {c.name} was unprepared but is back")
        return problems + self._check_domain(completed, partial)

    def _check_domain(self, completed: dict[str, Any], partial: dict[str, Any]) -> list[str]:
        """The node label follows the channel claim, the IMEX directory the daemon claim (either
        way while that claim is half-prepared)."""

        def types(entries: dict[str, Any]) -> set[str]:
            return {
                e["driverData"].get("type") for e in entries.values() if isinstance(e.get("driverData"), dict)
            }

        done, half = types(completed), types(partial)
        problems = []
        meta = self.kube.core.read_node(self.node).metadata
        label = ((meta.labels if meta else None) or {}).get(CD_LABEL)
        if "channel" in done and label != self.domain_uid:
            problems.append(f"the channel claim is prepared but the node label is {label!r}")
        if "channel" not in done | half and label is not None:
            problems.append(f"no channel claim is prepared but the node keeps label {CD_LABEL}={label}")
        exists = domain_dir(self.plugin_dir(CD_DRIVER), self.domain_uid).is_dir()
        if "daemon" in done and not exists:
            problems.append("the daemon claim is prepared but its IMEX directory is missing")
        if "daemon" not in done | half and exists:
            problems.append("no daemon claim is prepared but its IMEX directory is left")
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
    def kill_plugins(self, rng: random.Random) -> None:
        """SIGKILL one plugin or both, and start them again."""
        for driver in rng.choice([[GPU_DRIVER], [CD_DRIVER], list(DRIVERS)]):
            self._stop_plugin[driver](self.node, kill=True)
            self.report.kills[driver] += 1
            self._start[driver](self.node, wait=False)

    def run(
        self,
        rounds: int,
        disrupt: Callable[[random.Random], None],
        what: str,
        seed: int | None = None,
        restarts: bool = True,
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
            poll(f"plugins of {self.node} serving again", lambda: self._serving() or None, 60, every=0.05)
            self.report.rounds = n
            self.report.inconsistencies += [f"{what} {n}: {p}" for p in self.check(restarts)]
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


def leftover_temp_files(directory: Path, rewritten: Path | None = None, within: float = 3.0) -> list[str]:
    """Temp files under `directory`. Under `rewritten`, a directory the running plugin keeps
    rewriting, a listing can catch a write in flight, whose temp file is renamed away within
    milliseconds: those count only if still there `within` seconds after they were seen."""
    found = [p for p in directory.rglob("*") if p.name.endswith(TEMP_SUFFIX)]
    left = [p for p in found if rewritten is None or rewritten not in p.parents]
    in_flight = [p for p in found if p not in left]
    deadline = time.monotonic() + within
    while in_flight and time.monotonic() < deadline:
        time.sleep(0.05)  # polling the named files until the deadline, not a synchronisation
        in_flight = [p for p in in_flight if p.exists()]
    return sorted(p.name for p in left + in_flight)
