"""Property-based fuzzing (tests/fuzzing.py) of what a node's plugin keeps and reads beside claims:
the kept lending state, the annotations of the node's pods, and every flag parser.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from crash_helper import NODE
from hypothesis import given
from hypothesis import strategies as st

from dra_fake.gpu import workloads
from dra_fake.gpu.lending import Lending, LendingSettings, LendingStateError, Owners
from tests.fuzzing import FUZZ, accepted_or_one_line_error, json_values, objects

# --- the lending state a plugin keeps (dra_fake.gpu.lendingfile) ---------------------------------

kept_times = st.floats(allow_nan=False) | st.integers(-(2**70), 2**70) | st.floats(0, 4e9)
well_formed_lending = st.fixed_dictionaries(  # hostile times in a valid shape
    {
        "version": st.just(1),
        "started": kept_times,
        "sampled": st.none() | kept_times,
        "gpus": st.dictionaries(
            st.sampled_from(["gpu-0", "gpu-1"]),
            st.fixed_dictionaries(
                {"state": st.sampled_from(["lendable", "busy", "unowned", "unknown"]), "since": kept_times},
                optional={"idleSince": st.none() | kept_times},
            ),
            max_size=2,
        ),
    }
)
lending_states = well_formed_lending | objects(
    {
        "version": st.just(1) | json_values,
        "started": kept_times | json_values,
        "sampled": kept_times | json_values,
        "gpus": st.dictionaries(st.text(max_size=6), json_values, max_size=3),
    }
)


@FUZZ
@given(lending_states | json_values)
def test_kept_lending_states(saved: Any) -> None:
    """Restored, or refused with one line per problem naming the file; a restored state renders
    its taints and takes a sample (a time no taint can show would stop the plugin's start)."""

    def restore() -> None:
        state = Lending.restored(LendingSettings(), 1_800_000_000.0, saved, "fuzz")
        gpus = sorted(state.states())
        state.taints(gpus)
        state.observe(1_800_000_005.0, {gpu: Owners(True, 3) for gpu in gpus})

    accepted_or_one_line_error(restore, (LendingStateError,), "fuzz: ")


# --- pod annotations (any pod of the node may carry them: docs/security.md) ---------------------

annotation_values = st.one_of(
    st.from_regex(r"\s*[0-9]{1,12}(\.[0-9]{0,8})?\s*(%|Mi|Gi|Ti)?\s*", fullmatch=True),
    st.from_regex(r"\s*[0-9]{1,4}\s*(-\s*[0-9]{1,4})?\s*", fullmatch=True),
    # past Python's int() digit limit (4300)
    st.builds(lambda n, unit: "9" * n + unit, st.integers(4000, 6000), st.sampled_from(["", "Gi", "%"])),
    st.text(max_size=200),
    json_values,
)
load_annotations = st.dictionaries(
    st.sampled_from([workloads.ANNOTATION_UTILIZATION, workloads.ANNOTATION_MEMORY]) | st.text(max_size=8),
    annotation_values,
    max_size=3,
)


@FUZZ
@given(load_annotations | json_values)
def test_simulated_load_annotations(annotations: Any) -> None:
    accepted_or_one_line_error(lambda: workloads.parse_load(annotations), (workloads.LoadError,))


node_pods = st.lists(
    objects(
        {
            "metadata": objects(
                {"name": st.text(max_size=4), "namespace": st.just("ns"), "annotations": load_annotations}
            ),
            "spec": objects(
                {
                    "resourceClaims": st.lists(
                        objects({"name": st.just("gpu"), "resourceClaimName": st.just("c")}), max_size=2
                    ),
                    "containers": st.lists(
                        objects(
                            {
                                "name": st.text(max_size=4),
                                "resources": objects({"claims": st.lists(objects({"name": st.just("gpu")}))}),
                            }
                        ),
                        max_size=2,
                    ),
                }
            ),
            "status": objects({"phase": st.sampled_from(["Running", "Succeeded"])}),
        }
    ),
    max_size=3,
)


@FUZZ
@given(node_pods)
def test_the_pods_of_a_node(pods: list[Any]) -> None:
    """Whatever the pods of the node carry, the attribution returns: a pod it cannot read is an
    error of that pod alone, and a well-formed pod beside them is still attributed."""
    good = {
        "metadata": {"name": "good", "namespace": "ns", "uid": "u"},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "good"}],
            "containers": [{"name": "main", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }
    holdings = [
        workloads.ClaimHolding("ns", "c", (workloads.HeldDevice("gpu-0", NODE, ("gpu",)),)),
        workloads.ClaimHolding("ns", "good", (workloads.HeldDevice("gpu-1", NODE, ("gpu",)),)),
    ]
    users, errors = workloads.users_by_device([*pods, good], holdings)
    assert [u.pod for u in users["gpu-1"]] == ["good"] and "ns/good" not in errors
    assert all(e.strip() and "\n" not in e for e in errors.values())


# --- flag parsers (every flag or environment variable parsed beyond argparse's choices) ---------

flag_text = st.one_of(
    st.text(max_size=40),
    st.from_regex(r"[ ,]*([A-Za-z0-9]{0,12}(=(true|false|[a-z]{0,5}))?[ ,]+){0,4}", fullmatch=True),
    st.from_regex(r"v?[0-9]{1,6}\.[0-9]{1,6}(\.[0-9]{0,3})?", fullmatch=True),
    st.builds(lambda n: "9" * n, st.integers(4000, 5000)),  # past Python's int() digit limit
    st.sampled_from(["all", "xids", "13,31", "disabled", "memory", "unlimited", "42", "-1", "²", "٣"]),
)


def _flag_parsers() -> list[tuple[str, Callable[[str], object], tuple[type[Exception], ...]]]:
    from dra_fake.cli import parse_server_version
    from dra_fake.core import featuregates
    from dra_fake.core.kubeconfig import StartupError
    from dra_fake.deviceplugin.config import ConfigError, parse_bool
    from dra_fake.deviceplugin.configselect import ConfigSelectionError, parse_fallbacks
    from dra_fake.deviceplugin.plugin import health_checks
    from dra_fake.fleet.main import parse_labels
    from dra_fake.gpu.plugin import parse_additional_xids
    from dra_fake.gpu.shares import SharesSettingError, node_mode

    return [
        ("--feature-gates", featuregates.parse_feature_gates, (StartupError,)),
        ("--additional-xids-to-ignore", parse_additional_xids, (StartupError,)),
        ("DP_DISABLE_HEALTHCHECKS", health_checks, (StartupError,)),
        ("--fail-on-init-error", lambda raw: parse_bool(raw, "failOnInitError"), (ConfigError,)),
        ("FALLBACK_STRATEGIES", parse_fallbacks, (ConfigSelectionError,)),
        ("--consumable-shares", lambda raw: node_mode(raw, True), (SharesSettingError,)),
        ("--node-label", lambda raw: parse_labels([raw]), (ValueError,)),
        ("--server-version", parse_server_version, (SystemExit,)),
    ]


FLAG_PARSERS = _flag_parsers()


@FUZZ
@given(st.sampled_from(range(len(FLAG_PARSERS))), flag_text)
def test_flag_parsers(which: int, raw: str) -> None:
    _, parse, errors = FLAG_PARSERS[which]
    accepted_or_one_line_error(lambda: parse(raw), errors)
