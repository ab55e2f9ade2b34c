"""The bench's by-hand tools (python -m bench.burst, python -m bench.profile) and its report:
what they compute from their raw input. `make test` runs the bench itself only as a smoke run."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from bench.burst import kth_answers
from bench.history import ACROSS_RUNS, HISTORY, RESULTS, across_runs, history_line, read_history
from bench.profile import summarize
from bench.summary import BEGIN, PAGE, PLOT, SERIES, history_svg, latest_table, page


def test_the_kth_answer_is_averaged_over_the_bursts_of_every_repetition() -> None:
    # two repetitions of two bursts of three calls; each burst's calls in the order they were sent
    repetitions = [[0.003, 0.001, 0.002, 0.010, 0.030, 0.020], [0.002, 0.004, 0.006, 0.001, 0.002, 0.003]]
    assert [round(x, 3) for x in kth_answers(repetitions, rounds=2)] == [3.5, 7.0, 10.5]


def test_the_profile_counts_calls_being_served_inclusive_and_self(tmp_path: Path) -> None:
    raw = tmp_path / "py-spy.raw"
    raw.write_text(
        "\n".join(
            [
                # a handler: 3 samples in the state, 1 in logging
                "_worker (thread.py:1);NodePrepareResources (server.py:2);prepare (state.py:3) 3",
                "_worker (thread.py:1);NodePrepareResources (server.py:2);info (__init__.py:4) 1",
                # an idle worker and the server's loop waiting: not counted
                "_worker (thread.py:1);get (queue.py:5) 7",
                "serve_forever (server.py:6);poll (server.py:7) 9",
                "not a sample line",
            ]
        )
        + "\n"
    )
    text = summarize(raw)
    assert text.startswith("4 samples in calls being served")
    inclusive, own = text.split("self %")
    assert "100.0  NodePrepareResources server.py" in inclusive
    assert "75.0  prepare state.py" in inclusive and "25.0  info __init__.py" in inclusive
    assert "75.0  prepare state.py" in own and "NodePrepareResources" not in own
    assert "get queue.py" not in text and "poll server.py" not in text


def _run(commit: str, dirty: bool = False, **figures: Any) -> dict[str, Any]:
    return {"date_utc": "2026-12-03T15:16:32Z", "commit": commit, "dirty": dirty, **figures}


def test_across_runs_shows_the_targets_of_the_last_clean_runs_and_a_dash_for_what_one_lacks() -> None:
    full = _run(
        "18de51c392a3",
        cpu_steal_percent=0.4,
        prepare_disk_d8_c16_ours={"p50_ms": 23.83},
        prepare_disk_d8_c16_reference={"p50_ms": 20.94},
        prepare_disk_d1_c1_ours={"p50_ms": 2.92},
        prepare_disk_d1_c1_reference={"p50_ms": 4.70},
        fleet_1000_over_bare_wall=1.14,
        publish_ours_8_full_gpus={"socket_s": 0.368, "slices_s": 0.6},
        publish_ours_8_gpus_dynamic_mig={"socket_s": 0.350, "slices_s": 0.8},
        publish_reference_8_gpus={"socket_s": 0.049, "slices_s": 1.0},
        computedomain_p99_ms=733.4,
    )
    old = _run("a96f3f47", prepare_disk_d8_c16_ours={"p50_ms": 78.37})  # before most figures existed
    lines = across_runs([old, _run("dirty00", dirty=True, cpu_steal_percent=9.9), full])
    rows = [line for line in lines if line.startswith("| 2026")]
    assert len(rows) == 2  # the dirty tree's run is left out
    assert rows[0] == "| 2026-12-03T15:16 | `a96f3f4` | - | - | - | - | - | - | - | - |"
    assert rows[1] == ("| 2026-12-03T15:16 | `18de51c` | 0.4 | 0.62x | - | - | 1.14x | 1.14x | 0.368 | 733 |")


def test_across_runs_keeps_the_last_runs_only_and_nothing_without_history() -> None:
    history = [_run(f"{i:07d}", cpu_steal_percent=i) for i in range(ACROSS_RUNS + 3)]
    rows = [line for line in across_runs(history) if line.startswith("| 2026")]
    assert len(rows) == ACROSS_RUNS
    assert f"`{ACROSS_RUNS + 2:07d}`" in rows[-1] and "`0000003`" in rows[0]
    assert across_runs([]) == []


def test_across_runs_reads_the_prepare_figures_history_line_writes() -> None:
    def driver(p50_ms: float) -> dict[str, Any]:
        return {
            name: {"median": value}
            for name, value in (
                ("prepare_p50_ms", p50_ms),
                ("prepare_claims_per_s", 1.0),
                ("unprepare_p50_ms", 1.0),
                ("cpu_ms_per_claim", 1.0),
            )
        }

    case = {
        "storage": "disk",
        "devices_per_claim": 8,
        "callers": 16,
        "ours": driver(30.0),
        "reference": driver(20.0),
    }
    results = {
        "machine": {"date_utc": "2026-12-03T15:16:32Z", "git_commit": "18de51c392a3", "git_dirty": False},
        "sections": {"prepare": {"result": {"cases": [case]}}},
    }
    [row] = [line for line in across_runs([history_line(results)]) if line.startswith("| 2026")]
    assert row.split(" | ")[3:8] == ["-", "-", "-", "1.50x", "-"]


def test_docs_benchmarks_page_and_plot_are_what_bench_summary_generates_from_the_results() -> None:
    """`python -m bench.summary` (make bench runs it) regenerates both after a change."""
    latest = json.loads((RESULTS / "latest.json").read_text())
    assert PAGE.read_text() == page(PAGE.read_text(), latest), "make generate"
    assert PLOT.read_text() == history_svg(read_history(HISTORY)), "make generate"
    commit = latest["machine"]["git_commit"][:7]
    assert f"`make bench` at `{commit}`" in PAGE.read_text().split(BEGIN)[1]


def test_the_plot_draws_each_series_over_the_clean_runs_and_breaks_where_a_run_lacks_it() -> None:
    history = [
        _run("a", prepare_disk_d1_c1_ours={"p50_ms": 2.0}, prepare_disk_d1_c1_reference={"p50_ms": 1.0}),
        _run("b", dirty=True, fleet_1000_over_bare_wall=9.0),
        _run("c", fleet_1000_over_bare_wall=1.5),
        _run("d", prepare_disk_d1_c1_ours={"p50_ms": 1.0}, prepare_disk_d1_c1_reference={"p50_ms": 2.0}),
    ]
    svg = history_svg(history)
    paths = re.findall(r'<path d="([^"]*)"', svg)
    assert len(paths) == 2  # prepare 1 x 1 and fleet: the series no run measured draw nothing
    prepare, fleet = paths
    assert prepare.count("M") == 2 and "L" not in prepare  # run c lacks it: two separate points
    assert fleet.count("M") == 1 and "9.0x" not in svg  # the dirty run is left out
    assert "2.0x" in svg and "2.5x" not in svg  # the axis ends at the largest ratio, 2.0
    assert all(label in svg for label, _, _ in SERIES)


def test_the_latest_table_leaves_out_the_sections_a_run_could_not_measure() -> None:
    results = {
        "machine": {"date_utc": "2026-12-05T00:00:00Z", "git_commit": "b08682bd9edd", "git_dirty": True},
        "sections": {name: {"error": "failed", "result": None} for name in ("prepare", "fleet", "publish")},
    }
    (line,) = latest_table(results)
    assert line.startswith("`make bench` at `b08682b` (uncommitted changes), 2026-12-05 00:00 UTC")


def test_the_kwok_table_shows_both_runs_and_no_claim_rate_without_claims() -> None:
    from bench.report import render

    def figures(**values: float) -> dict[str, dict[str, float]]:
        return {k: {"median": v, "min": v, "max": v} for k, v in values.items()}

    kw = {
        "nodes": 1000,
        "gpusPerNode": 8,
        "pods": 1000,
        "dra": figures(
            createSeconds=9.5,
            podsScheduledPerSecond=9.8,
            claimsAllocatedPerSecond=9.7,
            podsRunningPerSecond=9.1,
        ),
        "plain": figures(createSeconds=8.0, podsScheduledPerSecond=40.0, podsRunningPerSecond=35.0),
    }
    text = render({"machine": {}, "sections": {"kwok": {"result": kw}}})
    rows = [line for line in text.splitlines() if line.startswith(("| dra |", "| plain |"))]
    assert rows == [
        "| dra | 9.50 [9.50-9.50] | 9.8 [9.8-9.8] | 9.7 [9.7-9.7] | 9.1 [9.1-9.1] |",
        "| plain | 8.00 [8.00-8.00] | 40.0 [40.0-40.0] | n/a | 35.0 [35.0-35.0] |",
    ]


def test_the_sharing_benchmarks_shares_fit_their_gpu_as_the_scheduler_would_allocate_them() -> None:
    """The bench writes allocations itself: 8 shares of one GPU must fit its memory capacity, or
    the run measures claims kube-scheduler could never have allocated (8 x 10Gi did not)."""
    from bench.sharing import CONFIG, SHARE_MEMORY, SHARED_GPUS, SHARES_PER_GPU, share_claim
    from dra_fake.gpu.configs import Quantity
    from dra_fake.gpu.inventory import SharesSetting, load_inventory

    inventory = load_inventory(CONFIG, "bench-shares", (), SharesSetting(None, True))
    for i in range(SHARED_GPUS):
        device = inventory.devices[f"gpu-{i}"]
        assert device.shares is not None and device.shares.kind == "memory"
        assert SHARES_PER_GPU * Quantity.parse(SHARE_MEMORY).value <= device.memory_bytes
    _, status = share_claim("c", "bench-shares", "gpu-0")
    [result] = status["status"]["allocation"]["devices"]["results"]
    assert result["consumedCapacity"] == {"memory": SHARE_MEMORY} and result["shareID"]
