"""The chart's values on the local cluster: `make cluster-up VALUES=my-values.yaml FEATURE_GATES=A=true`.

The values file is the one `helm install -f` takes (`make kind-up VALUES=my-values.yaml` installs it
unchanged). The local cluster runs no pods, so it turns the values into each node's plugin command
lines, as the chart's templates turn them into the plugin containers' environment
(charts/dra-fake/templates/kubeletplugin.yaml): CHART_ENV below, one line per setting.
tests/test_local_values.py renders the chart with the same values and compares, so the two cannot
drift.

Layers, a later one wins, merged as Helm merges values (maps key by key; anything else replaced; null
removes the key): the chart's values.yaml, TEST_BED_VALUES, the VALUES file, FEATURE_GATES. So a
user's gate is added to the test bed's gates, and wins over the same gate there.
"""

from __future__ import annotations

import copy
import functools
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from dra_fake.cli import env_flags
from dra_fake.core import featuregates
from dra_fake.core.kubeconfig import StartupError

log = logging.getLogger("localcluster")

Values = dict[str, Any]
CHART = Path(__file__).resolve().parents[2] / "charts" / "dra-fake"
# The clique of every node of our test beds: one NVL72-like NVLink domain.
CD_CLIQUE_ID = "0b0f0c2d-6c67-4bba-9b6b-2a2f1e7ef7a1.32766"
# What our test beds run with beyond the chart's defaults: the local cluster and our kind clusters
# (e2e/kindcluster/cluster.py) alike.
# NVMLDeviceHealthCheck: faults taint devices (e2e/test_faults.py).
TEST_BED_VALUES: Values = {
    "featureGates": {featuregates.NVML_DEVICE_HEALTH_CHECK: True},
    "computeDomains": {"imexCliqueID": CD_CLIQUE_ID},
}


class ValuesError(ValueError):
    """Values the local cluster cannot run with; the message names the value."""


# ---- the chart's rendering, for the plugins ----------------------------------------------------


@dataclass(frozen=True)
class Env:
    """One environment variable of a plugin container: the values it follows, and what the
    template renders from them (None: the variable is left out)."""

    reads: tuple[str, ...]
    render: Callable[[Values], str | None]


