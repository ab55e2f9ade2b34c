"""`dra-fake compute-domain-controller`: leader election (optional), the orphan-cleanup loop and
the kopf operator."""

from __future__ import annotations

import argparse
import logging
import os
import socket
import threading

import kopf

from computedomain.api import DAEMON_SERVICE_ACCOUNT
from computedomain.controller.handlers import API_CONNECTIONS, build_registry, configure
from computedomain.controller.leader import LeaderElector
from computedomain.controller.objects import DaemonSettings
from computedomain.controller.reconcile import Reconciler
from computedomain.controller.statussync import StatusSync
from dra_fake.core import logs
from dra_fake.core.resourceapi import discover_dra
from dra_fake.core.retry import run_forever, with_backoff

log = logging.getLogger("computedomain")


CLEANUP_SETTLE_SECONDS = 2.0


def cleanup_loop(
    reconciler: Reconciler, interval: float, trigger: threading.Event, stop: threading.Event
) -> None:
    """Every `interval` seconds, and when triggered (a CD was created): remove orphans. A burst
    of creations triggers one cleanup once it has settled, not one per ComputeDomain (each lists
    every template, DaemonSet, clique and labelled node of the cluster)."""

    def settled_cleanup() -> None:
        stop.wait(CLEANUP_SETTLE_SECONDS)
        while trigger.is_set() and not stop.is_set():
            trigger.clear()
            stop.wait(CLEANUP_SETTLE_SECONDS)
        reconciler.cleanup_orphans()

    run_forever("orphan cleanup", settled_cleanup, stop, interval, wake=trigger)


def operator_identity(configured: str) -> str:
    """Who this controller is (Lease holder, kopf's identity): the pod name, else host and pid.
    Given explicitly because kopf's own guess asks the passwd database for the user name, which a
    container running as a uid without a passwd entry (the chart's 65532) does not have."""
    return configured or f"{socket.gethostname()}-{os.getpid()}"


def run_controller(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    logging.getLogger("kopf").setLevel(logging.WARNING)  # kopf's per-handler success lines are noise
    from dra_fake.core.kube import load_kube_client
    from dra_fake.core.kubeconfig import StartupError

    try:
        if args.kubeconfig:
            os.environ["KUBECONFIG"] = args.kubeconfig  # kopf's login reads it
        api = load_kube_client(args.kubeconfig, connections=API_CONNECTIONS)
    except StartupError as err:
        print(f"dra-fake compute-domain-controller: error: {err}")
        return 2
    if args.metrics_port >= 0:  # before the election: a standby's liveness probe reads it too
        from dra_fake.core import metrics

        metrics.start_metrics_server(args.metrics_port)
    stop = threading.Event()
    # The API server may be starting or restarting: wait for it rather than exit.
    resource_version = with_backoff("API discovery", lambda: discover_dra(api), stop).resource_version
    identity = operator_identity(args.leader_elect_identity)
    if args.leader_elect == "true":
        elector = LeaderElector(api, args.namespace, identity)
        if not elector.acquire(stop):
            return 0
        elector.keep(stop)
    reconciler = Reconciler(
        api,
        DaemonSettings(
            namespace=args.namespace,
            image=args.daemon_image,
            service_account=DAEMON_SERVICE_ACCOUNT,
            max_nodes_per_imex_domain=args.max_nodes_per_imex_domain,
            log_level=args.log_level,
            resource_version=resource_version,
            daemon_uid=args.daemon_run_as_user,
            daemon_gid=args.daemon_run_as_group,
        ),
    )
    trigger = threading.Event()
    threading.Thread(
        target=cleanup_loop,
        args=(reconciler, args.cleanup_interval_seconds, trigger, stop),
        name="orphan-cleanup",
        daemon=True,
    ).start()
    StatusSync(api, args.namespace, args.status_sync_seconds).start(stop)
    registry = build_registry(reconciler, on_created=trigger.set)
    settings = kopf.OperatorSettings()
    configure(settings)
    log.info(
        "ComputeDomain controller starting",
        extra={
            "namespace": args.namespace,
            "leaderElect": args.leader_elect,
            "image": args.daemon_image,
            "resourceApi": resource_version,
        },
    )
    kopf.run(
        registry=registry,
        settings=settings,
        clusterwide=True,
        standalone=True,
        identity=identity,  # type: ignore[arg-type]  # kopf's Identity is a NewType of str, not exported
    )
    stop.set()
    return 0
