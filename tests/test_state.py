"""What both drivers get from dra_fake.core.state, tested on each: start-up rollback of a
PrepareStarted claim (with its side effects undone), recovery from a corrupt checkpoint through
the CDI specs, and a failing undo reported as that claim's error."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from crash_helper import make_claim, make_state, result

from dra_fake.core.claims import ClaimError
from dra_fake.core.state import PreparedClaims
from tests.computedomainbed import FakeDomains, claim
from tests.computedomainbed import make_state as make_cd_state


@dataclass
class Driver:
    """One driver's state and a prepared claim of it, and how to see its side effects."""

    state: PreparedClaims[Any]
    claim: dict[str, Any]
    uid: str
    side_effect: Callable[[], bool]  # whether the prepared claim's side effect is in place
    break_undo: Callable[[], None]


def gpu(tmp_path: Path) -> Driver:
    state = make_state(tmp_path)  # type: ignore[no-untyped-call]
    uid = "7a777777-7777-7777-7777-777777777777"
    mig = "gpu-3-mig-1g10gb-19-0"  # dynamic MIG: "created" at prepare, destroyed on undo

    def break_undo() -> None:
        def fail(*_: object) -> None:
            raise OSError("nvidia-smi files: disk full")

        state.nvidia_smi = type("Broken", (), {"remove_info": fail, "ensure_files": lambda *_: None})()  # type: ignore[assignment]

    return Driver(
        state,
        make_claim(uid, [result("m", mig)]),  # type: ignore[no-untyped-call]
        uid,
        lambda: any(m.device == mig for m in state.dynamic_mig_devices()),  # type: ignore[attr-defined]
        break_undo,
    )


def compute_domain(tmp_path: Path) -> Driver:
    domains = FakeDomains(ready=True)
    state = make_cd_state(tmp_path, domains)

    def break_undo() -> None:
        def fail(*_: object) -> bool:
            raise ConnectionError("API server unreachable")

        domains.remove_node_label = fail  # type: ignore[method-assign]

    return Driver(state, claim(), "claim-channel-0", lambda: bool(domains.labels), break_undo)


DRIVERS = {"gpu": gpu, "compute-domain": compute_domain}


@pytest.fixture(params=DRIVERS)
def driver(request: pytest.FixtureRequest, tmp_path: Path) -> Driver:
    return DRIVERS[request.param](tmp_path)


def test_startup_rolls_back_a_prepare_started_claim_and_its_side_effects(driver: Driver) -> None:
    driver.state.prepare(driver.claim)
    assert driver.side_effect()
    data = driver.state.store.load().data
    data.claims[driver.uid].state = "PrepareStarted"  # as a crash mid-prepare leaves it
    driver.state.store.save(data)
    report = driver.state.startup()
    assert report.rolled_back == (driver.uid,)
    assert not driver.side_effect() and not driver.state.cdi.exists(driver.uid)
    assert driver.state.prepared_claims() == {}


DAMAGE = {
    "lost": lambda path: path.unlink(),
    "emptied": lambda path: path.write_bytes(b""),
    "cut-short": lambda path: path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2]),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_startup_restores_a_spec_file_a_power_cut_damaged(driver: Driver, damage: str) -> None:
    """A prepare does not fsync its spec file (the checkpoint holds the spec): after a power cut
    the file may be gone, empty or cut short while its PrepareCompleted entry survived. Startup
    compares every completed claim's file with the stored spec and rewrites it."""
    driver.state.prepare(driver.claim)
    path = driver.state.cdi.path(driver.uid)
    written = path.read_bytes()
    DAMAGE[damage](path)
    report = driver.state.startup()
    assert report.specs_restored == (driver.uid,) and report.rolled_back == ()
    assert path.read_bytes() == written
    assert driver.state.startup().specs_restored == ()  # an intact file is left alone


def test_a_corrupt_checkpoint_is_rebuilt_from_the_cdi_specs(driver: Driver) -> None:
    reports: list[str] = []
    driver.state.store._on_corrupt = reports.append
    driver.state.prepare(driver.claim)
    driver.state.store.path.write_text('{"version": 2, "checksum": "sha256:0", "data": {')
    report = driver.state.startup()
    assert reports == ["json"]
    assert report.checkpoint_status == "corrupt" and report.recovered == (driver.uid,)
    assert driver.state.prepared_claims() == {driver.uid: "PrepareStarted"}
    assert list(driver.state.store.path.parent.glob("checkpoint.json.corrupt-*"))
    driver.state.unprepare(driver.uid)  # what the recovered entry knew is enough to undo it
    assert not driver.side_effect() and not driver.state.cdi.exists(driver.uid)
    assert driver.state.prepared_claims() == {}


def test_a_failing_undo_is_that_claims_error_and_loses_nothing(driver: Driver) -> None:
    driver.state.prepare(driver.claim)
    driver.break_undo()
    with pytest.raises(ClaimError, match=f"error unpreparing devices for claim {driver.uid}"):
        driver.state.unprepare(driver.uid)
    assert driver.state.prepared_claims() == {driver.uid: "PrepareStarted"}  # retried later
    assert driver.state.cdi.exists(driver.uid)
