"""Property-based fuzzing (hypothesis) of everything user-controlled the plugins decode: opaque
configs of both drivers, claims and their allocation results, inventory configs, checkpoint files
(here); the kept lending state, pod annotations and flag parsers (tests/test_fuzz_node.py).

Each target gets valid shapes with hostile values and plain garbage. The property: the input is
accepted, or rejected with the target's own error type and a one-line message; nothing else
escapes (tests/fuzzing.py). `make test` runs FUZZ_EXAMPLES (2,000) cases per target,
deterministically and without a deadline; `make fuzz` runs 100,000 random ones where a case over
100 ms fails (docs/reliability.md#fuzzing has the latest figures).
"""

from __future__ import annotations

import hashlib
import json
import tempfile
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
from dra_fake.gpu.claimdata import GpuClaimData
from dra_fake.gpu.inventory import InventoryError, build_inventory, parse_config
from dra_fake.gpu.profiles import load_profiles
from tests.fuzzing import FUZZ, accepted_or_one_line_error, json_values, objects, quantities

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
