"""bench/machinery.py's comparison: with / without each piece per case, the paired repetitions
and the verdict computed from them (never written by hand), and the report's tables of them."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from bench import machinery
from bench.common import spread
from bench.machinery import BASELINE, COSTS, KEEPS, WITHIN, Piece, compare, paired, sign_test, verdicts
from bench.report import render
from dra_fake.core import trials

PIECES = (
    Piece("journal", {"DRA_FAKE_WITHOUT": "journal"}, False, "rewrites"),
    Piece("yamlwriter", {"DRA_FAKE_WITHOUT": "yamlwriter"}, False, "pyyaml"),
    Piece("entrycache", {"DRA_FAKE_WITHOUT": "entrycache"}, False, "again"),
    Piece("cpuaffinity", {"CPU_AFFINITY": "one"}, True, "pinned"),  # the baseline inherits
)


def variant(p50s: Sequence[float], **others: Sequence[float]) -> dict[str, Any]:
    """A variant's repetitions: prepare p50 as given, every other figure 1.0 unless given."""
    reps = [
        {key: others.get(key, [1.0] * len(p50s))[i] for key in machinery.PREPARE_FIGURES}
        | {"prepare_p50_ms": p50}
        for i, p50 in enumerate(p50s)
    ]
    return {"repetitions": reps, **spread(reps)}


def case(devices: int, callers: int, **variants: Sequence[float]) -> dict[str, Any]:
    return {
        "devices_per_claim": devices,
        "callers": callers,
        "variants": {name: variant(p50s) for name, p50s in variants.items()},
    }


# The machine's speed swings by a factor of three between repetitions, the same for every
# variant of one repetition (they ran one after the other).
SWING = (10.0, 30.0, 12.0)


def scaled(factor: float) -> list[float]:
    return [factor * s for s in SWING]


def results(cases: int = 4) -> dict[str, Any]:
    return {
        "repeat": 3,
        "baseline_cpu_affinity": "inherit",
        "storage": "disk",
        "pieces": {
            p.name: {"env": p.env, "variant_has_it": p.variant_has_it, "what": p.what} for p in PIECES
        },
        "prepare": [
            case(
                d,
                c,
                **{
                    BASELINE: scaled(1.0),
                    "journal": scaled(1.2),  # 20% slower without it in every repetition
                    "yamlwriter": [10.5, 29.0, 12.5],  # either way: within the noise
                    "entrycache": scaled(0.9),  # faster without it
                    "cpuaffinity": scaled(0.5),  # the pinned variant: twice as fast
                },
            )
            for d, c in [(1, 1), (1, 16), (8, 1), (8, 16)][:cases]
        ],
    }


def test_the_sign_test_is_the_chance_of_that_many_fair_coin_flips() -> None:
    assert sign_test(12, 12) == 1 / 4096
    assert sign_test(10, 12) == pytest.approx(79 / 4096)  # 0.019: at the threshold
    assert sign_test(9, 12) > machinery.ALPHA
    assert sign_test(0, 5) == 1.0 and sign_test(0, 0) == 1.0


def test_each_repetition_pairs_a_variant_with_the_baseline_it_ran_beside() -> None:
    rows = {(r["piece"], r["figure"]): r for r in paired(results(), PIECES)}
    journal = rows[("journal", "prepare_p50_ms")]
    assert (journal["where"], journal["pairs"], journal["better"], journal["worse"]) == ("prepare", 12, 12, 0)
    assert journal["median_ratio"] == pytest.approx(1 / 1.2, abs=1e-3)
    # the pinned variant is the one with the piece: the baseline (inherit) is without it
    assert rows[("cpuaffinity", "prepare_p50_ms")]["median_ratio"] == 0.5
    assert rows[("entrycache", "prepare_p50_ms")]["worse"] == 12
    # figures equal with and without count as neither: every other figure is 1.0 here
    assert (
        rows[("journal", "cpu_ms_per_claim")]["better"],
        rows[("journal", "cpu_ms_per_claim")]["worse"],
    ) == (0, 0)


def test_a_steady_difference_smaller_than_the_machines_swing_still_decides() -> None:
    """The case's medians differ by 20% while its repetitions spread by 167%: a rule on the
    medians against their noise calls it within noise; the pairs see it every time."""
    rows = compare(results(), PIECES)
    p50 = next(r for r in rows if r["piece"] == "journal" and r["figure"] == "prepare_p50_ms")
    assert p50["noise"] == pytest.approx(1.667, abs=1e-3) and p50["ratio_with_over_without"] == pytest.approx(
        0.833, abs=1e-3
    )
    assert verdicts(paired(results(), PIECES)) == {
        "journal": KEEPS,
        "yamlwriter": WITHIN,  # better in 8 of 12
        "entrycache": COSTS,
        "cpuaffinity": KEEPS,
    }


def test_too_few_pairs_decide_nothing() -> None:
    """One case of three repetitions: even three of three is what a coin gives one time in eight."""
    assert set(verdicts(paired(results(cases=1), PIECES)).values()) == {WITHIN}


def test_only_figures_users_feel_decide() -> None:
    data = results()
    for c in data["prepare"]:  # journal: p50 the same, CPU per claim halved with it
        c["variants"]["journal"] = variant(scaled(1.0), cpu_ms_per_claim=[2.0, 2.0, 2.0])
    assert verdicts(paired(data, PIECES))["journal"] == WITHIN


def test_a_piece_better_on_one_felt_figure_and_worse_on_another_is_within_noise() -> None:
    data = results()
    for c in data["prepare"]:  # without the journal: p50 slower, p99 faster
        c["variants"]["journal"] = variant(scaled(1.2), prepare_p99_ms=[0.5, 0.5, 0.5])
    assert verdicts(paired(data, PIECES))["journal"] == WITHIN


def test_the_report_shows_the_verdicts_the_pairs_and_each_comparison() -> None:
    result = results()
    result["table"] = compare(result, PIECES)
    result["paired"] = paired(result, PIECES)
    result["verdicts"] = verdicts(result["paired"])
    text = render({"machine": {}, "sections": {"machinery": {"result": result, "seconds": 1.0}}})
    assert "## Machinery on trial" in text
    assert "| journal | rewrites | keeps its place |" in text
    assert "| journal | prepare | prepare_p50_ms * | 12 / 0 of 12 | 0.83x | 0.000 |" in text
    assert "| yamlwriter | 8x16 | prepare_p50_ms * | 12.00 | 12.50 | 0.96x | 167% |" in text


def test_every_switch_of_the_plugin_and_the_pinning_is_on_trial() -> None:
    names = [p.name for p in machinery.pieces()]
    assert names == [*trials.PIECES, "cpuaffinity", "devicestatus"]


def test_each_variant_goes_first_in_turn() -> None:
    names = ["baseline", "a", "b"]
    orders = [machinery._rotated(names, r) for r in range(3)]
    assert [o[0] for o in orders] == names
    assert all(sorted(o) == sorted(names) for o in orders)
