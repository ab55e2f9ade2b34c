"""dra_fake.core.retry: the one retry helper; nothing it runs may end a loop silently."""

from __future__ import annotations

import threading

import pytest

from dra_fake.core import retry
from dra_fake.core.retry import Backoff, run_forever, with_backoff


def test_backoff_doubles_up_to_its_limit_and_resets() -> None:
    backoff = Backoff(initial=0.5, limit=3.0)
    assert [backoff.next() for _ in range(5)] == [0.5, 1.0, 2.0, 3.0, 3.0]
    backoff.reset()
    assert backoff.next() == 0.5


def test_with_backoff_retries_any_exception_until_success(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry, "Backoff", lambda limit: Backoff(initial=0.001, limit=limit))
    outcomes: list[BaseException | str] = [ConnectionError("refused"), KeyError("bug"), "ok"]

    def attempt() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    assert with_backoff("attempt", attempt, threading.Event(), limit=0.001) == "ok"
    assert outcomes == []


def test_with_backoff_raises_the_last_error_once_stopped() -> None:
    stop = threading.Event()
    stop.set()

    def attempt() -> None:
        raise ConnectionError("refused")

    with pytest.raises(ConnectionError, match="refused"):
        with_backoff("attempt", attempt, stop)


def test_run_forever_survives_failing_steps_and_ends_only_with_stop() -> None:
    stop = threading.Event()
    calls: list[int] = []

    wake = threading.Event()

    def step() -> None:
        calls.append(1)
        if len(calls) >= 4:
            stop.set()
        wake.set()  # no pause before the next attempt: the loop must outlive the failures itself
        raise RuntimeError("step failed")

    worker = threading.Thread(target=run_forever, args=("step", step, stop, 60.0, wake))
    worker.start()
    worker.join(timeout=10)
    assert not worker.is_alive()
    assert len(calls) == 4
