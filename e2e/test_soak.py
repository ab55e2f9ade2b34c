"""The soaks of e2e/soak.py, bounded for make test (SOAK_KILLS=25, SOAK_OUTAGES=3); make soak
runs 500 kills and 20 outages (docs/reliability.md#kill-soak)."""

from __future__ import annotations

import os

import pytest

from e2e.kube import Kube
from e2e.localcluster.cluster import LocalCluster
from e2e.soak import KillSoak
from e2e.soakoutages import ApiOutages, Leadership, overlapping

KILLS = int(os.environ.get("SOAK_KILLS", "25"))
OUTAGES = int(os.environ.get("SOAK_OUTAGES", "3"))
SEED = int(os.environ.get("SOAK_SEED", "1"))
# e2e/soak.py: SIGKILLs the harness's plugin processes and calls their DRA sockets from the test
# machine between kills; the outages stop and start the harness's kube-apiserver.
SOAK_BED = pytest.mark.needs(
    "harness",
    reason="kills the harness's plugin processes and calls their DRA sockets from the test machine "
    "(kind's are inside the node containers); the outages stop the harness's kube-apiserver",
)


@SOAK_BED
def test_sigkilled_at_random_moments_the_plugins_lose_nothing_and_leave_nothing(
    kube: Kube, harness: LocalCluster
) -> None:
    with KillSoak(harness, kube).running() as soak:
        report = soak.run(KILLS, soak.kill_plugins, "kills", seed=SEED)
    print(report.line())
    assert report.inconsistencies == [], "\n".join(report.inconsistencies)
    assert report.rounds == KILLS
    # The stream really ran: calls were answered between kills, and kills cut some off.
    assert report.calls_ok >= KILLS
    assert report.calls_cut > 0


@SOAK_BED
def test_through_api_server_outages_no_claim_is_lost_and_the_controller_has_one_leader(
    kube: Kube, harness: LocalCluster
) -> None:
    with KillSoak(harness, kube).running() as soak, ApiOutages(soak).replicas() as outages:
        report = soak.run(OUTAGES, outages.outage, "outages", seed=SEED, restarts=False)
        overlaps = outages.leader_overlaps()
    print(report.line(), f"; {outages.restarts} controller restarts after a lost lease")
    assert report.inconsistencies == [], "\n".join(report.inconsistencies)
    assert overlaps == []
    assert report.calls_ok >= OUTAGES


def test_overlapping_leaderships_are_found() -> None:
    """The leader check itself can fail."""
    a, b = Leadership("a", 0.0, 10.0), Leadership("b", 9.0, 20.0)
    assert overlapping([a, Leadership("b", 10.5, 20.0)]) == []
    assert len(overlapping([a, b])) == 1
