"""The GPU driver's public API: what the modes beside the kubelet plugin (the device plugin, fleet
mode) use of it. They import this module only (import-linter holds them to it, pyproject.toml), so
the driver's other modules may change without them noticing; what they need more goes here.

It is: a node's GPUs (the inventory config, GPU models, devices), the flags the three modes share,
what a container gets (device nodes, edits, the in-container nvidia-smi), what a node publishes
(slices, tainted by faults; GPU Feature Discovery's labels), and a node's runtime: its per-node
services (dra_fake.gpu.runtime).
"""

from __future__ import annotations

from dra_fake.gpu.attach import ANNOTATION_OUTCOME as ATTACH_OUTCOME_ANNOTATION
from dra_fake.gpu.devices import AllocatableDevice
from dra_fake.gpu.devnodes import MODES as DEVICE_NODE_MODES
from dra_fake.gpu.devnodes import DeviceNodePolicy, DeviceNodes
from dra_fake.gpu.edits import common_edits, gpu_edits
from dra_fake.gpu.faults import DEFAULT_IGNORED_XIDS, Effects, servable_taints
from dra_fake.gpu.faults import GROUP as FAULT_GROUP
from dra_fake.gpu.faults import KIND as FAULT_KIND
from dra_fake.gpu.faults import PLURAL as FAULT_PLURAL
from dra_fake.gpu.faults import VERSION as FAULT_VERSION
from dra_fake.gpu.gfd import MIG_STRATEGIES, Shared, gfd_labels, profile_in_resource_name
from dra_fake.gpu.inventory import (
    Inventory,
    InventoryConfig,
    InventoryError,
    PhysicalGpu,
    build_inventory,
    default_config,
    load_inventory,
    parse_config,
    whole_gpu,
)
from dra_fake.gpu.nodelabels import new_node_labels
from dra_fake.gpu.nvidia_smi import NvidiaSmi
from dra_fake.gpu.plugin import GATE_HEALTH_CHECK, parse_additional_xids, parse_feature_gates
from dra_fake.gpu.profiles import GpuProfile, load_profiles
from dra_fake.gpu.runtime import Host, Node, NodeRuntime, NodeSettings
from dra_fake.gpu.slices import desired_slices
from dra_fake.gpu.taintrules import Drain, RuleInputError, Rules
from dra_fake.gpu.workloads import ANNOTATION_UTILIZATION

__all__ = [
    "ANNOTATION_UTILIZATION",
    "ATTACH_OUTCOME_ANNOTATION",
    "DEFAULT_IGNORED_XIDS",
    "DEVICE_NODE_MODES",
    "FAULT_GROUP",
    "FAULT_KIND",
    "FAULT_PLURAL",
    "FAULT_VERSION",
    "GATE_HEALTH_CHECK",
    "MIG_STRATEGIES",
    "AllocatableDevice",
    "DeviceNodePolicy",
    "DeviceNodes",
    "Drain",
    "Effects",
    "GpuProfile",
    "Host",
    "Inventory",
    "InventoryConfig",
    "InventoryError",
    "Node",
    "NodeRuntime",
    "NodeSettings",
    "NvidiaSmi",
    "PhysicalGpu",
    "RuleInputError",
    "Rules",
    "Shared",
    "build_inventory",
    "common_edits",
    "default_config",
    "desired_slices",
    "gfd_labels",
    "gpu_edits",
    "load_inventory",
    "load_profiles",
    "new_node_labels",
    "parse_additional_xids",
    "parse_config",
    "parse_feature_gates",
    "profile_in_resource_name",
    "servable_taints",
    "whole_gpu",
]
