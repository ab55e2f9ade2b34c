"""`dra-fake fault inject|clear|list|chaos`: GpuFault objects from the command line (docs/faults.md).
A convenience over `kubectl apply`/`delete`: everything here is a plain GpuFault the plugins act on.
`dra-fake fault drain|undrain|rules`: an administrator's DeviceTaintRules (dra_fake.gpu.taintrules)."""

from __future__ import annotations

import argparse
import json
import random
import sys
import threading
import time
from collections.abc import Callable, Sequence
from typing import IO, Any

from dra_fake.gpu import taintrules
from dra_fake.gpu.faults import GROUP, KIND, KINDS, PLURAL, RECOVERIES, VERSION

CREATED_BY = "dra-fake.dev/created-by"  # label: which command created a fault ("cli" or "chaos")
CHAOS_KINDS = ("xid", "gpu-lost", "ecc", "thermal")
CHAOS_XIDS = (31, 43, 48, 63, 64, 74, 79, 92, 94, 95)  # a mix of ignored and fatal Xids


def add_fault_parser(sub: Any) -> None:
    p = sub.add_parser("fault", help="inject, clear and list simulated GPU faults (GpuFault objects)")
    p.add_argument("--kubeconfig", default="", help="kubeconfig file (default: $KUBECONFIG, else in-cluster)")
    actions = p.add_subparsers(dest="fault_command", required=True)

    inject = actions.add_parser("inject", help="create a GpuFault")
    inject.add_argument("--node", required=True)
    inject.add_argument("--device", required=True, help="device name (gpu-0), GPU UUID or MIG device UUID")
    inject.add_argument("--kind", required=True, choices=KINDS)
    inject.add_argument("--xid", type=int, help="Xid number (--kind xid)")
    inject.add_argument("--ecc-type", choices=("single", "double"), help="--kind ecc (default double)")
    inject.add_argument("--ecc-count", type=int, help="--kind ecc (default 1)")
    inject.add_argument("--temperature", type=int, help="degrees C (--kind thermal, default 95)")
    inject.add_argument(
        "--effect", choices=("NoSchedule", "NoExecute", "None"), help="override the taint effect"
    )
    inject.add_argument("--start-after", type=int, help="seconds from now until the fault starts")
    inject.add_argument("--duration", type=int, help="seconds the fault lasts (default: until cleared)")
    inject.add_argument("--recovery", choices=RECOVERIES, help="sticky (default, as NVIDIA) or clear")
    inject.add_argument("--name", help="object name (default: <node>-<device>-<kind>-<random>)")

    clear = actions.add_parser("clear", help="delete the GpuFaults of a node (and device)")
    clear.add_argument("--node", required=True)
    clear.add_argument("--device", help="only the faults naming this device")

    actions.add_parser("list", help="list GpuFaults with their phase")

    chaos = actions.add_parser("chaos", help="inject random faults at a rate, over nodes, for a time")
    chaos.add_argument("--nodes", required=True, help="comma-separated node names")
    chaos.add_argument("--rate", type=float, default=6.0, help="faults per minute (default 6)")
    chaos.add_argument("--for", dest="seconds", type=float, default=60.0, help="seconds to run (default 60)")
    chaos.add_argument("--duration", type=int, default=30, help="seconds each fault lasts (default 30)")
    chaos.add_argument(
        "--kinds", default=",".join(CHAOS_KINDS), help=f"comma-separated (default {','.join(CHAOS_KINDS)})"
    )
    chaos.add_argument(
        "--seed", type=int, default=0, help="random seed: the same seed, nodes and devices, the same faults"
    )
    chaos.add_argument("--log", default="-", help="JSON-lines log of what was done (default: stdout)")
    chaos.add_argument("--keep", action="store_true", help="leave the faults in place at the end")

    drain = actions.add_parser("drain", help="taint devices with a DeviceTaintRule (an admin's drain)")
    _selector_flags(drain)
    drain.add_argument("--effect", default="NoExecute", choices=taintrules.EFFECTS, help="default NoExecute")
    drain.add_argument(
        "--key", default=taintrules.DEFAULT_KEY, help=f"taint key (default {taintrules.DEFAULT_KEY})"
    )
    drain.add_argument("--value", default="", help="taint value")
    drain.add_argument("--name", default="", help="rule name (default drain-<node>-<device>)")

    undrain = actions.add_parser("undrain", help="delete the DeviceTaintRules `drain` made for these devices")
    _selector_flags(undrain)
    undrain.add_argument("--name", default="", help="only the rule of this name")

    actions.add_parser("rules", help="list DeviceTaintRules with the eviction controller's progress")


