"""`dra-fake device-plugin`: the process. Configuration (NVIDIA's flags, environment and config
file, or the named config its Node's label picks, followed as the label changes: labelwatch), the
node's resources, the nvidia-smi files and the CDI spec, then the DevicePlugin servers,
registered with the kubelet and re-registered when it restarts, GpuFaults turning devices
unhealthy, and (as beside NVIDIA's plugin) dcgm-exporter's metrics and GFD's labels.
"""

from __future__ import annotations

import argparse
import glob
import logging
import os
import sys
import threading
from pathlib import Path

from kubernetes.client import ApiClient

from dra_fake.core import cdi, logs, nvidiahost
from dra_fake.core.atomic import atomic_write
from dra_fake.core.kube import load_kube_client
from dra_fake.core.kubeconfig import StartupError
from dra_fake.core.retry import run_forever, with_backoff
from dra_fake.deviceplugin.allocate import CDI_SPEC_FILE, cdi_spec, names_cdi
from dra_fake.deviceplugin.config import ConfigError, Flags, PluginConfig, parse_bool, resolve
from dra_fake.deviceplugin.configselect import ConfigSelectionError, ConfigSet, parse_fallbacks
from dra_fake.deviceplugin.labelwatch import ConfigLabelWatch, NodeLabel, reexec
from dra_fake.deviceplugin.resources import Resource, build_resources
from dra_fake.deviceplugin.server import DeviceHealth, DevicePlugins, unhealthy_uuids
from dra_fake.gpu.api import (
    DEFAULT_IGNORED_XIDS,
    DEVICE_NODE_MODES,
    DeviceNodePolicy,
    Effects,
    Host,
    Inventory,
    InventoryError,
    Node,
    NodeSettings,
    NvidiaSmi,
    Shared,
    load_inventory,
    parse_additional_xids,
)
from dra_fake.kubelet.signals import serve_forever

log = logging.getLogger(__name__)

KUBELET_CHECK_INTERVAL = 1.0  # how often the kubelet's socket is checked for a restart
RETRY_INTERVAL = 30.0  # NVIDIA's plugin retries a failed start after 30 s


def _flags(args: argparse.Namespace) -> Flags:
    def boolean(raw: str | None, what: str) -> bool | None:
        return None if raw is None else parse_bool(raw, what)

    return Flags(
        mig_strategy=args.mig_strategy,
        fail_on_init_error=boolean(args.fail_on_init_error, "--fail-on-init-error"),
        device_list_strategy=args.device_list_strategy,
        device_id_strategy=args.device_id_strategy,
        cdi_annotation_prefix=args.cdi_annotation_prefix,
        pass_device_specs=boolean(args.pass_device_specs, "--pass-device-specs"),
        mps_root=args.mps_root,
        shared_devices_allocation_policy=args.shared_devices_allocation_policy,
    )


def health_checks(raw: str) -> frozenset[int] | None:
    """DP_DISABLE_HEALTHCHECKS: `all` or `xids` turns them off (None); otherwise more Xids to ignore."""
    if raw.strip().lower() in ("all", "xids"):
        return None
    return DEFAULT_IGNORED_XIDS | parse_additional_xids(raw)


def dra_plugin_registered(registrar_dir: str, driver: str) -> str | None:
    """The registration socket of the DRA driver on this node, if it runs here."""
    found = sorted(glob.glob(os.path.join(registrar_dir, f"{glob.escape(driver)}*-reg.sock")))
    return found[0] if found else None


def load(
    args: argparse.Namespace, selected: str | None = None
) -> tuple[PluginConfig, Inventory, list[Resource]]:
    """Everything start-up reads; ConfigError, InventoryError, StartupError or OSError name the problem.
    `selected`: the node label's config (None: CONFIG_FILE)."""
    if selected is not None:
        text = config_set(args).text(selected)
    else:
        text = Path(args.config_file).read_text(encoding="utf-8") if args.config_file else None
    config = resolve(_flags(args), text)
    profile_dirs = [Path(args.profiles_dir)] if args.profiles_dir else []
    inventory = load_inventory(Path(args.config) if args.config else None, args.node_name, profile_dirs)
    resources = build_resources(inventory, config)
    if args.device_nodes not in DEVICE_NODE_MODES:
        raise StartupError(
            f"--device-nodes: {args.device_nodes!r} is not one of {', '.join(DEVICE_NODE_MODES)}"
        )
    dra = dra_plugin_registered(args.kubelet_registrar_directory_path, args.driver_name)
    if dra is not None:
        raise StartupError(
            f"the DRA driver {args.driver_name} serves this node's GPUs (its registration socket {dra} "
            "exists): run the device plugin or the DRA driver on a node, not both"
        )
    return config, inventory, resources


def config_set(args: argparse.Namespace) -> ConfigSet:
    fallbacks = parse_fallbacks(args.fallback_strategies)
    return ConfigSet(Path(args.config_file_srcdir), args.default_config, fallbacks)


