"""Optional leader election on a coordination.k8s.io Lease (NVIDIA: 15 s lease, 10 s renew
deadline, 2 s retry). The standby blocks in acquire(); a leader that cannot renew in time exits, so
the Deployment restarts it as a standby and the other replica takes over."""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from collections.abc import Callable

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
    def __init__(self, api: client.ApiClient, namespace: str, identity: str) -> None:
        self.coord = client.CoordinationV1Api(api)
        self.namespace = namespace
        self.identity = identity

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
        renew = spec.renew_time or spec.acquire_time
        expired = renew is None or (now - renew).total_seconds() > (
            spec.lease_duration_seconds or LEASE_SECONDS
        )
        if held_by_other and not expired:
            return False
        if spec.holder_identity != self.identity:
            spec.lease_transitions = (spec.lease_transitions or 0) + 1
            spec.acquire_time = now
        spec.holder_identity = self.identity
        spec.renew_time = now
        spec.lease_duration_seconds = LEASE_SECONDS
        try:
            self.coord.replace_namespaced_lease(LEASE_NAME, self.namespace, lease)
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
            last = _now()
            while not stop.wait(RETRY_SECONDS):
                try:
                    if self._try():
                        last = _now()
                        continue
                except Exception as err:  # a connection error must not end renewals
                    log.warning("lease renewal failed", extra={"error": str(err)})
                if (_now() - last).total_seconds() > RENEW_DEADLINE:
                    log.error(
                        "leadership lost, exiting", extra={"lease": LEASE_NAME, "identity": self.identity}
                    )
                    on_lost()
                    return

        thread = threading.Thread(target=loop, name="leader-renew", daemon=True)
        thread.start()
        return thread