def _selector_flags(p: Any) -> None:
    p.add_argument("--driver", default="gpu.nvidia.com", help="the devices' driver (default gpu.nvidia.com)")
    p.add_argument("--node", default="", help="the node (our pool); default: every node")
    p.add_argument("--device", default="", help="device name (gpu-0); default: every device of the node")


def _drain(args: argparse.Namespace) -> taintrules.Drain:
    return taintrules.Drain(
        driver=args.driver,
        pool=args.node,
        device=args.device,
        effect=getattr(args, "effect", "NoExecute"),
        key=getattr(args, "key", taintrules.DEFAULT_KEY),
        value=getattr(args, "value", ""),
        name=args.name,
    )


def run_rules_command(api: Any, args: argparse.Namespace) -> None:
    """drain, undrain, rules."""
    rules = taintrules.Rules(api)
    if args.fault_command == "drain":
        taintrules.manifest(_drain(args))  # refused before any API call
        obj = rules.create(_drain(args))
        print(f"devicetaintrule.{taintrules.GROUP}/{obj['metadata']['name']} created")
    elif args.fault_command == "undrain":
        for name in rules.delete(_drain(args)):
            print(f"devicetaintrule.{taintrules.GROUP}/{name} deleted")
    else:
        sys.stdout.write(taintrules.table(rules.find()))


def run_fault_command(args: argparse.Namespace) -> int:
    from kubernetes import client

    from dra_fake.core.kube import load_kube_client
    from dra_fake.core.kubeconfig import StartupError

    try:
        api = load_kube_client(args.kubeconfig)
    except StartupError as err:
        print(f"dra-fake fault: error: {err}", file=sys.stderr)
        return 2
    faults = Faults(client.CustomObjectsApi(api))
    try:
        if args.fault_command == "inject":
            obj = faults.create(fault_manifest(args, "cli"))
            print(f"gpufault.{GROUP}/{obj['metadata']['name']} created")
        elif args.fault_command == "clear":
            for name in faults.clear(args.node, args.device):
                print(f"gpufault.{GROUP}/{name} deleted")
        elif args.fault_command == "list":
            sys.stdout.write(fault_table(faults.find()))
        elif args.fault_command in ("drain", "undrain", "rules"):
            run_rules_command(api, args)
        else:
            return run_chaos(args, faults, published_devices(api))
    except (FaultInputError, taintrules.RuleInputError) as err:
        print(f"dra-fake fault: error: {err}", file=sys.stderr)
        return 2
    except client.ApiException as err:
        print(f"dra-fake fault: error: {err.status} {err.reason}: {_api_message(err)}", file=sys.stderr)
        return 1
    return 0


class FaultInputError(ValueError):
    pass


def _api_message(err: Any) -> str:
    try:
        return str(json.loads(err.body).get("message", ""))
    except (TypeError, ValueError):
        return str(err.body or "")


