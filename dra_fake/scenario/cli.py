"""`dra-fake scenario FILE` (flags apart from run.py: building the parser imports no client)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def add_scenario_parser(sub: Any) -> None:
    p = sub.add_parser(
        "scenario",
        help="replay a timed scenario (pods with GPU claims, faults, drains, attach failures, load) and "
        "report what happened",
        description="Replay a scenario file against the cluster of --kubeconfig (docs/scenarios.md).",
    )
    p.add_argument("file", type=Path, help="the scenario (YAML)")
    p.add_argument("--kubeconfig", default="", help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")
    p.add_argument("--report", default="", help="write the report as JSON here")
    p.add_argument("--markdown", default="-", help="write the report as markdown here (default: stdout)")
    p.add_argument(
        "--image", default="", help="the pods' image (default: the e2e suite's dra-fake-shell:e2e)"
    )
    p.add_argument("--keep", action="store_true", help="leave the namespace, faults and drains in place")
    p.add_argument("--check", action="store_true", help="only check the file")


def run_scenario_command(args: argparse.Namespace) -> int:
    """0: done and its expectations met; 1: expectations not met or the run failed; 2: bad input."""
    from dra_fake.scenario.model import ScenarioError, load

    try:
        scenario = load(args.file)
    except ScenarioError as err:
        print(f"dra-fake scenario: error: {err}", file=sys.stderr)
        return 2
    if args.check:
        print(f"{args.file}: {len(scenario.steps)} steps, ok")
        return 0
    from dra_fake.core.kube import load_kube_client
    from dra_fake.core.kubeconfig import StartupError
    from dra_fake.scenario.report import markdown
    from dra_fake.scenario.run import DEFAULT_IMAGE, Runner

    try:
        api = load_kube_client(args.kubeconfig)
    except StartupError as err:
        print(f"dra-fake scenario: error: {err}", file=sys.stderr)
        return 2
    try:
        result = Runner(api, scenario, keep=args.keep, image=args.image or DEFAULT_IMAGE).run()
    except Exception as err:  # the API server away, a namespace that never gets its ServiceAccount
        print(f"dra-fake scenario: error: {err}", file=sys.stderr)
        return 1
    if args.report:
        Path(args.report).write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    text = markdown(result)
    if args.markdown == "-":
        sys.stdout.write(text)
    elif args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    return 0 if result["expectations"]["met"] else 1
