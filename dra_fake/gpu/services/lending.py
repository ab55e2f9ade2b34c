"""Idle-GPU lending (ours; dra_fake.gpu.lending, docs/sharing.md): each telemetry sample's owner
utilization moves the node's lend views between lendable and not, and their taints go to the
node's owner (the DRA plugin publishes them in its own slice, where kube-scheduler keeps spot
claims off a busy GPU and kube-controller-manager evicts the spot pods of a reclaimed one).

Only the DRA plugin runs it (with --gpu-lending): it needs the claims prepared here to know a
GPU's owners. Fleet mode and the device plugin publish no lend views.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from prometheus_client import REGISTRY, Counter, Gauge

from dra_fake.gpu import lending
from dra_fake.gpu.lendingfile import KeptLending

if TYPE_CHECKING:
    from dra_fake.gpu.runtime import Host, NodeRuntime, NodeService, SharedPart

log = logging.getLogger(__name__)

# On the plugin's own metrics endpoint (docs/sharing.md).
LENDING_STATE = Gauge(
    "dra_fake_gpu_lending_state",
    "1 for the current idle-GPU lending state of a GPU (lendable, busy, unowned, unknown), 0 for the others.",
    ["device", "state"],
    registry=REGISTRY,
)
RECLAIMS = Counter(
    "dra_fake_gpu_reclaims",
    "Times a lent GPU was reclaimed because an owner got busy.",
    ["device"],
    registry=REGISTRY,
)


def record(gpu: str, state: str) -> None:
    for known in lending.STATES:
        LENDING_STATE.labels(device=gpu, state=known).set(1 if known == state else 0)


class Lending:
    @staticmethod
    def for_process(host: Host) -> SharedPart | None:
        return None

    @staticmethod
    def for_node(runtime: NodeRuntime) -> NodeService | None:
        settings = runtime.settings.lending
        if settings is None or runtime.node.holdings is None:
            return None
        return _Lender(runtime, settings)


class _Lender:
    def __init__(self, runtime: NodeRuntime, settings: lending.LendingSettings) -> None:
        self.runtime = runtime
        self.gpus = lending.lent_gpus(runtime.node.inventory.devices)
        self.kept = runtime.node.lending or KeptLending(settings, time.time())
        self.state = self.kept.state
        self._node_uid = ""
        runtime.on_sample(self._sample)

    def start(self) -> None:
        log.info(
            "GPU lending on",
            extra={
                "gpus": self.gpus,
                "threshold": self.state.settings.threshold,
                "idleFor": self.state.settings.idle_for,
            },
        )
        # as restored, else every lend view starts `unknown`
        self.runtime.lending_changed(self.state.taints(self.gpus))
        for gpu in self.gpus:
            record(gpu, self.state.state(gpu))

    def stop(self) -> None:
        return  # samples stop with the telemetry thread

    def _sample(self, now: float, owners: Mapping[str, lending.Owners]) -> None:
        changed = self.state.observe(now, {g: owners[g] for g in self.gpus if g in owners})
        self.kept.save()  # every sample: a restart resumes the idle runs where they stopped
        if not changed:
            return
        events = []
        for gpu, (old, new) in sorted(changed.items()):
            seen = owners[gpu]
            log.info(
                "GPU lending state changed",
                extra={"device": gpu, "from": old, "to": new, "ownerUtilization": seen.utilization},
            )
            record(gpu, new)
            if old == lending.LENDABLE and new == lending.BUSY:
                RECLAIMS.labels(device=gpu).inc()
            if (found := lending.event(gpu, new, seen, self.state.settings)) is not None:
                events.append(found)
        self.runtime.lending_changed(self.state.taints(self.gpus))
        if events:  # off the sampler's thread: the API server may be slow
            threading.Thread(target=self._post, args=(events,), name="lending-events", daemon=True).start()

    def _post(self, events: list[tuple[str, str]]) -> None:
        """Normal Node events (kubectl get events): a courtesy, never a failure."""
        from kubernetes import client

        from dra_fake.core.events import post_node_event

        node = self.runtime.node.name
        try:
            api = self.runtime.host.api()
        except Exception as exc:  # an event is a courtesy: log and go on
            log.warning("lending events not posted", extra={"node": node, "error": str(exc)})
            return
        if not self._node_uid:
            try:
                meta = client.CoreV1Api(api).read_node(node, _request_timeout=10).metadata
                self._node_uid = str(meta.uid if meta is not None else "")
            except Exception as exc:  # an event is a courtesy: log and go on
                log.warning("lending events not posted", extra={"node": node, "error": str(exc)})
                return
        for reason, message in events:
            post_node_event(
                api,
                node,
                self._node_uid,
                reason=reason,
                message=message,
                component=f"{self.runtime.settings.driver}-kubelet-plugin",
                warning=False,
            )
