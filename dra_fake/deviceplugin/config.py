"""The device plugin's configuration: NVIDIA's k8s-device-plugin config file (`CONFIG_FILE`,
api/config/v1) and its flags, with its precedence (flag > environment > file) and its error
messages. Pure. Facts (sections B.2, B.3):
docs/reference/nvidia-device-plugin.md#b2-flags--env-vars-cmdnvidia-device-pluginmaingo.

Keys NVIDIA's file knows but the simulation has no use for (driver roots, GDS, GFD's section, ...)
are accepted and ignored; unknown keys are errors naming the key.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import yaml

from dra_fake.core import yamlio
from dra_fake.gpu.api import MIG_STRATEGIES  # GFD's and the device plugin's are one setting

log = logging.getLogger(__name__)

DEVICE_LIST_STRATEGIES = ("envvar", "volume-mounts", "cdi-annotations", "cdi-cri")
DEVICE_ID_STRATEGIES = ("uuid", "index")
ALLOCATION_POLICIES = ("distributed", "packed")  # sharedDevicesAllocationPolicy (replicas, MIG)
TIME_SLICING, MPS = "time-slicing", "mps"
SHARED_SUFFIX = ".shared"
DEFAULT_CDI_ANNOTATION_PREFIX = "cdi.k8s.io/"

_FLAG_KEYS = {
    "migStrategy", "failOnInitError", "mpsRoot", "nvidiaDriverRoot", "nvidiaDevRoot", "gdrcopyEnabled",
    "gdsEnabled", "mofedEnabled", "useNodeFeatureAPI", "deviceDiscoveryStrategy", "plugin", "gfd",
}  # fmt: skip
_PLUGIN_KEYS = {
    "passDeviceSpecs", "deviceListStrategy", "deviceIDStrategy", "cdiAnnotationPrefix", "nvidiaCTKPath",
    "containerDriverRoot", "sharedDevicesAllocationPolicy",
}  # fmt: skip
_TOP_KEYS = {"version", "flags", "resources", "sharing", "imex"}
_REPLICATED_KEYS = {"renameByDefault", "failRequestsGreaterThanOne", "resources"}
_RESOURCE_KEYS = {"name", "rename", "devices", "replicas"}


class ConfigError(ValueError):
    """A configuration NVIDIA's plugin would refuse; the message is its (or names the key)."""


@dataclass(frozen=True)
class ReplicatedResource:
    """`sharing.<strategy>.resources[]`: a resource whose devices are each advertised `replicas` times."""

    name: str  # nvidia.com/gpu, nvidia.com/mig-1g.10gb
    replicas: int


@dataclass(frozen=True)
class Sharing:
    strategy: str = ""  # "" (none), time-slicing or mps
    rename_by_default: bool = False
    fail_requests_greater_than_one: bool = False
    resources: tuple[ReplicatedResource, ...] = ()

    def replicas(self, resource: str) -> int:
        return next((r.replicas for r in self.resources if r.name == resource), 1)


@dataclass(frozen=True)
class PluginConfig:
    mig_strategy: str = "none"
    fail_on_init_error: bool = True
    device_list_strategy: tuple[str, ...] = ("envvar",)
    device_id_strategy: str = "uuid"
    cdi_annotation_prefix: str = DEFAULT_CDI_ANNOTATION_PREFIX
    pass_device_specs: bool = False
    mps_root: str = ""
    shared_devices_allocation_policy: str = "distributed"
    sharing: Sharing = field(default_factory=Sharing)


@dataclass(frozen=True)
class Flags:
    """What the command line or the environment set (None: not set, the file or the default decides)."""

    mig_strategy: str | None = None
    fail_on_init_error: bool | None = None
    device_list_strategy: str | None = None  # comma-separated
    device_id_strategy: str | None = None
    cdi_annotation_prefix: str | None = None
    pass_device_specs: bool | None = None
    mps_root: str | None = None
    shared_devices_allocation_policy: str | None = None


def parse_bool(raw: str, what: str) -> bool:
    value = raw.strip().lower()
    if value in ("true", "1", "t", "yes"):
        return True
    if value in ("false", "0", "f", "no"):
        return False
    raise ConfigError(f"{what}: {raw!r} is not a boolean")


def _unknown(obj: Mapping[str, Any], known: set[str], where: str) -> None:
    extra = sorted(set(obj) - known)
    if extra:
        raise ConfigError(f"{where}: unknown field {extra[0]!r} (known: {', '.join(sorted(known))})")


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"{where}: expected a mapping, got {type(value).__name__}")
    return value


def _strategies(raw: Any, where: str) -> tuple[str, ...]:
    items = raw.split(",") if isinstance(raw, str) else raw
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}: expected a strategy name or a list of them")
    out = []
    for item in items:
        name = str(item).strip()
        if name not in DEVICE_LIST_STRATEGIES:
            raise ConfigError(f"invalid --device-list-strategy option: invalid strategy: {name}")
        out.append(name)
    return tuple(dict.fromkeys(out))


