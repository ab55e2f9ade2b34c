"""The driver's feature gates: one parser for both kubelet plugins (dra_fake/core/featuregates.py)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from prometheus_client import REGISTRY

from dra_fake.core import featuregates
from dra_fake.core.kubeconfig import StartupError


def test_gate_map_keeps_false_gates_and_a_later_entry_wins() -> None:
    assert featuregates.gate_map(" MPSSupport=true, DynamicMIG=FALSE,MPSSupport=false,") == {
        "MPSSupport": False,
        "DynamicMIG": False,
    }
    assert featuregates.gate_map("") == {}


def test_gate_string_is_sorted_as_the_chart_renders_it() -> None:
    assert featuregates.gate_string({"TimeSlicingSettings": True, "MPSSupport": False}) == (
        "MPSSupport=false,TimeSlicingSettings=true"
    )


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            "Bogus=true",
            "--feature-gates: unknown feature gate 'Bogus' (known: TimeSlicingSettings, MPSSupport",
        ),
        ("MPSSupport=yes", "--feature-gates: MPSSupport='yes': the value must be true or false"),
        ("MPSSupport", "--feature-gates: MPSSupport='': the value must be true or false"),
        ("MPS\nSupport=on", "--feature-gates: 'MPS\\nSupport'='on': the value must be true or false"),
        (
            "DynamicMIG=true,NVMLDeviceHealthCheck=true",
            "feature gate DynamicMIG is currently mutually exclusive with NVMLDeviceHealthCheck",
        ),
    ],
)
def test_bad_gates_are_refused_naming_the_gate(raw: str, message: str) -> None:
    with pytest.raises(StartupError) as err:
        featuregates.parse_feature_gates(raw)
    assert str(err.value).startswith(message)


def test_only_gates_set_true_or_on_by_default_are_enabled() -> None:
    assert featuregates.parse_feature_gates(
        "MPSSupport=true,TimeSlicingSettings=false,ComputeDomainCliques=false"
    ) == {"MPSSupport", "IMEXDaemonsWithDNSNames", "CrashOnNVLinkFabricErrors"}


def test_nvidias_compute_domain_gates_are_accepted_as_its_chart_sets_them() -> None:
    """NVIDIA's chart passes one FEATURE_GATES to both plugins; its ComputeDomain gates (beta, on)
    must not stop ours."""
    assert featuregates.parse_feature_gates(
        "IMEXDaemonsWithDNSNames=true,CrashOnNVLinkFabricErrors=true"
    ) >= {
        "IMEXDaemonsWithDNSNames",
        "CrashOnNVLinkFabricErrors",
    }


def test_export_shows_every_known_gate() -> None:
    featuregates.export(frozenset({"TimeSlicingSettings"}))
    values = {
        name: REGISTRY.get_sample_value("dra_fake_feature_enabled", {"name": name})
        for name in featuregates.KNOWN_GATES
    }
    assert values == {
        "TimeSlicingSettings": 1,
        "MPSSupport": 0,
        "DynamicMIG": 0,
        "NVMLDeviceHealthCheck": 0,
        "ConsumableShares": 0,
        "IMEXDaemonsWithDNSNames": 0,
        "ComputeDomainCliques": 0,
        "CrashOnNVLinkFabricErrors": 0,
    }


@pytest.mark.parametrize("command", ["gpu-kubelet-plugin", "compute-domain-kubelet-plugin"])
def test_both_plugins_refuse_an_unknown_gate_at_start(command: str) -> None:
    """NVIDIA's chart gives FEATURE_GATES to both containers, and both binaries parse one registry."""
    out = subprocess.run(
        [sys.executable, "-m", "dra_fake", command, "--node-name=n"],
        env={"FEATURE_GATES": "TimeSlicingSettings=true,Bogus=true", "PATH": ""},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"dra-fake {command}: error: --feature-gates: unknown feature gate 'Bogus'")