def select_config(args: argparse.Namespace, api: ApiClient) -> str | None:
    """With CONFIG_FILE_SRCDIR: the config the node's label selects, as NVIDIA's config-manager init
    container does before the plugin starts (it waits for the API server); else None."""
    if not args.config_file_srcdir:
        return None
    label = NodeLabel(api, args.node_name, args.node_label)
    value = with_backoff(f"read Node {args.node_name}", lambda: label.get()[0], threading.Event())
    selected = config_set(args).select(value)
    log.info("node label selects a config", extra={"label": f"{args.node_label}={value}", "config": selected})
    return selected


def write_files(
    config: PluginConfig, inventory: Inventory, resources: list[Resource], args: argparse.Namespace
) -> NvidiaSmi:
    """nvidia-smi, the NVML library and the info files of every advertised device; the CDI spec when a CDI
    strategy is on."""
    smi = NvidiaSmi.from_inventory(Path(args.data_dir), inventory)
    smi.ensure_tools()
    smi.remove_stale_live_files()
    written = set()
    for resource in resources:
        for device in resource.devices:
            if device.uuid not in written:
                written.add(device.uuid)
                smi.write_info(device.device, device.uuid)
    if names_cdi(config.device_list_strategy):
        nodes = DeviceNodePolicy(args.device_nodes).current()
        spec = cdi_spec(resources, config, smi, nodes)
        cdi.validate_spec(spec)
        Path(args.cdi_root).mkdir(parents=True, exist_ok=True)
        atomic_write(Path(args.cdi_root) / CDI_SPEC_FILE, cdi.render_spec(spec), cdi.SPEC_FILE_MODE)
    return smi


def run_device_plugin(args: argparse.Namespace) -> int:
    logs.setup(args.log_level, args.log_format)
    fail_on_init_error = True
    try:
        if not args.node_name:
            raise StartupError("--node-name (NODE_NAME) is required")
        if args.allow_real_gpu_node != "true" and (refused := nvidiahost.refusal("dra-fake device-plugin")):
            print(f"dra-fake device-plugin: error: {refused}", file=sys.stderr)
            return 1  # whatever failOnInitError: waiting would not make the node safe
        fail_on_init_error = _flags(args).fail_on_init_error is not False
        api = load_kube_client(args.kubeconfig)
        selected = select_config(args, api)
        config, inventory, resources = load(args, selected)
        fail_on_init_error = config.fail_on_init_error
        ignored = health_checks(args.dp_disable_healthchecks)
        smi = write_files(config, inventory, resources, args)
    except ConfigSelectionError as err:
        # config-manager's failure, before the plugin: the pod does not start, whatever failOnInitError
        print(f"dra-fake device-plugin: error: {err}", file=sys.stderr)
        return 1
    except (ConfigError, InventoryError, StartupError, ValueError, OSError) as err:
        print(f"dra-fake device-plugin: error: {err}", file=sys.stderr)
        if fail_on_init_error:
            return 1
        # NVIDIA's plugin with failOnInitError=false: log and wait instead of crash-looping
        log.error("initialization failed; waiting (FAIL_ON_INIT_ERROR=false)", extra={"error": str(err)})
        serve_forever()
        return 0

    stop = threading.Event()
    restart_to: list[str] = []  # the config the node label switched to
    if selected is not None:

        def restart(name: str) -> None:
            restart_to.append(name)
            stop.set()

        label = NodeLabel(api, args.node_name, args.node_label)
        ConfigLabelWatch(label, config_set(args), selected, restart).start(stop)
    health = DeviceHealth()
    plugins = DevicePlugins(resources, config, args.kubelet_socket, health, smi)

    def keep_registered() -> None:
        with_backoff("serve and register the device plugins", plugins.start, stop, limit=RETRY_INTERVAL)
        while not stop.wait(KUBELET_CHECK_INTERVAL):
            if plugins.kubelet_restarted():
                log.info("the kubelet's socket was re-created; restarting the device plugins")
                return  # run_forever starts again

    threading.Thread(
        target=run_forever,
        args=("device plugins", keep_registered, stop, 0.0),
        name="registration",
        daemon=True,
    ).start()

    # The node's services (dra_fake.gpu.runtime): telemetry, GpuFaults, GFD's labels.
    replicas = {r.name.removesuffix(".shared"): r.replicas for r in resources if r.replicas > 1}
    strategy = next((r.sharing for r in resources if r.sharing), "none")
    settings = NodeSettings(
        args.driver_name,
        ignored_xids=ignored or DEFAULT_IGNORED_XIDS,
        dcgm_port=args.dcgm_exporter_port,
        node_labels=args.node_labels == "true",
        mig_strategy=config.mig_strategy,
        sharing=Shared(strategy, replicas, config.sharing.rename_by_default),
    )
    runtime = Host(settings, lambda: api, stop).node(Node(args.node_name, inventory, nvidia_smi=smi))

    def apply(effects: Effects) -> None:
        if ignored is not None:
            health.mark(unhealthy_uuids(effects.health, inventory.devices))

    runtime.on_faults(apply)
    runtime.start()
    log.info(
        "device plugin started",
        extra={
            "resources": {r.name: len(r.devices) for r in resources},
            "strategies": config.device_list_strategy,
        },
    )

    class Closing:
        def stop(self, grace: float | None = None) -> None:
            health.close()  # ends the ListAndWatch streams
            plugins.stop(grace)

    serve_forever(Closing(), stop_event=stop)
    if restart_to:
        reexec()
    return 0