def helm_str(value: Any) -> str:
    """A value as `{{ ... | quote }}` prints it."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def lookup(values: Values, path: str) -> Any:
    for key in path.split("."):
        values = values[key]
    return values


def value(path: str) -> Env:
    return Env((path,), lambda values: helm_str(lookup(values, path)))


GATES = Env(("featureGates",), lambda values: featuregates.gate_string(values["featureGates"]))
CLIQUE = Env(("computeDomains.imexCliqueID",), lambda v: v["computeDomains"]["imexCliqueID"] or None)


def lending(key: str | None) -> Env:
    """GPU_LENDING*: set only with gpuLending.enabled, as the chart renders them."""
    reads = ("gpuLending.enabled",) if key is None else ("gpuLending.enabled", f"gpuLending.{key}")

    def render(values: Values) -> str | None:
        if not values["gpuLending"]["enabled"]:
            return None
        return "true" if key is None else helm_str(values["gpuLending"][key])

    return Env(reads, render)


# The env of the chart's plugin containers that follows the values. A new plugin setting: its env
# line in templates/kubeletplugin.yaml and one line here (docs/local-cluster.md).
CHART_ENV: dict[str, dict[str, Env]] = {
    "gpus": {
        "FEATURE_GATES": GATES,
        # set only when non-empty, as the chart renders it
        "CONSUMABLE_SHARES": Env(("consumableShares",), lambda v: helm_str(v["consumableShares"]) or None),
        "SHARED_MEMORY_VIEW": value("sharedMemoryView"),
        "GPU_LENDING": lending(None),
        "GPU_LENDING_IDLE_THRESHOLD": lending("idleThreshold"),
        "GPU_LENDING_IDLE_FOR": lending("idleFor"),
        "ALLOW_REAL_GPU_NODE": value("allowRealGpuNodes"),
        "DEVICE_NODES": value("deviceNodes"),
        "DEVICE_ORDER": value("deviceOrder"),
        "DEVICE_STATUS": value("deviceStatus"),
        "NODE_LABELS": value("nodeLabels.enabled"),
        "MIG_STRATEGY": value("nodeLabels.migStrategy"),
        "CPU_AFFINITY": value("kubeletPlugin.cpuAffinity"),
        "LOG_LEVEL": value("logLevel"),
        "LOG_FORMAT": value("logFormat"),
    },
    "compute-domains": {
        "FEATURE_GATES": GATES,
        "DEVICE_STATUS": value("deviceStatus"),
        "DAEMON_RUN_AS_USER": value("computeDomains.daemon.runAsUser"),
        "DAEMON_RUN_AS_GROUP": value("computeDomains.daemon.runAsGroup"),
        "DRA_FAKE_IMEX_CLIQUE_ID": CLIQUE,
        "CPU_AFFINITY": value("kubeletPlugin.cpuAffinity"),
        "LOG_LEVEL": value("logLevel"),
        "LOG_FORMAT": value("logFormat"),
    },
}
# The rest of those containers' env: the local cluster sets these itself (LocalCluster.plugin_args).
LOCAL_ENV = {
    "NODE_NAME": "the harness node",
    "POD_UID": "no pod",
    "POD_IP": "no pod",
    "DRIVER_NAME": "NVIDIA's driver names (driverNames is refused)",
    "NAMESPACE": "the driver namespace of the local cluster",
    "CDI_ROOT": "the node's directories under .local-cluster/nodes",
    "KUBELET_REGISTRAR_DIRECTORY_PATH": "the node's directories under .local-cluster/nodes",
    "KUBELET_PLUGINS_DIRECTORY_PATH": "the node's directories under .local-cluster/nodes",
    "HEALTHCHECK_PORT": "free ports on 127.0.0.1",
    "HEALTHCHECK_ADDRESS": "free ports on 127.0.0.1",
    "METRICS_PORT": "free ports on 127.0.0.1",
    "DCGM_EXPORTER_PORT": "a free port on 127.0.0.1, or -1 with dcgmExporter.enabled=false",
    "DRA_FAKE_CONFIG": "a file of the node's inventory (node_inventory)",
}
# Values the local cluster follows besides CHART_ENV's.
OTHER_READS = ("dcgmExporter.enabled", "inventory", "nodePools")
NO_DEVICE_MANAGER = "the harness nodes have no device manager, the kubelet's DRA manager only"


def plugin_env(values: Values, container: str) -> dict[str, str]:
    """What the chart gives the container (`gpus`, `compute-domains`) for these effective values."""
    rendered = {name: env.render(values) for name, env in CHART_ENV[container].items()}
    return {name: text for name, text in rendered.items() if text is not None}


def as_flags(command: str, env: Mapping[str, str]) -> list[str]:
    """The command line that sets what `env` sets, by the command's own flag table: flags win over a
    variable of the same name in the environment the local cluster was started from."""
    flags = env_flags(command)
    missing = sorted(set(env) - set(flags))
    if missing:
        raise ValuesError(f"dra-fake {command} has no flag for {', '.join(missing)}")
    return [f"{flags[name]}={text}" for name, text in env.items()]


def inventory_document(inventory: Values) -> Values:
    """The inventory file of an `inventory` value, as the chart's "dra-fake.inventory" writes it."""
    if inventory.get("config"):
        return dict(inventory["config"])
    group: Values = {"profile": inventory["profile"], "count": int(inventory["count"])}
    if inventory.get("mig") and inventory["mig"] != "none":
        group["mig"] = inventory["mig"]
    if inventory.get("migDevices"):
        group["migDevices"] = inventory["migDevices"]
    doc: Values = {"gpus": [group]}
    for key in ("driverVersion", "cudaDriverVersion"):
        if inventory.get(key):
            doc[key] = inventory[key]
    return doc


def node_inventory(values: Values, labels: Mapping[str, str]) -> tuple[str, Values]:
    """(pool name, "" for none; inventory document) of a node with these labels: the first pool of
    `nodePools` whose nodeSelector matches, its inventory over `inventory` (a pool without its own
    `config` does not inherit one); else `inventory`. As the chart's "dra-fake.pools"."""
    for pool in values["nodePools"]:
        if all(labels.get(k) == helm_str(v) for k, v in (pool.get("nodeSelector") or {}).items()):
            own = pool.get("inventory") or {}
            merged = coalesce(values["inventory"], own)
            if not own.get("config"):
                merged["config"] = {}
            return str(pool["name"]), inventory_document(merged)
    return "", inventory_document(values["inventory"])


# ---- layers --------------------------------------------------------------------------------------


