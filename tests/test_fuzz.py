"""Property-based fuzzing (hypothesis) of everything user-controlled the plugins decode: opaque
configs of both drivers, claims and their allocation results, inventory configs, checkpoint files.

Each target gets valid shapes with hostile values and plain garbage. The property: the input is
accepted, or rejected with the target's own error type and a one-line message; nothing else
escapes. `make test` runs FUZZ_EXAMPLES (2,000) cases per target, deterministically and without
a deadline; `make fuzz` runs 100,000 random ones where a case over 100 ms fails
(docs/reliability.md#fuzzing has the latest figures).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from crash_helper import DRIVER, NODE, make_state
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from computedomain import api as cd_api
from computedomain.plugin import configs as cd_configs
from computedomain.plugin.state import DomainClaimData
from dra_fake.core import journal
from dra_fake.core.checkpoint import FORMAT_VERSION, CorruptCheckpointError, checksum
from dra_fake.core.checkpointstore import CheckpointStore
from dra_fake.core.claims import ClaimError, parse_claim
from dra_fake.gpu import configdecode as gpu_configdecode
from dra_fake.gpu import configs as gpu_configs
from dra_fake.gpu import workloads
from dra_fake.gpu.claimdata import GpuClaimData
from dra_fake.gpu.inventory import InventoryError, build_inventory, parse_config
from dra_fake.gpu.lending import Lending, LendingSettings, LendingStateError, Owners
from dra_fake.gpu.profiles import load_profiles

FULL_RUN = os.environ.get("FUZZ_PROFILE") == "full"
settings.register_profile(
    "bounded",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "2000")),
    deadline=None,  # timing goals live in make fuzz, not in make test
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "full",
    max_examples=int(os.environ.get("FUZZ_EXAMPLES", "100000")),
    # FUZZ_DEADLINE_MS=0: no deadline (a run beside other work, where timing means nothing)
    deadline=timedelta(milliseconds=int(os.environ.get("FUZZ_DEADLINE_MS", "100"))) or None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)
FUZZ = settings.get_profile("full" if FULL_RUN else "bounded")

# --- strategies ------------------------------------------------------------------------------

scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=16,
)
quantities = st.one_of(
    st.from_regex(
        r"[+-]?[0-9]{1,40}(\.[0-9]{0,12})?([eE][+-]?[0-9]{1,12}|[KMGTPE]i|[kMGTPEmnu])?", fullmatch=True
    ),
    st.text(max_size=30),
    st.integers(),
    st.floats(allow_nan=False),
    json_values,
)


def maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A field that may be absent (None drops it), hold the strategy's value, or any JSON value."""
    return st.one_of(st.none(), strategy, json_values)


def objects(fields: dict[str, st.SearchStrategy[Any]]) -> st.SearchStrategy[dict[str, Any]]:
    """An object with some of `fields` (hostile values) and sometimes a stray field."""
    known = st.fixed_dictionaries({k: maybe(v) for k, v in fields.items()})
    stray = st.dictionaries(st.text(max_size=8), json_values, max_size=1)
    return st.builds(lambda k, s: {**s, **{a: b for a, b in k.items() if b is not None}}, known, stray)


mps = objects(
    {
        "defaultActiveThreadPercentage": st.integers(),
        "defaultPinnedDeviceMemoryLimit": quantities,
        "defaultPerDevicePinnedMemoryLimit": st.dictionaries(
            st.sampled_from(["0", "1", "gpu-0", "GPU-x"]) | st.text(max_size=8), quantities, max_size=3
        ),
    }
)
sharing = objects(
    {
        "strategy": st.sampled_from(["TimeSlicing", "MPS", ""]) | st.text(max_size=10),
        "timeSlicingConfig": objects({"interval": st.sampled_from(["Default", "Short", "Medium", "Long"])}),
        "mpsConfig": mps,
    }
)
gpu_parameters = objects(
    {
        "apiVersion": st.just(gpu_configs.API_VERSION) | st.text(max_size=10),
        "kind": st.sampled_from(["GpuConfig", "MigDeviceConfig", "VfioDeviceConfig"]) | st.text(max_size=10),
        "sharing": sharing,
        "iommu": objects({"backendPolicy": st.text(max_size=10), "enableAPIDevice": st.booleans()}),
    }
)
cd_parameters = objects(
    {
        "apiVersion": st.just(cd_api.API_VERSION) | st.text(max_size=10),
        "kind": st.sampled_from([cd_api.CHANNEL_KIND, cd_api.DAEMON_KIND]) | st.text(max_size=10),
        "domainID": st.uuids().map(str) | st.text(max_size=10),
        "allocationMode": st.sampled_from([cd_api.ALLOCATION_SINGLE, cd_api.ALLOCATION_ALL]),
    }
)


