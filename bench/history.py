"""bench/results/history.jsonl: one line per full run of `make bench` (its headline medians), and
the table of the figures with a target across the last runs (bench/report.py prints it)."""

# ruff: noqa: E501  (table rows and prose of the report)

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
HISTORY = RESULTS / "history.jsonl"  # one line per full run of make bench (history_line)


def table(header: str) -> list[str]:
    """A Markdown table's header (its columns joined by " | ") and separator lines."""
    return [f"| {header} |", "|" + " --- |" * (header.count(" | ") + 1)]


ACROSS_RUNS = 10  # lines of history.jsonl shown
PREPARE_CASES = ((1, 1), (1, 16), (8, 1), (8, 16))  # (devices per claim, callers)


def prepare_key(storage: str, devices_per_claim: int, callers: int) -> str:
    """A prepare case's key in history.jsonl (then `_ours` / `_reference`)."""
    return f"prepare_{storage}_d{devices_per_claim}_c{callers}"


def _p50_ratio(line: dict[str, Any], devices_per_claim: int, callers: int) -> str:
    key = prepare_key("disk", devices_per_claim, callers)
    ours, ref = line.get(f"{key}_ours"), line.get(f"{key}_reference")
    if not ours or not ref or not ref.get("p50_ms"):
        return "-"
    return f"{ours['p50_ms'] / ref['p50_ms']:.2f}x"


def _socket_s(line: dict[str, Any]) -> str:
    """The slower of our two start-ups (8 GPUs, 8 GPUs with dynamic MIG) to the socket."""
    times = [
        r["socket_s"]
        for name, r in line.items()
        if name.startswith("publish_ours_") and isinstance(r, dict) and "socket_s" in r
    ]
    return f"{max(times):.3f}" if times else "-"


def _or_dash(value: Any, fmt: str = "{}") -> str:
    return "-" if value is None else fmt.format(value)


def across_runs(history: list[dict[str, Any]]) -> list[str]:
    """The figures with a target in the last runs from clean trees: one run's ratio moves with the
    machine's hour (docs/benchmarks/history.md#fourteenth-round-what-the-state-costs-a-burst), so read it beside the runs before."""
    lines = [h for h in history if not h.get("dirty")][-ACROSS_RUNS:]
    if not lines:
        return []
    out = [
        "",
        "## Across runs",
        "",
        f"The figures with a target in the last {len(lines)} runs of `make bench` from clean trees "
        "([history.jsonl](history.jsonl), this run last): prepare p50 on disk, ours / reference (the "
        "ratio of the medians; target at most 1.0x), devices per claim x callers; fleet mode at 1000 "
        "nodes / the bare client (at most 1.25x); the slower of our two start-ups to the registration "
        "socket (at most 0.5 s); 200 ComputeDomains, p99 create -> objects (at most 1000 ms). "
        "`-`: not measured by that run.",
        "",
        *table(
            "date (UTC) | commit | CPU steal % | prepare 1 x 1 | 1 x 16 | 8 x 1 | 8 x 16 | "
            "fleet 1000 / bare | start -> socket s | 200 CDs p99 ms"
        ),
    ]
    for h in lines:
        prepare = " | ".join(_p50_ratio(h, *case) for case in PREPARE_CASES)
        out.append(
            f"| {str(h.get('date_utc', ''))[:16]} | `{str(h.get('commit') or '')[:7]}` "
            f"| {_or_dash(h.get('cpu_steal_percent'))} | {prepare} "
            f"| {_or_dash(h.get('fleet_1000_over_bare_wall'), '{:.2f}x')} | {_socket_s(h)} "
            f"| {_or_dash(h.get('computedomain_p99_ms'), '{:.0f}')} |"
        )
    return out


def read_history(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def history_line(results: dict[str, Any]) -> dict[str, Any]:
    """One line of bench/results/history.jsonl: when, which commit, the load, and the headline
    medians of each section (a regression shows as a jump between lines)."""
    m, sections = results["machine"], results["sections"]
    line: dict[str, Any] = {
        "date_utc": m["date_utc"],
        "commit": m.get("git_commit"),
        "dirty": m.get("git_dirty"),
        "loadavg_start": m.get("loadavg_start"),
        "loadavg_end": m.get("loadavg_end"),
        "cpu_steal_percent": m.get("cpu_steal_percent"),
        "failed": sorted(name for name, sec in sections.items() if "error" in sec),
    }
    for case in (sections.get("prepare", {}).get("result") or {}).get("cases", []):
        key = prepare_key(case["storage"], case["devices_per_claim"], case["callers"])
        for kind in ("ours", "reference"):
            c = case[kind]
            line[f"{key}_{kind}"] = {
                "p50_ms": c["prepare_p50_ms"]["median"],
                "claims_per_s": c["prepare_claims_per_s"]["median"],
                "unprepare_p50_ms": c["unprepare_p50_ms"]["median"],
                "cpu_ms_per_claim": c["cpu_ms_per_claim"]["median"],
            }
    for name, r in (sections.get("publish", {}).get("result") or {}).items():
        line[f"publish_{name}"] = {
            "socket_s": r["registration_socket_s"]["median"],
            "slices_s": r["all_slices_visible_s"]["median"],
        }
    for r in (sections.get("fleet", {}).get("result") or {}).get("runs", []):
        line[f"fleet_{r['nodes']}_over_bare_wall"] = r["ratio_fleet_over_bare_wall"]
    mem = sections.get("fleet_memory", {}).get("result")
    if mem:
        line[f"fleet_{mem['nodes']}_max_rss_mib"] = mem["max_rss_mib"]
    cd = sections.get("computedomain", {}).get("result")
    if cd:
        for b in cd["bursts"]:
            suffix = "" if b["computedomains"] == 200 else f"_{b['computedomains']}"
            line[f"computedomain{suffix}_p99_ms"] = b["p99_ms"]["median"]
        line["computedomain_readiness_max_ms"] = cd["readiness"]["max_ms"]
    return line
