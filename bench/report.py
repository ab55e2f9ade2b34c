"""latest.json -> latest.md (every figure with its unit), with the figures that have a target across
the last runs of history.jsonl.

    python -m bench.report    # render bench/results/latest.md again from latest.json and history.jsonl
"""

# ruff: noqa: E501  (table rows and prose of the report)

from __future__ import annotations

import json
import sys
from typing import Any

from bench.history import HISTORY, RESULTS, across_runs, read_history, table


def _lat(s: dict[str, Any]) -> str:
    return f"{s['p50_ms']:.2f} / {s['p95_ms']:.2f} / {s['p99_ms']:.2f}"


def _spread(s: dict[str, Any], key: str, digits: int = 1) -> str:
    """median [min-max] of a figure measured in repetitions."""
    f = s[key]
    return f"{f['median']:.{digits}f} [{f['min']:.{digits}f}-{f['max']:.{digits}f}]"


def _kwok(kw: dict[str, Any]) -> list[str]:
    out = [
        "",
        "## KWOK fleets",
        "",
        f"{kw['nodes']} fleet nodes x {kw['gpusPerNode']} H100s (`dra-fake fleet`), KWOK's controller as "
        f"their kubelet; {kw['pods']} pods created at once (16 callers), each with a claim of one GPU "
        "(DRA) or none (plain KWOK), on the same nodes. Rates: pods over the seconds from the first "
        "create until the last is bound (allocated, Running), polled every second: median [min-max].",
        "",
        *table("run | create s | pods scheduled/s | claims allocated/s | pods Running/s"),
    ]
    for name in ("dra", "plain"):
        r = kw[name]
        claims = _spread(r, "claimsAllocatedPerSecond") if "claimsAllocatedPerSecond" in r else "n/a"
        out.append(
            f"| {name} | {_spread(r, 'createSeconds', 2)} | {_spread(r, 'podsScheduledPerSecond')} | "
            f"{claims} | {_spread(r, 'podsRunningPerSecond')} |"
        )
    return out


def _prepare(prep: dict[str, Any]) -> list[str]:
    from bench.prepare import PER_CLAIM_WORK

    out = [
        "",
        "## Prepare / unprepare, side by side",
        "",
        f"Both plugins on kubelet-less nodes of the same API server, {prep['devices_per_node']} devices each, "
        "driven by `drabench` (Go, the kubelet's generated DRA v1 gRPC client) over their unix sockets; one "
        "claim per call; every claim is fetched from the API server by the plugin. Each case ran "
        f"{prep['repeat']} times per driver (the drivers alternating): the median of the repetitions, "
        "[min-max] beside it. Latency in ms; throughput in claims/s; ratio = ours / reference of the "
        "medians (latency: lower is better; claims/s: higher is better). `disk`: state on this machine's "
        "disk; `tmpfs`: both drivers' plugin directory and CDI root on tmpfs (an fsync costs nothing), "
        "so the difference is what durability costs.",
        "",
        "What each driver does per claim:",
        "",
        *table("call | driver | work | files, fsyncs"),
        *(f"| {call} | {driver} | {work} | {cost} |" for call, driver, work, cost in PER_CLAIM_WORK),
        "",
    ]
    for storage, e in prep["empty_prepare_request"].items():
        out.append(
            f"Empty NodePrepareResources (gRPC + handler overhead), {storage}: ours {_lat(e['ours'])} ms, "
            f"reference {_lat(e['reference'])} ms (p50 / p95 / p99)."
        )
    out += [
        "",
        *table(
            "storage | devices/claim | callers | driver | prepare p50 ms | prepare p99 ms | "
            "unprepare p50 ms | unprepare p99 ms | prepare claims/s | unprepare claims/s | "
            "CPU ms per claim | checkpoint bytes (claims held)"
        ),
    ]
    for case in prep["cases"]:
        head = f"| {case['storage']} | {case['devices_per_claim']} | {case['callers']}"
        for kind in ("ours", "reference"):
            c = case[kind]
            out.append(
                f"{head} | {kind} | {_spread(c, 'prepare_p50_ms', 2)} | {_spread(c, 'prepare_p99_ms', 2)} | "
                f"{_spread(c, 'unprepare_p50_ms', 2)} | {_spread(c, 'unprepare_p99_ms', 2)} | "
                f"{_spread(c, 'prepare_claims_per_s')} | {_spread(c, 'unprepare_claims_per_s')} | "
                f"{_spread(c, 'cpu_ms_per_claim', 2)} | "
                f"{c['checkpoint_bytes']['max']:.0f} ({c['claims_held']['max']:.0f}) |"
            )
        r = case["ratio_ours_over_reference"]
        out.append(
            f"{head} | **ratio** | {r['prepare_p50_ms']}x | {r['prepare_p99_ms']}x | {r['unprepare_p50_ms']}x | "
            f"{r['unprepare_p99_ms']}x | {r['prepare_claims_per_s']}x | {r['unprepare_claims_per_s']}x | "
            f"{r['cpu_ms_per_claim']}x | |"
        )
    return out


