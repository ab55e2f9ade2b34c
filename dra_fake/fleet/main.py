"""`dra-fake fleet`: the command (flags checked, the fleet started, run until a signal, a deadline
or, with --exit-when-synced, every node published; the summary printed)."""

from __future__ import annotations

import argparse
import gc
import json
import logging
import sys
import time
from pathlib import Path

import yaml
from kubernetes import config

from dra_fake.core import logs, yamlio
from dra_fake.core.kubeconfig import StartupError
from dra_fake.fleet.client import counting_client
from dra_fake.fleet.options import FleetOptions
from dra_fake.fleet.run import Fleet
from dra_fake.gpu.api import (
    DEFAULT_IGNORED_XIDS,
    GATE_HEALTH_CHECK,
    MIG_STRATEGIES,
    InventoryConfig,
    InventoryError,
    build_inventory,
    default_config,
    load_profiles,
    parse_additional_xids,
    parse_config,
    parse_feature_gates,
)

log = logging.getLogger("dra_fake.fleet")


def load_fleet_inventory(path: str) -> InventoryConfig:
    if not path:
        return default_config()
    try:
        data = yamlio.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as err:
        raise InventoryError(f"{path}: {err}") from None
    return parse_config(data, path)


def parse_labels(raw: list[str]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for item in raw:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--node-label {item!r}: expected KEY=VALUE")
        labels[key] = value
    return labels


# Young collections once per this many new container objects instead of CPython's 700: fleet mode
# decodes and builds JSON for thousands of nodes, and the collector's scans of a heap of cached
# objects were a fifth of its CPU (perf, 1000 nodes). Nothing here depends on prompt collection
# of reference cycles.
GC_THRESHOLD = (50_000, 20, 20)


def quieter_garbage_collector() -> None:
    """Scan less often (GC_THRESHOLD)."""
    gc.set_threshold(*GC_THRESHOLD)


def run_fleet(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    started = time.monotonic()
    try:
        if args.nodes < 0 or (args.nodes == 0) == (not args.adopt_selector):
            raise ValueError("give exactly one of --nodes N (N > 0) and --adopt-selector SELECTOR")
        if args.workers < 1:
            raise ValueError("--workers must be at least 1")
        options = FleetOptions(
            driver=args.driver_name,
            nodes=args.nodes,
            prefix=args.node_prefix,
            fleet=args.fleet_name,
            adopt_selector=args.adopt_selector,
            workers=args.workers,
            mark_pods_running=args.mark_pods_running,
            resync_seconds=args.resync_seconds,
            node_labels=parse_labels(args.node_label),
            health_check=parse_feature_gates(args.feature_gates).enabled(GATE_HEALTH_CHECK),
            ignored_xids=DEFAULT_IGNORED_XIDS | parse_additional_xids(args.additional_xids_to_ignore),
            gfd_labels=args.gfd_labels,
            mig_strategy=args.mig_strategy,
            dcgm_port=args.dcgm_exporter_port,
        )
        if options.mig_strategy not in MIG_STRATEGIES:
            raise ValueError(
                f"--mig-strategy: {options.mig_strategy!r} is not one of {', '.join(MIG_STRATEGIES)}"
            )
        inventory = load_fleet_inventory(args.config)
        profiles = load_profiles(args.profiles_dir)
        build_inventory(inventory, f"{args.node_prefix}check", profiles, source=args.config or "<default>")
        api = counting_client(args.kubeconfig, args.workers + 8)
    except (ValueError, OSError, config.ConfigException, StartupError) as err:
        print(f"dra-fake fleet: error: {err}", file=sys.stderr)
        return 2
    quieter_garbage_collector()
    fleet = Fleet(api, inventory, profiles, options)
    fleet.start()
    if args.exit_when_synced:
        fleet.wait_synced()
        summary = fleet.summary(started)
        fleet.stop()
        print(json.dumps(summary), flush=True)
        return 0
    if args.node_leases if args.node_leases is not None else bool(args.nodes):
        fleet.start_heartbeats()  # created nodes have no kubelet; adopted (KWOK) nodes have theirs
    log.info(
        "fleet running",
        extra={"selector": fleet.selector, "startupSeconds": round(time.monotonic() - started, 3)},
    )
    from dra_fake.kubelet.signals import install_signal_handlers

    install_signal_handlers(fleet.stop_event)
    deadline = None if args.exit_after is None else time.monotonic() + args.exit_after
    while not fleet.stop_event.wait(1.0):  # wake up so the signal handler can run
        if deadline is not None and time.monotonic() >= deadline:
            print(json.dumps(fleet.summary(started)), flush=True)
            break
    fleet.stop()
    return 0
