"""Optional leader election on a coordination.k8s.io Lease (NVIDIA: 15 s lease, 10 s renew
deadline, 2 s retry). The standby blocks in acquire(); a leader that cannot renew in time exits, so
the Deployment restarts it as a standby and the other replica takes over.

Expiry is judged on this process's own clock, as client-go's leaderelection does: a standby notes
when it last saw the Lease record change and takes over only once it has stayed unchanged for a
whole lease duration. Comparing the holder's renewTime with the local clock would let a standby
whose clock runs ahead steal a live lease (two leaders), or one whose clock lags wait forever.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

log = logging.getLogger("computedomain.leader")

LEASE_NAME = "compute-domain-controller"
LEASE_SECONDS = 15
RENEW_DEADLINE = 10.0
RETRY_SECONDS = 2.0


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


class LeaderElector:
    def __init__(
        self,
        api: client.ApiClient,
        namespace: str,
        identity: str,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.coord = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.identity = identity
        self.clock = clock
        self._observed: tuple[Any, ...] | None = None  # the Lease record as last read
        self._observed_at = 0.0  # when it last changed, on self.clock

    def _observe(self, spec: client.V1LeaseSpec) -> float:
        """Seconds since the Lease record last changed, as seen from here."""
        record = (spec.holder_identity, spec.renew_time, spec.acquire_time, spec.lease_transitions)
        if record != self._observed:
            self._observed, self._observed_at = record, self.clock()
        return self.clock() - self._observed_at

    def _try(self) -> bool:
        now = _now()
        try:
            lease = self.coord.read_namespaced_lease(LEASE_NAME, self.namespace)
        except ApiException as err:
            if err.status != 404:
                raise
            body = client.V1Lease(
                metadata=client.V1ObjectMeta(name=LEASE_NAME, namespace=self.namespace),
                spec=client.V1LeaseSpec(
                    holder_identity=self.identity,
                    lease_duration_seconds=LEASE_SECONDS,
                    acquire_time=now,
                    renew_time=now,
                    lease_transitions=0,
                ),
            )
            try:
                self.coord.create_namespaced_lease(self.namespace, body)
                return True
            except ApiException as create_err:
                if create_err.status == 409:
                    return False
                raise
        spec = lease.spec or client.V1LeaseSpec()
        lease.spec = spec
        held_by_other = spec.holder_identity not in (None, "", self.identity)
        unchanged_for = self._observe(spec)
        if held_by_other and unchanged_for <= (spec.lease_duration_seconds or LEASE_SECONDS):
            return False
        if spec.holder_identity != self.identity:
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
            spec.acquire_time = now
        spec.holder_identity = self.identity
        spec.renew_time = now
        spec.lease_duration_seconds = LEASE_SECONDS
        try:
            written = self.coord.replace_namespaced_lease(LEASE_NAME, self.namespace, lease)
            self._observe(written.spec or spec)
            return True
        except ApiException as err:
            if err.status == 409:
                return False
            raise

    def acquire(self, stop: threading.Event) -> bool:
        log.info("waiting for leadership", extra={"lease": LEASE_NAME, "identity": self.identity})
        while not stop.is_set():
            try:
                if self._try():
                    log.info("became leader", extra={"lease": LEASE_NAME, "identity": self.identity})
                    return True
            except Exception as err:  # a connection error must not end the wait
                log.warning("lease check failed, retrying", extra={"error": str(err)})
            stop.wait(RETRY_SECONDS)
        return False

    def keep(
        self, stop: threading.Event, on_lost: Callable[[], None] = lambda: os._exit(1)
    ) -> threading.Thread:
        def loop() -> None:
            last = self.clock()
            while not stop.wait(RETRY_SECONDS):
                try:
                    if self._try():
                        last = self.clock()
                        continue
                except Exception as err:  # a connection error must not end renewals
                    log.warning("lease renewal failed", extra={"error": str(err)})
                if self.clock() - last > RENEW_DEADLINE:
                    log.error(
                        "leadership lost, exiting", extra={"lease": LEASE_NAME, "identity": self.identity}
                    )
                    on_lost()
                    return

        thread = threading.Thread(target=loop, name="leader-renew", daemon=True)
        thread.start()
        return thread
