"""dra_fake.core.checkpointcodec's per-entry serialisations, kept while an entry is unchanged (the
entrycache piece of dra_fake.core.trials): without it, every entry is serialised again."""

from __future__ import annotations

from unittest import mock

import pytest

from dra_fake.core.checkpoint import ClaimEntry
from dra_fake.core.checkpointcodec import Codec
from dra_fake.gpu.claimdata import GpuClaimData
from tests.trialswitch import Without


@pytest.mark.parametrize("off", [False, True])
def test_without_entrycache_every_entry_is_serialised_again(without: Without, off: bool) -> None:
    without("entrycache" if off else "")
    codec = Codec(GpuClaimData)
    entry = ClaimEntry[GpuClaimData].model_validate(
        {"state": "PrepareCompleted", "name": "c", "namespace": "ns", "driverData": {}, "cdiSpec": {"a": [1]}}
    )
    with mock.patch.object(
        ClaimEntry, "model_dump", autospec=True, side_effect=ClaimEntry.model_dump
    ) as dump:
        first = codec.entry_json("u", entry)
        entry.state = "PrepareStarted"  # a changeable field: the cached body is reused when on
        second = codec.entry_json("u", entry)
        third = codec.entry_json("u", entry)
    assert dump.call_count == (3 if off else 1)
    assert (third[1] is second[1]) is not off
    assert first[1] != second[1] == third[1] and b'"state":"PrepareStarted"' in second[1]
