"""The kill soak's API outages (e2e/soak.py, docs/reliability.md#kill-soak): the API server stopped
for 1-12 s while the call stream runs and two ComputeDomain controller replicas compete for the
lease; afterwards, no two replicas may have led at once (from their JSON logs)."""

from __future__ import annotations

import datetime as dt
import json
import random
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from e2e.kube import poll

if TYPE_CHECKING:
    from e2e.soak import KillSoak


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