def fault_manifest(args: argparse.Namespace, created_by: str) -> dict[str, Any]:
    """A GpuFault from `inject`'s flags; flags of another kind are refused, not ignored."""
    spec: dict[str, Any] = {"nodeName": args.node, "device": args.device, "kind": args.kind}
    if args.xid is not None:
        if args.kind != "xid":
            raise FaultInputError("--xid is only for --kind xid")
        spec["xid"] = args.xid
    elif args.kind == "xid":
        raise FaultInputError("--kind xid needs --xid")
    ecc = {k: v for k, v in (("type", args.ecc_type), ("count", args.ecc_count)) if v is not None}
    if ecc:
        if args.kind != "ecc":
            raise FaultInputError("--ecc-type and --ecc-count are only for --kind ecc")
        spec["ecc"] = ecc
    if args.temperature is not None:
        if args.kind != "thermal":
            raise FaultInputError("--temperature is only for --kind thermal")
        spec["thermal"] = {"temperature": args.temperature}
    for flag, key in (
        ("effect", "effect"),
        ("start_after", "startAfterSeconds"),
        ("duration", "durationSeconds"),
        ("recovery", "recovery"),
    ):
        if getattr(args, flag) is not None:
            spec[key] = getattr(args, flag)
    metadata: dict[str, Any] = {"labels": {CREATED_BY: created_by}}
    if args.name:
        metadata["name"] = args.name
    else:
        metadata["generateName"] = f"{args.node}-{args.device}-{args.kind}-".lower()[:200]
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": KIND, "metadata": metadata, "spec": spec}


class Faults:
    """GpuFault calls (cluster-scoped custom objects), each with the request timeout."""

    def __init__(self, custom: Any) -> None:
        from dra_fake.core.kube import REQUEST_TIMEOUT

        self.custom, self.timeout = custom, REQUEST_TIMEOUT

    def create(self, obj: dict[str, Any]) -> dict[str, Any]:
        out: dict[str, Any] = self.custom.create_cluster_custom_object(
            GROUP, VERSION, PLURAL, obj, _request_timeout=self.timeout
        )
        return out

    def find(self, node: str | None = None) -> list[dict[str, Any]]:
        selector = {"field_selector": f"spec.nodeName={node}"} if node else {}
        result = self.custom.list_cluster_custom_object(
            GROUP, VERSION, PLURAL, _request_timeout=self.timeout, **selector
        )
        return sorted(result.get("items") or [], key=lambda o: o["metadata"]["name"])

    def delete(self, name: str) -> None:
        from kubernetes.client.exceptions import ApiException

        try:
            self.custom.delete_cluster_custom_object(
                GROUP, VERSION, PLURAL, name, _request_timeout=self.timeout
            )
        except ApiException as err:
            if err.status != 404:
                raise

    def clear(self, node: str, device: str | None) -> list[str]:
        names = [o["metadata"]["name"] for o in self.find(node) if device in (None, o["spec"].get("device"))]
        for name in names:
            self.delete(name)
        return names