def coalesce(base: Values, over: Mapping[str, Any]) -> Values:
    """`over` on top of `base`, as Helm merges values files; neither is changed."""
    merged = copy.deepcopy(base)
    for key, new in over.items():
        if new is None:
            merged.pop(key, None)
        elif isinstance(new, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = coalesce(merged[key], new)
        else:
            merged[key] = copy.deepcopy(new)
    return merged


@functools.cache
def _chart_file(name: str) -> Any:
    text = (CHART / name).read_text()
    return json.loads(text) if name.endswith(".json") else yaml.safe_load(text)


def chart_defaults() -> Values:
    return copy.deepcopy(_chart_file("values.yaml"))


def user_values(values_file: Path | None, feature_gates: str = "") -> Values:
    """The VALUES file, with FEATURE_GATES ("A=true,B=false") on top of its featureGates."""
    user: Values = {}
    if values_file:
        try:
            loaded = yaml.safe_load(values_file.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise ValuesError(f"VALUES {values_file}: {err}") from None
        if not isinstance(loaded, dict | None):
            raise ValuesError(
                f"VALUES {values_file}: a mapping of the chart's values, not {type(loaded).__name__}"
            )
        user = loaded or {}
    try:
        gates = featuregates.gate_map(feature_gates)
    except StartupError as err:
        raise ValuesError(f"FEATURE_GATES: {err}") from None
    return coalesce(user, {"featureGates": gates}) if gates else user


def effective(user: Values) -> Values:
    """All values a plugin runs with: the chart's defaults, TEST_BED_VALUES, the user's."""
    return coalesce(coalesce(chart_defaults(), TEST_BED_VALUES), user)


def check(user: Values) -> Values:
    """The effective values, once they pass the chart's schema, the plugins' feature-gate parser and
    what the local cluster can run; values it does not use are logged."""
    values = effective(user)
    gates = values.get("featureGates")
    if not isinstance(gates, dict):
        raise ValuesError(f"featureGates: a map of gate names to true or false, not {gates!r}")
    for name, on in gates.items():
        if not isinstance(on, bool):
            raise ValuesError(f"featureGates.{name}: {on!r} is not true or false")
    # The gates are the plugins' to judge, with the error they print (an unknown one stops them).
    try:
        featuregates.parse_feature_gates(featuregates.gate_string(gates))
    except StartupError as err:
        yours = user.get("featureGates") or {}
        ours = [g for g in TEST_BED_VALUES["featureGates"] if g in str(err) and g not in yours]
        hint = "".join(f" ({g}=true is the test bed's default; {g}=false turns it off)" for g in ours)
        raise ValuesError(
            f"the plugins refuse featureGates {featuregates.gate_string(gates)}: {err}{hint}"
        ) from None
    schema = _chart_file("values.schema.json")
    validator = jsonschema.validators.validator_for(schema)(schema)
    errors = sorted(
        validator.iter_errors({**values, "featureGates": {}}), key=lambda e: list(e.absolute_path)
    )
    if errors:
        first = errors[0]
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in first.absolute_path)
        where = where.lstrip(".") or "(top level)"
        raise ValuesError(f"{where}: {first.message} (the chart's values.schema.json)")
    _refuse_what_it_cannot_run(values)
    defaults = chart_defaults()
    changed = changed_paths(defaults, coalesce(defaults, user))
    reads = [*(r for envs in CHART_ENV.values() for env in envs.values() for r in env.reads), *OTHER_READS]
    unused = [path for path in changed if not any(_under(path, r) for r in reads)]
    if unused:
        log.info("values not used by the local cluster (kind only): %s", ", ".join(unused))
    return values


def _refuse_what_it_cannot_run(values: Values) -> None:
    """Values whose effect the local cluster cannot simulate: an error, not a silent difference."""
    modes = [("mode", values["mode"])]
    modes += [(f"nodePools[{i}].mode", pool.get("mode")) for i, pool in enumerate(values["nodePools"])]
    refused = [(where, f"{mode}: {NO_DEVICE_MANAGER}") for where, mode in modes if mode == "device-plugin"]
    if values["driverNames"] != chart_defaults()["driverNames"]:
        refused.append(("driverNames", "the local cluster installs the DeviceClasses of NVIDIA's names"))
    if not values["computeDomains"]["enabled"]:
        refused.append(
            ("computeDomains.enabled", "false: the local cluster always runs the ComputeDomain side")
        )
    if refused:
        where, why = refused[0]
        raise ValuesError(
            f"{where}: not on the local cluster ({why}); try it on kind: make kind-up VALUES=..."
        )


def changed_paths(base: Any, new: Any, prefix: str = "") -> list[str]:
    """Dotted paths where `new` differs from `base`; list items as `<list>.<field>` of each item."""
    if isinstance(base, dict) and isinstance(new, dict):
        keys = sorted(set(base) | set(new))
        return [p for k in keys for p in changed_paths(base.get(k), new.get(k), f"{prefix}{k}.")]
    if isinstance(new, list) and new != base and all(isinstance(item, dict) for item in new):
        return sorted({p for item in new for p in changed_paths({}, item, prefix)})
    return [] if new == base else [prefix.rstrip(".")]


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + ".")
