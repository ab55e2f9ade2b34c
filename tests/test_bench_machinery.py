"""bench/machinery.py's comparison: with / without each piece, the baseline's noise, the verdict
(computed, never written by hand), and the report's table of it."""

from __future__ import annotations

from typing import Any

from bench import machinery
from bench.machinery import BASELINE, COSTS, KEEPS, WITHIN, Piece, compare, verdict, verdicts
from bench.report import render
from dra_fake.core import trials


def fig(median: float, low: float | None = None, high: float | None = None) -> dict[str, float]:
    return {"median": median, "min": median if low is None else low, "max": median if high is None else high}


def variant(p50: float, noise: float = 0.0, **others: float) -> dict[str, Any]:
    figures = {key: fig(others.get(key, 1.0)) for key in machinery.PREPARE_FIGURES}
    figures["prepare_p50_ms"] = fig(p50, p50 * (1 - noise / 2), p50 * (1 + noise / 2))
    return figures


PIECES = (
    Piece("journal", {"DRA_FAKE_WITHOUT": "journal"}, False, "rewrites"),
    Piece("yamlwriter", {"DRA_FAKE_WITHOUT": "yamlwriter"}, False, "pyyaml"),
    Piece("entrycache", {"DRA_FAKE_WITHOUT": "entrycache"}, False, "again"),
    Piece("cpuaffinity", {"CPU_AFFINITY": "one"}, True, "pinned"),  # the baseline inherits
)


def results() -> dict[str, Any]:
    return {
        "repeat": 3,
        "baseline_cpu_affinity": "inherit",
        "storage": "disk",
        "pieces": {
            p.name: {"env": p.env, "variant_has_it": p.variant_has_it, "what": p.what} for p in PIECES
        },
        "prepare": [
            {
                "devices_per_claim": 8,
                "callers": 16,
                "variants": {
                    BASELINE: variant(10.0, noise=0.1),  # 10% run to run
                    "journal": variant(20.0),  # twice as slow without it
                    "yamlwriter": variant(10.5),  # 5% slower without it: within the noise
                    "entrycache": variant(8.0),  # faster without it
                    "cpuaffinity": variant(5.0),  # the pinned variant: twice as fast
                },
            }
        ],
        "publish": {"variants": {BASELINE: {"all_slices_visible_s": fig(0.5)}}},
    }


def test_the_verdict_needs_a_difference_larger_than_the_noise_and_knows_which_way_is_better() -> None:
    assert verdict(10.0, 20.0, 0.1, lower_is_better=True) == KEEPS
    assert verdict(10.0, 10.5, 0.1, lower_is_better=True) == WITHIN
    assert verdict(10.0, 8.0, 0.1, lower_is_better=True) == COSTS
    assert verdict(200.0, 100.0, 0.1, lower_is_better=False) == KEEPS  # a rate: higher is better
    assert verdict(1.0, 0.0, 0.1, lower_is_better=True) == WITHIN  # nothing to compare with


def test_each_piece_is_judged_on_the_figures_users_feel_against_the_baselines_noise() -> None:
    rows = compare(results(), PIECES)
    p50 = {r["piece"]: r for r in rows if r["figure"] == "prepare_p50_ms"}
    assert p50["journal"]["with"] == 10.0 and p50["journal"]["without"] == 20.0
    assert p50["journal"]["ratio_with_over_without"] == 0.5 and p50["journal"]["noise"] == 0.1
    # the pinned variant is the one with the piece: the baseline (inherit) is without it
    assert (p50["cpuaffinity"]["with"], p50["cpuaffinity"]["without"]) == (5.0, 10.0)
    assert {r["case"] for r in rows} == {"8x16"}  # no publish figure of any piece here
    assert verdicts(rows) == {
        "journal": KEEPS,
        "yamlwriter": WITHIN,
        "entrycache": COSTS,
        "cpuaffinity": KEEPS,
    }


def test_the_report_shows_the_verdicts_and_each_comparison() -> None:
    result = results()
    result["table"] = compare(result, PIECES)
    result["verdicts"] = verdicts(result["table"])
    text = render({"machine": {}, "sections": {"machinery": {"result": result, "seconds": 1.0}}})
    assert "## Machinery on trial" in text
    assert "| journal | rewrites | keeps its place |" in text
    assert "| yamlwriter | 8x16 | prepare_p50_ms * | 10.00 | 10.50 | 0.95x | 10% | within noise |" in text


def test_every_switch_of_the_plugin_and_the_pinning_is_on_trial() -> None:
    names = [p.name for p in machinery.pieces()]
    assert names == [*trials.PIECES, "cpuaffinity", "devicestatus"]


def test_each_variant_goes_first_in_turn() -> None:
    names = ["baseline", "a", "b"]
    orders = [machinery._rotated(names, r) for r in range(3)]
    assert [o[0] for o in orders] == names
    assert all(sorted(o) == sorted(names) for o in orders)


def test_a_piece_keeps_its_place_only_where_every_case_goes_its_way() -> None:
    data = results()
    first = data["prepare"][0]
    second = {
        "devices_per_claim": 1,
        "callers": 1,
        "variants": {
            BASELINE: variant(10.0, noise=0.1),
            "journal": variant(15.0),  # better with it here too: kept
            "yamlwriter": variant(10.2),
            "entrycache": variant(9.0),
            "cpuaffinity": variant(12.0),  # pinned: slower here, twice as fast in the first case
        },
    }
    data["prepare"] = [first, second]
    assert verdicts(compare(data, PIECES)) == {
        "journal": KEEPS,
        "yamlwriter": WITHIN,
        "entrycache": COSTS,  # worse with it in both cases, by more than the noise in one
        "cpuaffinity": WITHIN,  # one case beyond the noise, the other the other way
    }