def _machinery(m: dict[str, Any]) -> list[str]:
    from bench.machinery import ALPHA

    out = [
        "",
        "## Machinery on trial",
        "",
        "Our plugin with each piece of its machinery and without it (`DRA_FAKE_WITHOUT`, "
        "dra_fake.core.trials; the CPU pinning: `--cpu-affinity`), every variant on its own node, all "
        f"started together, state on {m['storage']}; each case {m['repeat']} times per variant, the "
        f"variants alternating (the baseline pins: `--cpu-affinity={m['baseline_cpu_affinity']}`). "
        "A piece's verdict is taken on the paired repetitions: in each repetition of each case its "
        "variant and the baseline ran one after the other, and the pair counts as better or worse "
        "with the piece. *keeps its place*: on a figure users feel (marked *), better in so many "
        f"pairs that a fair coin would give that many at most {ALPHA:.0%} of the time (sign test, "
        "one-sided), and worse so on none; *costs*: the mirror; else *within noise*.",
        "",
        *table("piece | without it | verdict"),
        *(
            f"| {name} | {p['what']} | {m['verdicts'].get(name, 'not measured')} |"
            for name, p in m["pieces"].items()
        ),
        "",
        *table(
            "piece | where | figure | pairs better / worse with it | median with / without | chance by luck"
        ),
        *(
            f"| {r['piece']} | {r['where']} | {r['figure']}{' *' if r['user_felt'] else ''} | "
            f"{r['better']} / {r['worse']} of {r['pairs']} | "
            f"{'n/a' if r['median_ratio'] is None else format(r['median_ratio'], '.2f') + 'x'} | "
            f"{min(r['p_better'], r['p_worse']):.3f} |"
            for r in m["paired"]
        ),
        "",
        "Per case, medians of the repetitions (noise: the baseline's (max - min) / median):",
        "",
        *table("piece | case | figure | with | without | with / without | noise"),
    ]
    for r in m["table"]:
        ratio = "n/a" if r["ratio_with_over_without"] is None else f"{r['ratio_with_over_without']:.2f}x"
        out.append(
            f"| {r['piece']} | {r['case']} | {r['figure']}{' *' if r['user_felt'] else ''} | "
            f"{r['with']:.2f} | {r['without']:.2f} | {ratio} | {100 * r['noise']:.0f}% |"
        )
    return out


def _sharing(result: dict[str, Any]) -> list[str]:
    from bench.sharing import BUDGET, KEYS

    out = [
        "",
        "## Shares beside full GPUs",
        "",
        f"One plugin, {result['shared_gpus']} GPUs shared by memory ({result['shares']} claims of "
        f"{result['share_memory']}, {result['shares'] // result['shared_gpus']} per GPU) and "
        f"{result['full_gpu_claims']} full-GPU claims of exclusive GPUs, each set prepared and unprepared "
        f"{result['rounds']} times by {result['callers']} callers, the sets alternating, {result['repeat']} "
        f"times ({result['storage']}): median [min-max]; ratio = share / full of the medians (budget "
        f"{BUDGET}x for the latencies: {'kept' if result['within_budget'] else 'EXCEEDED'}).",
        "",
        *table(
            "claims | prepare p50 ms | prepare p99 ms | unprepare p50 ms | unprepare p99 ms | CPU ms/claim"
        ),
    ]
    for kind, label in (("share", "shares"), ("full", "full GPUs")):
        out.append(f"| {label} | " + " | ".join(_spread(result[kind], key, 2) for key in KEYS) + " |")
    ratio = result["ratio_share_over_full"]
    out.append("| share / full | " + " | ".join(f"{ratio[key]:.2f}" for key in KEYS) + " |")
    return out


