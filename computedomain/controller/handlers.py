"""kopf wiring: which events call which Reconciler step. Errors become Warning events on the
ComputeDomain (kopf posts handler failures; we post our own reasons too)."""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterator
from typing import Any

import kopf
from kubernetes.client.exceptions import ApiException

from computedomain.api import FINALIZER, GROUP, PLURAL, VERSION
from computedomain.controller.reconcile import HANDLER_WORKERS, ForeignObject, NotDoneYet, Reconciler

PREFIX = "computedomain.dra-fake.dev"
# The API client's kept-alive connections: the handler threads and the reconciler's threads for a
# handler's second request (Reconciler.ensure), the status sync's three watches, its worker and
# resync, the orphan cleanup and the leader's renewal. A pool smaller than the threads using it at
# once opens a TLS connection for a request and drops it after (seen in a burst of 200 domains:
# "Connection pool is full, discarding connection"). (Requests on DirectJson's connections, one per
# thread, do not take from it; the pool serves the rest, and every request when DirectJson cannot.)
API_CONNECTIONS = 2 * HANDLER_WORKERS + 8

log = logging.getLogger(__name__)


class RetryForever:
    """kopf's delays between retries of a transient API error (connection refused, 5xx, 403
    during upgrades, 429): kopf's own first, then every 30 s, never giving up. kopf's default gives
    up after 54 s and the controller exits; client-go's informers retry forever, and an API server
    that restarts for minutes must not end the controller (found by make soak)."""

    FIRST = (1.0, 1.0, 2.0, 3.0, 5.0, 8.0, 13.0, 21.0)
    LIMIT = 30.0

    def __iter__(self) -> Iterator[float]:  # a fresh sequence for every request
        return itertools.chain(self.FIRST, itertools.repeat(self.LIMIT))


class NoDiffBase(kopf.DiffBaseStorage):
    """No "last handled" copy of each ComputeDomain: no handler here reacts to a change of one (the
    objects are made once, the status follows the daemons), and storing it cost a PATCH of every
    new domain (a fifth of the writes of a burst of creates, each echoed by a watch event). kopf
    then sees every event of a live domain as its creation; the create handler only takes over
    domains `first_seen` failed on (its `when` filter), so nothing runs twice."""

    def build(self, *, body: kopf.Body, extra_fields: Any = None) -> kopf.BodyEssence:
        return kopf.BodyEssence()  # nothing compares it: kopf's deep copy of each event is waste

    def fetch(self, *, body: kopf.Body) -> None:
        return None

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        pass


def configure(settings: kopf.OperatorSettings) -> None:
    """The CD's finalizer is NVIDIA's; kopf's progress of a failing handler lives in annotations
    (the CRD's status schema has no room for kopf's own fields)."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=PREFIX)
    settings.persistence.diffbase_storage = NoDiffBase()
    settings.posting.level = logging.WARNING
    settings.networking.error_backoffs = RetryForever()
    # No watch on CustomResourceDefinitions (kopf would retry a 403 forever otherwise): the
    # ComputeDomain CRD is resolved once at start-up, so it must exist before the controller starts
    # (helm installs crds/ first; so does the local cluster). Least privilege: no CRD rights.
    settings.scanning.disabled = True
    # Handlers are synchronous (API calls): kopf runs them in a thread pool, by default of
    # min(32, CPUs + 4) threads; ComputeDomains created in a burst wait on each other's requests.
    settings.execution.max_workers = HANDLER_WORKERS
    settings.watching.server_timeout = 120
    settings.watching.client_timeout = 150


def _as_dict(body: Any) -> dict[str, Any]:
    return {
        "metadata": dict(body["metadata"]),
        "spec": dict(body.get("spec") or {}),
        "status": dict(body.get("status") or {}),
    }


ENSURE_INTERVAL = 30.0  # seconds between re-ensures of a ComputeDomain's objects (someone deleted one)


def build_registry(
    reconciler: Reconciler, on_created: Any = None, ensure_interval: float = ENSURE_INTERVAL
) -> kopf.OperatorRegistry:
    """Objects made when a domain is first seen (a create handler retries what failed), a delete
    handler, and a slow timer that recreates deleted objects. The status is not here:
    computedomain.controller.statussync keeps it from watches."""
    registry = kopf.OperatorRegistry()

    @kopf.on.login(registry=registry)
    def login(**kwargs: Any) -> Any:
        return kopf.login_with_kubeconfig(**kwargs) or kopf.login_with_service_account(**kwargs)

    failed: set[str] = set()  # UIDs `first_seen` could not make the objects of, until made or deleted

    @kopf.on.event(GROUP, VERSION, PLURAL, registry=registry)
    def first_seen(body: kopf.Body, **kwargs: Any) -> None:
        """A ComputeDomain the watch has just seen created (or listed, at start) gets its objects
        in this cycle, before kopf adds the finalizer, instead of a cycle later: under a burst the
        finalizer's PATCH and its watch event queue behind every other write. Whatever fails is
        left to the create handler (which reports and retries); a domain deleted before its
        finalizer came leaves objects the orphan cleanup removes."""
        cd = _as_dict(body)
        kind, uid = kwargs.get("type"), cd["metadata"]["uid"]
        if kind == "DELETED":
            failed.discard(uid)
        if kind not in ("ADDED", None) or cd["metadata"].get("deletionTimestamp"):  # None: a listing
            return
        try:
            reconciler.ensure(cd, new=kind == "ADDED")
        except Exception as err:
            log.info("objects not created yet", extra={"computeDomain": uid, "error": str(err)})
            failed.add(uid)
            return
        if on_created is not None:
            on_created()

    def first_seen_failed(body: kopf.Body, **_: Any) -> bool:
        return body.metadata.uid in failed

    @kopf.on.create(GROUP, VERSION, PLURAL, when=first_seen_failed, registry=registry)
    def ensure(body: kopf.Body, **_: Any) -> None:  # never for a domain being deleted (kopf's cause)
        cd = _as_dict(body)
        try:
            created = reconciler.ensure(cd)
        except ForeignObject as err:
            # Once, not every retry: only a person can resolve it; the ensure timer then creates ours.
            kopf.warn(body, reason="ReconcileFailed", message=str(err))
            failed.discard(cd["metadata"]["uid"])
            raise kopf.PermanentError(str(err)) from err
        except ApiException as err:
            message = f"{err.status} {err.reason}: {err.body}"
            kopf.warn(body, reason="ReconcileFailed", message=message)
            raise kopf.TemporaryError(message, delay=2) from err
        failed.discard(cd["metadata"]["uid"])
        for what in created:
            kopf.info(body, reason="Created", message=f"created {what}")
        if on_created is not None:
            on_created()

    @kopf.timer(
        GROUP, VERSION, PLURAL, interval=ensure_interval, initial_delay=ensure_interval, registry=registry
    )
    def reensure(body: kopf.Body, **_: Any) -> None:
        cd = _as_dict(body)
        if cd["metadata"].get("deletionTimestamp"):
            return
        with contextlib.suppress(ForeignObject):  # reported once, by the create handler
            reconciler.ensure(cd)  # recreate what someone deleted

    @kopf.on.delete(GROUP, VERSION, PLURAL, registry=registry)
    def delete(body: kopf.Body, **_: Any) -> None:
        try:
            reconciler.delete(_as_dict(body))
        except NotDoneYet as err:
            raise kopf.TemporaryError(str(err), delay=1) from err
        except ApiException as err:
            kopf.warn(body, reason="DeleteFailed", message=f"{err.status} {err.reason}")
            raise kopf.TemporaryError(f"{err.status} {err.reason}", delay=2) from err

    return registry