def config_entries(driver: str, parameters: st.SearchStrategy[Any]) -> st.SearchStrategy[list[Any]]:
    entry = objects(
        {
            "source": st.sampled_from(["FromClass", "FromClaim"]),
            "requests": st.lists(st.sampled_from(["gpu", "mig", "r"]), max_size=2),
            "opaque": objects({"driver": st.just(driver), "parameters": parameters}),
        }
    )
    return st.lists(entry | json_values, max_size=3)


DEVICES = [
    "gpu-0",
    "gpu-1",
    "gpu-2-mig-1g10gb-19-0",
    "gpu-3",
    "gpu-3-mig-1g10gb-19-0",
    "gpu-3-mig-2g20gb-14-0",
]
results = st.lists(
    objects(
        {
            "request": st.sampled_from(["gpu", "mig", "r"]),
            "driver": st.just(DRIVER),
            "pool": st.just(NODE),
            "device": st.sampled_from(DEVICES) | st.text(max_size=10),
            "adminAccess": st.booleans(),
            "shareID": st.uuids().map(str),
            "tolerations": st.lists(
                objects(
                    {
                        "key": st.sampled_from(["dra-fake.dev/not-lendable", ""]) | json_values,
                        "operator": st.sampled_from(["Exists", "Equal"]) | json_values,
                        "value": st.sampled_from(["busy", "unowned"]) | json_values,
                        "effect": st.sampled_from(["NoExecute", "NoSchedule", ""]) | json_values,
                        "tolerationSeconds": st.integers() | json_values,
                    }
                )
                | json_values,
                max_size=2,
            )
            | json_values,
        }
    )
    | json_values,
    max_size=3,
)
claims = objects(
    {
        "metadata": objects(
            {"uid": st.uuids().map(str), "name": st.just("c"), "namespace": st.just("default")}
        ),
        "status": objects(
            {
                "allocation": objects(
                    {
                        "devices": objects(
                            {"results": results, "config": config_entries(DRIVER, gpu_parameters)}
                        )
                    }
                )
            }
        ),
    }
)

# --- the property ----------------------------------------------------------------------------


def accepted_or_one_line_error(
    fn: Callable[[], object], errors: tuple[type[Exception], ...], line_prefix: str | None = None
) -> None:
    """`line_prefix`: a file's validation may list several problems, one line each, each
    starting with the file's name."""
    try:
        fn()
    except errors as err:
        message = str(err)
        assert message.strip(), f"{type(err).__name__} without a message"
        if line_prefix is None:
            assert "\n" not in message, f"multi-line error: {message!r}"
        else:
            assert all(line.startswith(line_prefix) for line in message.split("\n")), message


# --- targets ---------------------------------------------------------------------------------


@FUZZ
@given(config_entries(DRIVER, gpu_parameters))
def test_gpu_opaque_configs(entries: list[Any]) -> None:
    def decode() -> None:
        for claim_config in gpu_configdecode.decode_claim_configs(DRIVER, entries):
            config = gpu_configs.normalize(claim_config.config, gpu_configs.FeatureGates.of("MPSSupport"))
            gpu_configs.validate(config, gpu_configs.FeatureGates.of("MPSSupport", "TimeSlicingSettings"))

    accepted_or_one_line_error(decode, (gpu_configs.ConfigError,))


@FUZZ
@given(config_entries(cd_api.DRIVER_NAME, cd_parameters))
def test_compute_domain_opaque_configs(entries: list[Any]) -> None:
    accepted_or_one_line_error(
        lambda: cd_configs.decode_claim_configs(cd_api.DRIVER_NAME, entries), (cd_configs.CdConfigError,)
    )


@FUZZ
@given(claims | json_values)
def test_claims_and_allocation_results(claim: Any) -> None:
    accepted_or_one_line_error(lambda: parse_claim(claim, DRIVER), (ClaimError,))