def render(results: dict[str, Any], history: list[dict[str, Any]] | None = None) -> str:
    """`history`: the lines of history.jsonl, this run's included (none: no "Across runs")."""
    m = results["machine"]
    out = [
        "# dra-fake benchmarks (latest run)",
        "",
        "Generated by `make bench` (`python -m bench`); how to reproduce each number: "
        "[docs/benchmarks.md](../../docs/benchmarks.md). Raw figures: [latest.json](latest.json).",
        "Timings are from a shared 2-core machine and are noisy; the load average and the CPU time "
        "the hypervisor gave other guests (steal) are recorded, for the run and per section.",
        "",
        "## Machine",
        "",
        *table("fact | value"),
    ]
    for key in (
        "date_utc",
        "cpu_model",
        "cpus",
        "memory_gib",
        "kernel",
        "python",
        "go",
        "grpcio",
        "kubernetes_client",
        "kubernetes_control_plane",
        "reference_driver",
        "git_commit",
        "git_dirty",
        "loadavg_start",
        "loadavg_end",
        "cpu_steal_percent",
    ):
        out.append(f"| {key} | {m.get(key, '')} |")
    out.append(f"| total run time | {results.get('total_seconds', '?')} s |")
    sections = results["sections"]
    out.append(
        "| sections (seconds, CPU steal) | "
        + ", ".join(
            f"{name} {sec.get('seconds', '?')} s, {sec.get('cpu_steal_percent', '?')} %"
            for name, sec in sections.items()
        )
        + " |"
    )
    for name, sec in sections.items():
        if "error" in sec:
            out += ["", f"## {name}: FAILED", "", "```", sec["error"], "```"]
    floor = sections.get("floor", {}).get("result")
    if floor:
        out += [
            "",
            "## Floor of this machine",
            "",
            *table("operation | p50 / p95 / p99 (ms) | n"),
        ]
        for key, label in (
            (
                "grpc_empty_roundtrip_unix_socket",
                "empty gRPC round trip, unix socket (Go client, Go no-op server)",
            ),
            ("fsync_atomic_write_4KiB_go", "atomic file write, 4 KiB, fsync + rename (Go)"),
            (
                "fsync_atomic_write_4KiB_python_dra_fake_atomic",
                "same, Python `dra_fake.core.atomic.atomic_write` (+ dir fsync)",
            ),
        ):
            out.append(f"| {label} | {_lat(floor[key])} | {floor[key]['n']} |")
    sharing = sections.get("sharing", {}).get("result")
    if sharing:
        out += _sharing(sharing)
    prep = sections.get("prepare", {}).get("result")
    if prep:
        out += _prepare(prep)
    mach = sections.get("machinery", {}).get("result")
    if mach:
        out += _machinery(mach)
    pub = sections.get("publish", {}).get("result")
    if pub:
        out += [
            "",
            "## Publishing",
            "",
            "From process start. Registration socket = GetInfo answers; registered = the kubelet's plugin "
            "manager (dra-kubelet harness) called NotifyRegistrationStatus(registered) (our plugin logs it; "
            "not observed for the reference driver); slices = the whole pool visible in the API server at one "
            f"generation. RSS: 5 s after that. Each plugin started {len(next(iter(pub.values()))['repetitions'])} "
            "times (the plugins alternating): median [min-max].",
            "",
            *table(
                "plugin | slices | devices | registration socket s | registered with kubelet s | "
                "all slices visible s | RSS at rest MiB"
            ),
        ]
        for name, r in pub.items():
            registered = (
                _spread(r, "registered_with_kubelet_s", 3) if "registered_with_kubelet_s" in r else "n/a"
            )
            out.append(
                f"| {name} | {r['slices']['median']:.0f} | {r['devices']['median']:.0f} | "
                f"{_spread(r, 'registration_socket_s', 3)} | {registered} | "
                f"{_spread(r, 'all_slices_visible_s', 3)} | {_spread(r, 'rss_at_rest_mib')} |"
            )
    fl = sections.get("fleet", {}).get("result")
    if fl:
        out += [
            "",
            "## Scale mode (`dra-fake fleet`)",
            "",
            f"N Nodes x {fl['gpus_per_node']} H100s: create Node, remove the admission taint, publish its "
            f"ResourceSlice; {fl['workers']} workers. Fleet wall time: from the fleet's start (after its "
            "imports) until every node is published; the bare client (Go, `drabench create`, the same "
            "Nodes and slices pre-built, same concurrency) is the ceiling. CPU s: the client's whole "
            "process, and the API server's meanwhile (/proc). Each size ran "
            f"{fl.get('repeat', 1)} times, fleet and bare client alternating which goes first: median "
            "[min-max]; fleet / bare = the ratio of the medians, and the ratios of the single "
            "repetitions beside it.",
            "",
            *table(
                "nodes | fleet wall s | fleet API requests | fleet RSS MiB (max) | bare client wall s | "
                "bare API requests | fleet / bare wall | per repetition | CPU s fleet / bare | "
                "API server CPU s fleet / bare"
            ),
        ]
        for r in fl["runs"]:
            cpu = (
                f"{_spread(r, 'fleet_cpu_s', 2)} / {_spread(r, 'bare_cpu_s', 2)} | "
                f"{_spread(r, 'fleet_apiserver_cpu_s')} / {_spread(r, 'bare_apiserver_cpu_s')}"
            )
            out.append(
                f"| {r['nodes']} | {_spread(r, 'fleet_wall_s', 3)} | {r['fleet_api_requests']} | "
                f"{_spread(r, 'fleet_max_rss_mib')} | {_spread(r, 'bare_wall_s', 3)} | {r['bare_api_requests']} | "
                f"{r['ratio_fleet_over_bare_wall']}x | {_spread(r, 'ratio_per_repetition', 2)} | {cpu} |"
            )
    hb = sections.get("fleet_heartbeats", {}).get("result")
    if hb:
        out += [
            "",
            f"Heartbeats: {hb['nodes']} fleet nodes ran {hb['seconds']:.0f} s under the node lifecycle controller "
            f"(grace periods 50 s / 60 s at start-up): {hb['ready_untainted']} Ready and untainted at the end; "
            f"Lease writes {hb['lease_writes']}, {hb['renewals_per_node_per_10s']} renewals per node per 10 s "
            f"(the kubelet: 1), oldest renewTime {hb['max_lease_age_s']} s; fleet RSS {hb['max_rss_mib']} MiB.",
        ]
    mem = sections.get("fleet_memory", {}).get("result")
    if mem:
        out += [
            "",
            f"Memory: a fleet of {mem['nodes']} nodes x 8 GPUs peaked at {mem['max_rss_mib']} MiB RSS "
            f"({mem['api_requests']} API requests, {mem['wall_s']} s).",
        ]
    kw = sections.get("kwok", {}).get("result")
    if kw:
        out += _kwok(kw)
    cd = sections.get("computedomain", {}).get("result")
    if cd:
        out += [
            "",
            "## ComputeDomain controller",
            "",
            "N ComputeDomains created at once (16 concurrent creators); per CD, from its create call returning "
            "until both its workload ResourceClaimTemplate and its daemon DaemonSet exist (as seen by a watch "
            "of each kind started before the burst; earlier runs listed both kinds every 50 ms, which loaded "
            "the API server), after one unrecorded burst of 20 (the first after the cluster's start ran about twice as "
            "slow). Deleted afterwards; the next burst starts once the "
            f"controller has removed them. Each size ran {cd.get('repeat', 1)} times: median [min-max] of "
            "each figure (the percentiles are over the domains of one burst).",
            "",
            *table(
                "CDs | create calls s | p50 ms | p95 ms | p99 ms | mean ms | all reconciled s | all deleted s"
            ),
        ]
        for b in cd["bursts"]:
            out.append(
                f"| {b['computedomains']} | {_spread(b, 'create_wall_s', 2)} | {_spread(b, 'p50_ms', 0)} | "
                f"{_spread(b, 'p95_ms', 0)} | {_spread(b, 'p99_ms', 0)} | {_spread(b, 'mean_ms', 0)} | "
                f"{_spread(b, 'all_reconciled_s', 2)} | {_spread(b, 'all_deleted_s', 2)} |"
            )
        r = cd["readiness"]
        out += [
            "",
            f"Status follows readiness ({r['domains']} domains of one node each, one at a time; the benchmark "
            "binds the daemon pod, sets it Running and Ready as a kubelet would, and writes the clique as the IMEX "
            f"daemon would; status polled every {r['poll_interval_ms']:g} ms):",
            "",
            *table("transition | p50 / p95 / p99 ms | mean ms"),
            f"| clique says the daemon is Ready -> CD status Ready | {_lat(r['clique_ready_to_status_ready'])} | "
            f"{r['clique_ready_to_status_ready']['mean_ms']} |",
            f"| daemon pod Ready=False -> CD status NotReady | {_lat(r['pod_not_ready_to_status_not_ready'])} | "
            f"{r['pod_not_ready_to_status_not_ready']['mean_ms']} |",
            "",
            f"Slowest transition: {r['max_ms']} ms.",
        ]
    out += across_runs(history or [])
    return "\n".join(out) + "\n"


def main() -> int:
    """Render latest.md again from latest.json and history.jsonl (after a change of this
    report; the figures are the run's)."""
    latest = json.loads((RESULTS / "latest.json").read_text())
    (RESULTS / "latest.md").write_text(render(latest, read_history(HISTORY)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
