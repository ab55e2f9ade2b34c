"""Group commit: callers that queue for the node lock while another holds it are served together.

Every prepare and unprepare writes the checkpoint under the node lock (dra_fake.core.locking), and
a durable write costs an fsync whatever it holds. When the kubelet prepares many claims at once
(a job's pods landing on one node), callers queue here; whoever takes the lock next runs every
queued item in one batch, so N concurrent callers share one checkpoint write per step instead of
paying N. A lone caller is a batch of one: the sequence of files on disk for a claim is the same
either way (docs/prepare.md#group-commit).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from dra_fake.core.locking import LockTimeoutError, NodeSerializer

T = TypeVar("T")


@dataclass(eq=False)  # compared by identity
class Slot(Generic[T]):
    """One caller's item; the batch runner marks it done (its outcome lives in the item)."""

    item: T
    done: bool = False


class GroupCommit(Generic[T]):
    """`submit(item)` returns once `run` has processed a batch holding `item`, under the node lock.

    `run(items)` records each item's outcome in the item itself. If it raises, the exception is
    re-raised to every caller of that batch (their items' outcomes are then undefined)."""

    def __init__(self, serializer: NodeSerializer, run: Callable[[list[T]], None]) -> None:
        self._serializer = serializer
        self._run = run
        self._queue: list[Slot[T]] = []
        self._queue_lock = threading.Lock()
        self._failures: dict[int, BaseException] = {}  # id(slot) -> the batch's exception

    def submit(self, item: T) -> None:
        slot = Slot(item)
        with self._queue_lock:
            self._queue.append(slot)
        try:
            with self._serializer.in_process() as remaining:
                # The batch that takes a slot runs under this mutex: holding it now, either our
                # slot's batch is over, or nobody took the slot yet and we lead the next batch.
                if not slot.done:
                    self._lead(slot, remaining)
        except LockTimeoutError:
            with self._queue_lock:  # not run: nobody may run it after we reported the timeout
                if slot in self._queue:
                    self._queue.remove(slot)
            raise
        failure = self._failures.pop(id(slot), None)
        if failure is not None:
            raise failure

    def _lead(self, slot: Slot[T], remaining: float) -> None:
        with self._queue_lock:
            batch, self._queue = self._queue, []
        try:
            with self._serializer.across_processes(remaining):
                self._run([s.item for s in batch])
        except BaseException as exc:
            for s in batch:
                if s is not slot:
                    self._failures[id(s)] = exc
            raise
        finally:
            for s in batch:
                s.done = True