def _replicated(raw: Any, where: str, strategy: str) -> Sharing | None:
    spec = _mapping(raw, where)
    if not spec:
        return None
    _unknown(spec, _REPLICATED_KEYS, where)
    resources = spec.get("resources")
    if not resources:
        raise ConfigError("no resources specified")
    out = []
    for i, entry in enumerate(resources):
        item = _mapping(entry, f"{where}.resources[{i}]")
        _unknown(item, _RESOURCE_KEYS, f"{where}.resources[{i}]")
        name = item.get("name")
        if not name:
            raise ConfigError("no resource name specified")
        name = str(name) if "/" in str(name) else f"nvidia.com/{name}"
        replicas = item.get("replicas")
        if replicas is None:
            raise ConfigError("no replicas specified")
        if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas < 2:
            raise ConfigError("number of replicas must be >= 2")
        devices = item.get("devices", "all")
        if isinstance(devices, str) and devices != "all":
            raise ConfigError(f"devices set as '{devices}' but the only valid string input is 'all'")
        if devices != "all":
            log.warning(
                "Customizing the 'devices' field in sharing.%s.resources is not yet supported", strategy
            )
        if item.get("rename"):
            log.warning("Setting the 'rename' field in sharing.%s.resources is not yet supported", strategy)
        out.append(ReplicatedResource(name, replicas))
    fail_default = strategy == MPS  # NVIDIA: MPS refuses requests of more than one replica by default
    fail = spec.get("failRequestsGreaterThanOne", fail_default)
    if not isinstance(fail, bool):
        raise ConfigError(f"{where}.failRequestsGreaterThanOne: expected true or false")
    rename = spec.get("renameByDefault", False)
    if not isinstance(rename, bool):
        raise ConfigError(f"{where}.renameByDefault: expected true or false")
    return Sharing(strategy, rename, fail, tuple(out))


def parse_config_file(text: str | None, source: str = "config file") -> dict[str, Any]:
    """The file's settings as PluginConfig field values (only those it sets)."""
    if not text or not text.strip():
        return {}
    try:
        doc = yamlio.safe_load(text)
    except yaml.YAMLError as err:
        raise ConfigError(f"{source}: not YAML or JSON: {err}") from None
    doc = _mapping(doc, source)
    _unknown(doc, _TOP_KEYS, source)
    version = doc.get("version") or "v1"
    if version != "v1":
        raise ConfigError(f"unknown version: {version}")
    if doc.get("resources"):
        log.warning("Customizing the 'resources' field is not yet supported in the config. Ignoring...")
    out: dict[str, Any] = {}
    flags = _mapping(doc.get("flags"), "flags")
    _unknown(flags, _FLAG_KEYS, "flags")
    plugin = _mapping(flags.get("plugin"), "flags.plugin")
    _unknown(plugin, _PLUGIN_KEYS, "flags.plugin")
    if "migStrategy" in flags:
        out["mig_strategy"] = str(flags["migStrategy"])
    if "failOnInitError" in flags:
        out["fail_on_init_error"] = parse_bool(str(flags["failOnInitError"]), "flags.failOnInitError")
    if "mpsRoot" in flags:
        out["mps_root"] = str(flags["mpsRoot"] or "")
    if "deviceListStrategy" in plugin:
        out["device_list_strategy"] = _strategies(
            plugin["deviceListStrategy"], "flags.plugin.deviceListStrategy"
        )
    if "deviceIDStrategy" in plugin:
        out["device_id_strategy"] = str(plugin["deviceIDStrategy"])
    if "cdiAnnotationPrefix" in plugin:
        out["cdi_annotation_prefix"] = str(plugin["cdiAnnotationPrefix"])
    if "sharedDevicesAllocationPolicy" in plugin:
        out["shared_devices_allocation_policy"] = str(plugin["sharedDevicesAllocationPolicy"])
    if "passDeviceSpecs" in plugin:
        out["pass_device_specs"] = parse_bool(str(plugin["passDeviceSpecs"]), "flags.plugin.passDeviceSpecs")
    sharing = _mapping(doc.get("sharing"), "sharing")
    _unknown(sharing, {"timeSlicing", "mps"}, "sharing")
    time_slicing = _replicated(sharing.get("timeSlicing"), "sharing.timeSlicing", TIME_SLICING)
    mps = _replicated(sharing.get("mps"), "sharing.mps", MPS)
    if mps is not None or time_slicing is not None:
        out["sharing"] = mps or time_slicing  # MPS wins when both replicate
    return out


def resolve(flags: Flags, file_text: str | None = None) -> PluginConfig:
    """Flag > environment (both in `flags`) > config file > NVIDIA's default, then validated."""
    values = parse_config_file(file_text)
    given = {
        "mig_strategy": flags.mig_strategy,
        "fail_on_init_error": flags.fail_on_init_error,
        "device_list_strategy": None
        if flags.device_list_strategy is None
        else _strategies(flags.device_list_strategy, "--device-list-strategy"),
        "device_id_strategy": flags.device_id_strategy,
        "cdi_annotation_prefix": flags.cdi_annotation_prefix,
        "pass_device_specs": flags.pass_device_specs,
        "mps_root": flags.mps_root,
        "shared_devices_allocation_policy": flags.shared_devices_allocation_policy,
    }
    values |= {k: v for k, v in given.items() if v is not None}
    config = PluginConfig(**values)
    if config.mig_strategy not in MIG_STRATEGIES:
        raise ConfigError(f"unknown MIG strategy: {config.mig_strategy}")
    if config.device_id_strategy not in DEVICE_ID_STRATEGIES:
        raise ConfigError(f"invalid --device-id-strategy option: {config.device_id_strategy}")
    if config.shared_devices_allocation_policy not in ALLOCATION_POLICIES:
        raise ConfigError(
            f"invalid --shared-devices-allocation-policy option: {config.shared_devices_allocation_policy}"
        )
    if config.sharing.strategy == MPS:
        if config.mig_strategy == "mixed":
            raise ConfigError("using --mig-strategy=mixed is not supported with MPS")
        if not config.mps_root:
            raise ConfigError("using MPS requires --mps-root to be specified")
    return config