def fault_table(objects: Sequence[dict[str, Any]]) -> str:
    rows = [("NAME", "NODE", "DEVICE", "KIND", "DETAIL", "PHASE", "MESSAGE")]
    for o in objects:
        spec, status = o.get("spec", {}), o.get("status") or {}
        ecc = spec.get("ecc") or {}
        detail = {
            "xid": f"xid={spec.get('xid')}",
            "ecc": f"{ecc.get('type', 'double')}x{ecc.get('count', 1)}",
            "thermal": f"{(spec.get('thermal') or {}).get('temperature', 95)}C",
        }.get(spec.get("kind", ""), "-")
        rows.append(
            (
                o["metadata"]["name"],
                spec.get("nodeName", ""),
                spec.get("device", ""),
                spec.get("kind", ""),
                detail,
                status.get("phase", "-"),
                status.get("message", ""),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    return "".join(
        "   ".join(c.ljust(w) for c, w in zip(r[:-1], widths, strict=False)) + "   " + r[-1] + "\n"
        for r in rows
    )


# ---- chaos ------------------------------------------------------------------------------------------


def chaos_plan(
    nodes: dict[str, list[str]], kinds: Sequence[str], count: int, seed: int, duration: int
) -> list[dict[str, Any]]:
    """`count` fault specs chosen by `seed` over the nodes' devices: the same inputs, the same plan."""
    rng = random.Random(seed)
    plan = []
    for _ in range(count):
        node = rng.choice(sorted(nodes))
        device = rng.choice(sorted(nodes[node]))
        kind = rng.choice(list(kinds))
        spec: dict[str, Any] = {
            "nodeName": node,
            "device": device,
            "kind": kind,
            "durationSeconds": duration,
            "recovery": "clear",
        }
        if kind == "xid":
            spec["xid"] = rng.choice(CHAOS_XIDS)
        elif kind == "ecc":
            spec["ecc"] = {"type": rng.choice(("single", "double")), "count": rng.randint(1, 8)}
        elif kind == "thermal":
            spec["thermal"] = {"temperature": rng.randint(85, 105)}
        plan.append(spec)
    return plan


def run_chaos(
    args: argparse.Namespace,
    faults: Faults,
    devices_of: Callable[[str], list[str]],
    clock: Callable[[], float] = time.monotonic,
    stop: threading.Event | None = None,
) -> int:
    kinds = [k.strip() for k in args.kinds.split(",") if k.strip()]
    unknown = [k for k in kinds if k not in KINDS]
    if unknown or not kinds:
        raise FaultInputError(
            f"--kinds: {','.join(unknown) or '(none)'}: each must be one of {', '.join(KINDS)}"
        )
    if args.rate <= 0 or args.seconds <= 0:
        raise FaultInputError("--rate and --for must be positive")
    node_names = [n.strip() for n in args.nodes.split(",") if n.strip()]
    nodes = {n: devices_of(n) for n in node_names}
    empty = [n for n, d in nodes.items() if not d]
    if empty:
        raise FaultInputError(f"--nodes: {', '.join(empty)}: no gpu.nvidia.com devices published")
    interval = 60.0 / args.rate
    plan = chaos_plan(nodes, kinds, max(1, int(args.seconds / interval)), args.seed, args.duration)
    stop = stop or threading.Event()
    out: IO[str] = sys.stdout if args.log == "-" else open(args.log, "a", encoding="utf-8")  # noqa: SIM115
    created: list[str] = []
    try:
        _log(
            out,
            action="start",
            seed=args.seed,
            nodes=node_names,
            kinds=kinds,
            faults=len(plan),
            interval=interval,
        )
        started = clock()
        for i, spec in enumerate(plan):
            if stop.wait(max(0.0, started + i * interval - clock())):
                break
            obj = faults.create(
                {
                    "apiVersion": f"{GROUP}/{VERSION}",
                    "kind": KIND,
                    "metadata": {"generateName": f"chaos-{args.seed}-{i}-", "labels": {CREATED_BY: "chaos"}},
                    "spec": spec,
                }
            )
            created.append(obj["metadata"]["name"])
            _log(out, action="inject", index=i, name=obj["metadata"]["name"], **spec)
        if not args.keep:
            for name in created:
                faults.delete(name)
                _log(out, action="clear", name=name)
        _log(out, action="end", injected=len(created))
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def _log(out: IO[str], **record: Any) -> None:
    out.write(json.dumps({"time": round(time.time(), 3), **record}, sort_keys=True) + "\n")
    out.flush()


def published_devices(api: Any) -> Callable[[str], list[str]]:
    """A node's gpu.nvidia.com device names, from its ResourceSlices."""
    from dra_fake.core.resourceapi import ResourceApi, as_dict, discover_dra

    resources = ResourceApi(api)
    resources.discovered(discover_dra(api))

    def devices(node: str) -> list[str]:
        result = as_dict(
            resources.custom.list_cluster_custom_object(
                "resource.k8s.io",
                resources.version,
                "resourceslices",
                field_selector=f"spec.nodeName={node},spec.driver=gpu.nvidia.com",
            )
        )
        return sorted(d["name"] for s in result.get("items", []) for d in s["spec"].get("devices") or [])

    return devices
