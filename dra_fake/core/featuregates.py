"""The driver's feature gates (`--feature-gates` / FEATURE_GATES, Helm `featureGates`).

NVIDIA's driver keeps one registry of gates that both kubelet plugins parse from the same
FEATURE_GATES, and its chart gives it to both containers
(docs/reference/nvidia-gpu-driver.md#72-driver-feature-gates): a gate unknown to the registry stops
either plugin at start. So here: one parser for the GPU and the ComputeDomain plugin.
"""

from __future__ import annotations

from dra_fake.core.kubeconfig import StartupError

TIME_SLICING_SETTINGS = "TimeSlicingSettings"
MPS_SUPPORT = "MPSSupport"
DYNAMIC_MIG = "DynamicMIG"
NVML_DEVICE_HEALTH_CHECK = "NVMLDeviceHealthCheck"
CONSUMABLE_SHARES = "ConsumableShares"
# NVIDIA's ComputeDomain gates (beta, on by default): accepted so that a FEATURE_GATES written for
# NVIDIA's chart starts here too; dra-fake's simulated IMEX daemon behaves the same either way
# (docs/reference/nvidia-gpu-driver.md#72-driver-feature-gates).
COMPUTE_DOMAIN_GATES = ("IMEXDaemonsWithDNSNames", "ComputeDomainCliques", "CrashOnNVLinkFabricErrors")
KNOWN_GATES = (
    TIME_SLICING_SETTINGS,
    MPS_SUPPORT,
    DYNAMIC_MIG,
    NVML_DEVICE_HEALTH_CHECK,
    CONSUMABLE_SHARES,
    *COMPUTE_DOMAIN_GATES,
)
DEFAULT_ON = frozenset(COMPUTE_DOMAIN_GATES)
# NVIDIA's driver refuses these together at start (the reference above).
EXCLUSIVE_GATES = ((DYNAMIC_MIG, NVML_DEVICE_HEALTH_CHECK),)


def gate_map(raw: str) -> dict[str, bool]:
    """ "A=true,B=false" -> {"A": True, "B": False}, in the given order; a later entry of a gate wins.
    Checks the form only, not the names (parse_feature_gates does)."""
    gates: dict[str, bool] = {}
    for item in filter(None, (s.strip() for s in raw.split(","))):
        name, _, value = item.partition("=")
        if value.lower() not in ("true", "false"):
            shown = name if name.isprintable() else repr(name)  # one line, whatever the value held
            raise StartupError(f"--feature-gates: {shown}={value!r}: the value must be true or false")
        gates[name.strip()] = value.lower() == "true"
    return gates


def gate_string(gates: dict[str, bool]) -> str:
    """{"B": False, "A": True} -> "A=true,B=false": sorted, as the chart renders `featureGates`."""
    return ",".join(f"{name}={str(on).lower()}" for name, on in sorted(gates.items()))


def parse_feature_gates(raw: str) -> frozenset[str]:
    """The enabled gates of a --feature-gates value (the gates on by default included unless set
    false); an unknown gate, a value other than true or false, or a refused combination is a
    StartupError."""
    gates = gate_map(raw)
    for name in gates:
        if name not in KNOWN_GATES:
            raise StartupError(
                f"--feature-gates: unknown feature gate {name!r} (known: {', '.join(KNOWN_GATES)})"
            )
    enabled = frozenset(name for name in KNOWN_GATES if gates.get(name, name in DEFAULT_ON))
    for first, second in EXCLUSIVE_GATES:
        if {first, second} <= enabled:
            raise StartupError(f"feature gate {first} is currently mutually exclusive with {second}")
    return enabled


def export(enabled: frozenset[str]) -> None:
    """dra_fake_feature_enabled{name}: 1 or 0 for every known gate, as Kubernetes components show
    theirs in kubernetes_feature_enabled; what a plugin runs with, readable from outside."""
    from dra_fake.core import metrics  # here: the opaque-config decoders import this module too

    for name in KNOWN_GATES:
        metrics.FEATURE_ENABLED.labels(name=name).set(1 if name in enabled else 0)
