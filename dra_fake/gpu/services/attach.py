"""Attach: the simulated fabric attach of a node's fabric-attached GPUs (dra_fake.gpu.attach).

The scheduler allocates a claim to such a device and waits in PreBind for the device's binding
conditions. This service watches the ResourceClaims (one informer), sees each new allocation of
this node's attachable devices, and after the GPUs' `delaySeconds` writes the outcome into the
claim's status.devices (dra_fake.gpu.claimstatus): attached (the scheduler binds the pod), failed
(it deallocates and schedules the pod again), or nothing (`hang`: it gives up at its
bindingTimeout). A claim's allocation is attempted once; a new allocation is a new attempt.

Runs in the DRA plugin only (NodeSettings.attach); fleet nodes do not simulate the attach.
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from dra_fake.core import claimstatus
from dra_fake.gpu import attach

if TYPE_CHECKING:
    from dra_fake.gpu.runtime import Host, NodeRuntime, NodeService, SharedPart

log = logging.getLogger(__name__)

CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"


class Attach:
    @staticmethod
    def for_process(host: Host) -> SharedPart | None:
        return None

    @staticmethod
    def for_node(runtime: NodeRuntime) -> NodeService | None:
        if not runtime.settings.attach or not runtime.node.inventory.attachable:
            return None
        return Attacher(runtime)


class Attacher:
    """One node's attaches: claims seen through the informer, outcomes written after the delay."""

    def __init__(self, runtime: NodeRuntime) -> None:
        self.runtime = runtime
        self.driver, self.node = runtime.settings.driver, runtime.node.name
        self.inventory = runtime.node.inventory
        self._lock = threading.Lock()
        self._handled: dict[str, str] = {}  # claim UID -> the allocation attempted
        self._attempts: dict[str, int] = {}  # claim UID -> attempts so far

    def start(self) -> None:
        from dra_fake.core.informer import lister, run_informer

        host = self.runtime.host
        call = lister(host.api(), CLAIMS)
        threading.Thread(
            target=run_informer,
            args=(host.stop, "ResourceClaim", call, {}, self._listed, self._event),
            name=f"attach-{self.node}",
            daemon=True,
        ).start()

    def stop(self) -> None:
        return  # the watch ends with the host's stop event

    def _listed(self, claims: list[dict[str, Any]]) -> None:
        for claim in claims:
            self.seen(claim)

    def _event(self, kind: str, claim: dict[str, Any]) -> None:
        if kind == "DELETED":
            with self._lock:
                uid = claim["metadata"]["uid"]
                self._handled.pop(uid, None)
                self._attempts.pop(uid, None)
            return
        self.seen(claim)

    def results(self, claim: dict[str, Any]) -> list[dict[str, Any]]:
        """The claim's allocation results on this node's attachable devices that wait for an attach."""
        allocation = (claim.get("status") or {}).get("allocation") or {}
        return [
            r
            for r in (allocation.get("devices") or {}).get("results") or []
            if r.get("driver") == self.driver
            and r.get("pool") == self.node
            and attach.has_binding_conditions(r)
            and self.inventory.attach_of(r["device"]) is not None
        ]

    def seen(self, claim: dict[str, Any]) -> float | None:
        """A claim as the informer saw it: a new allocation waiting for an attach is scheduled
        (returns its delay); anything else is ignored (None)."""
        results = self.results(claim)
        if not results:
            return None
        uid = claim["metadata"]["uid"]
        allocation = claim["status"]["allocation"]
        marker = allocation.get("allocationTimestamp") or repr(sorted(r["device"] for r in results))
        if self._reported(claim, results):
            with self._lock:
                self._handled[uid] = marker  # reported before this process started
            return None
        with self._lock:
            if self._handled.get(uid) == marker:
                return None
            self._handled[uid] = marker
            attempt = self._attempts[uid] = self._attempts.get(uid, 0) + 1
        configs = [c for r in results if (c := self.inventory.attach_of(r["device"])) is not None]
        delay = max(c.delay_seconds for c in configs)
        result = min((attach.outcome(c, uid, attempt) for c in configs), key=attach.OUTCOMES.index)
        asked = (claim["metadata"].get("annotations") or {}).get(attach.ANNOTATION_OUTCOME)
        if asked in attach.OUTCOMES:
            result = next(o for o in attach.OUTCOMES if o == asked)
        elif asked is not None:
            log.warning(
                "ignoring an unknown attach outcome",
                extra={"claim": _name(claim), "annotation": attach.ANNOTATION_OUTCOME, "value": asked},
            )
        log.info(
            "attaching",
            extra={"claim": _name(claim), "attempt": attempt, "delay": delay, "outcome": result},
        )
        timer = threading.Timer(delay, self._report, (claim, results, result, attempt, marker))
        timer.daemon = True
        timer.start()
        return delay

    def _reported(self, claim: dict[str, Any], results: list[dict[str, Any]]) -> bool:
        keys = {claimstatus.key(claimstatus.entry(r)) for r in results}
        for e in (claim.get("status") or {}).get("devices") or []:
            if claimstatus.key(e) in keys and any(
                c.get("type") in (attach.ATTACHED, attach.ATTACH_FAILED) for c in e.get("conditions") or []
            ):
                return True
        return False

    def _report(
        self,
        claim: dict[str, Any],
        results: list[dict[str, Any]],
        result: attach.Outcome,
        attempt: int,
        marker: str,
    ) -> None:
        if self.runtime.host.stop.is_set():
            return
        with self._lock:
            if self._handled.get(claim["metadata"]["uid"]) != marker:
                return  # deallocated or deleted meanwhile
        conditions = attach.conditions(result, self.node, attempt)
        if not conditions:
            log.info("attach never reports (hang)", extra={"claim": _name(claim)})
            return
        entries = claimstatus.with_conditions(map(claimstatus.entry, results), conditions, claim)
        try:
            claimstatus.apply(
                self.runtime.host.api(), claim, claimstatus.merged(entries, claim, self.driver), self.driver
            )
        except Exception as err:  # deallocated meanwhile (422), deleted (404), the API server away
            log.warning("could not report the attach", extra={"claim": _name(claim), "error": str(err)[:300]})
            return
        log.info("attach reported", extra={"claim": _name(claim), "outcome": result, "attempt": attempt})


def _name(claim: dict[str, Any]) -> str:
    meta = claim["metadata"]
    return f"{meta.get('namespace')}/{meta.get('name')}"