@pytest.fixture(scope="module")
def gpu_root() -> Any:
    with tempfile.TemporaryDirectory() as root:
        yield Path(root)


@settings(FUZZ, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(claim=claims)
def test_prepare_of_hostile_claims_fails_only_that_claim_and_leaves_nothing(
    gpu_root: Path, claim: Any
) -> None:
    """The whole prepare path, files included: a rejected claim writes nothing, an accepted one
    unprepares to nothing."""
    state = make_state(gpu_root)
    accepted_or_one_line_error(lambda: state.prepare(claim), (ClaimError,))
    uid = claim.get("metadata", {}).get("uid") if isinstance(claim.get("metadata"), dict) else None
    if isinstance(uid, str) and uid:
        state.unprepare(uid)
    assert state.prepared_claims() == {}
    assert not list(state.cdi.root.glob("*.json")), "a CDI spec outlived its claim"


profiles = load_profiles(())
inventory_configs = objects(
    {
        "gpus": st.lists(
            objects(
                {
                    "count": st.integers(min_value=-1, max_value=10),
                    "profile": st.sampled_from(sorted(profiles)) | st.text(max_size=8),
                    "mig": st.sampled_from(["none", "static", "dynamic"]) | st.text(max_size=6),
                    "migDevices": st.lists(
                        objects(
                            {
                                "profile": st.sampled_from(["1g.10gb", "2g.20gb", "7g.80gb"]),
                                "start": st.integers(),
                            }
                        ),
                        max_size=3,
                    ),
                    "overrides": st.dictionaries(
                        st.sampled_from(
                            ["memoryBytes", "productName", "driverVersion", "migProfiles", "numa"]
                        )
                        | st.text(max_size=8),
                        json_values,
                        max_size=2,
                    ),
                }
            ),
            max_size=3,
        ),
        "driverVersion": st.text(max_size=12),
        "cudaDriverVersion": st.text(max_size=12),
    }
)


@FUZZ
@given(inventory_configs | json_values)
def test_inventory_configs(data: Any) -> None:
    accepted_or_one_line_error(
        lambda: build_inventory(parse_config(data, "fuzz"), "node-a", profiles, source="fuzz"),
        (InventoryError,),
        "fuzz: ",
    )


def envelope(data: Any, version: Any = FORMAT_VERSION) -> bytes:
    return json.dumps({"version": version, "checksum": checksum(data), "data": data}).encode()


claim_entries = st.dictionaries(
    st.uuids().map(str),
    objects(
        {
            "state": st.sampled_from(["PrepareStarted", "PrepareCompleted"]),
            "name": st.text(max_size=8),
            "namespace": st.text(max_size=8),
            "preparedDevices": st.lists(json_values, max_size=2),
            "driverData": json_values,
            "cdiSpec": json_values,
        }
    ),
    max_size=3,
)
checkpoint_files = st.one_of(
    st.binary(max_size=200),
    st.builds(envelope, objects({"nodeBootID": st.text(max_size=8), "claims": claim_entries})),
    st.builds(envelope, json_values, st.sampled_from([1, 2, 3]) | json_values),
)


@FUZZ
@given(checkpoint_files, st.sampled_from([GpuClaimData, DomainClaimData]))
def test_checkpoint_files(raw: bytes, payload: Any) -> None:
    store = CheckpointStore(Path(tempfile.gettempdir()), payload, Path("/nonexistent"))
    accepted_or_one_line_error(lambda: store.codec.decode(raw), (CorruptCheckpointError,))


def journal_line(body: Any) -> bytes:
    raw = json.dumps(body).encode()
    return hashlib.sha256(raw).hexdigest().encode() + b" " + raw + b"\n"


journal_files = st.one_of(
    st.binary(max_size=200),
    st.lists(
        st.one_of(
            st.builds(journal_line, json_values),
            st.builds(journal_line, objects({"base": st.text(max_size=8)})),
            st.builds(journal_line, objects({"uid": st.text(max_size=8), "entry": json_values})),
            st.binary(max_size=40),
        ),
        max_size=5,
    ).map(b"".join),
)


@FUZZ
@given(journal_files)
def test_checkpoint_journals(raw: bytes) -> None:
    accepted_or_one_line_error(lambda: journal.parse(raw), (journal.JournalError,))


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
