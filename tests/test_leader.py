"""Leader election of the ComputeDomain controller judges expiry on its own clock (as client-go does)
and never stops renewing because of a connection error."""

from __future__ import annotations

import copy
import datetime as dt
import threading

import pytest
import urllib3
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from computedomain.controller import leader
from computedomain.controller.leader import LEASE_SECONDS, LeaderElector


class FakeCoordination:
    """One Lease with optimistic concurrency (resourceVersion), as the API server keeps it."""

    def __init__(self) -> None:
        self.lease: client.V1Lease | None = None
        self.version = 0
        self.fail: Exception | None = None

    def read_namespaced_lease(self, name: str, namespace: str) -> client.V1Lease:
        if self.fail:
            raise self.fail
        if self.lease is None:
            raise ApiException(status=404)
        return copy.deepcopy(self.lease)

    def create_namespaced_lease(self, namespace: str, body: client.V1Lease) -> client.V1Lease:
        if self.lease is not None:
            raise ApiException(status=409)
        return self._store(body)

    def replace_namespaced_lease(self, name: str, namespace: str, body: client.V1Lease) -> client.V1Lease:
        if self.fail:
            raise self.fail
        if body.metadata.resource_version != str(self.version):
            raise ApiException(status=409)
        return self._store(body)

    def _store(self, body: client.V1Lease) -> client.V1Lease:
        self.version += 1
        self.lease = copy.deepcopy(body)
        self.lease.metadata.resource_version = str(self.version)
        return copy.deepcopy(self.lease)

    def renew_as(self, holder: str, renew_time: dt.datetime) -> None:
        """The holder (another replica, with its own clock) renews."""
        assert self.lease is not None
        self.lease.spec.holder_identity = holder
        self.lease.spec.renew_time = renew_time
        self.version += 1
        self.lease.metadata.resource_version = str(self.version)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def elector(coord: FakeCoordination, identity: str, clock: Clock) -> LeaderElector:
    e = LeaderElector(client.ApiClient(), "dra-fake", identity, clock=clock)
    e.coord = coord  # type: ignore[assignment]
    return e


def held_by_a(coord: FakeCoordination) -> None:
    a = elector(coord, "a", Clock())
    assert a._try()
    assert coord.lease is not None and coord.lease.spec.holder_identity == "a"


def test_a_standby_whose_clock_runs_ahead_does_not_steal_a_renewed_lease() -> None:
    coord = FakeCoordination()
    held_by_a(coord)
    clock = Clock()
    b = elector(coord, "b", clock)
    an_hour_ago = dt.datetime.now(dt.UTC) - dt.timedelta(hours=1)  # a's clock lags b's by an hour
    for tick in range(20):
        coord.renew_as("a", an_hour_ago + dt.timedelta(seconds=2 * tick))
        clock.now += 2
        assert not b._try(), f"b took a live lease at tick {tick}"
    assert coord.lease is not None and coord.lease.spec.holder_identity == "a"


def test_a_standby_takes_over_a_lease_unchanged_for_a_lease_duration_of_its_own_clock() -> None:
    coord = FakeCoordination()
    held_by_a(coord)
    coord.renew_as("a", dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))  # a's clock runs ahead
    clock = Clock()
    b = elector(coord, "b", clock)
    assert not b._try()  # first sight: the lease counts as fresh
    clock.now += LEASE_SECONDS
    assert not b._try()  # not yet more than a duration
    clock.now += 0.5
    assert b._try()
    assert coord.lease is not None
    assert coord.lease.spec.holder_identity == "b"
    assert coord.lease.spec.lease_transitions == 1


def test_two_standbys_racing_for_an_expired_lease_get_one_leader() -> None:
    coord = FakeCoordination()
    held_by_a(coord)
    clock = Clock()
    b, c = elector(coord, "b", clock), elector(coord, "c", clock)
    assert not b._try() and not c._try()
    clock.now += LEASE_SECONDS + 1
    read_by_c = coord.read_namespaced_lease("", "")  # c reads, then b writes first
    assert b._try()
    c.coord.read_namespaced_lease = lambda name, namespace: read_by_c  # type: ignore[method-assign]
    assert not c._try()  # its write carries the old resourceVersion: 409
    assert coord.lease is not None and coord.lease.spec.holder_identity == "b"


def test_renewal_survives_connection_errors_and_gives_up_after_the_renew_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(leader, "RETRY_SECONDS", 0.001)
    coord = FakeCoordination()
    clock = Clock()
    a = elector(coord, "a", clock)
    assert a._try()
    coord.fail = urllib3.exceptions.ProtocolError("connection reset")
    lost = threading.Event()
    calls = 0

    def advance() -> float:
        nonlocal calls
        calls += 1
        clock.now += 0.5
        return clock.now

    a.clock = advance
    stop = threading.Event()
    thread = a.keep(stop, on_lost=lost.set)
    assert lost.wait(10), "the renew loop neither recovered nor gave up"
    thread.join(5)
    assert not thread.is_alive()
    assert calls > 2, "it gave up without retrying"
    stop.set()


def test_renewal_recovers_when_the_api_server_comes_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(leader, "RETRY_SECONDS", 0.001)
    coord = FakeCoordination()
    a = elector(coord, "a", Clock())
    assert a._try()
    coord.fail = urllib3.exceptions.ProtocolError("connection reset")
    lost = threading.Event()
    stop = threading.Event()
    thread = a.keep(stop, on_lost=lost.set)
    version = coord.version
    coord.fail = None  # within the deadline: the clock does not move
    deadline = threading.Event()
    for _ in range(1000):
        if coord.version > version:
            break
        deadline.wait(0.01)
    stop.set()
    thread.join(5)
    assert coord.version > version, "no renewal after the outage"
    assert not lost.is_set()
