"""dra_fake.core.trials: DRA_FAKE_WITHOUT names the pieces of machinery a process runs without
(bench/machinery.py measures each with and without); each piece's test, that the plain path is
taken without it, lives beside the piece's own tests (tests/trialswitch.py's `without`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_fake import cli
from dra_fake.core import trials
from dra_fake.core.checkpoint import CheckpointData, ClaimEntry
from dra_fake.core.checkpointcodec import Codec
from dra_fake.core.checkpointstore import CheckpointStore
from dra_fake.gpu.claimdata import GpuClaimData
from tests.trialswitch import Without


def test_the_list_is_parsed_and_an_unknown_name_is_an_error_naming_the_value(without: Without) -> None:
    assert trials.parse(" journal, ,journal ") == {"journal"}
    assert trials.parse("") == frozenset()
    with pytest.raises(
        trials.UnknownPieceError, match=r"DRA_FAKE_WITHOUT='journal,jit'.*unknown piece\(s\) jit"
    ):
        trials.parse("journal,jit")
    without("journal")
    assert trials.without("journal") and trials.switched_off() == {"journal"}
    with pytest.raises(trials.UnknownPieceError, match="'nope'"):
        trials.without("nope")


def test_the_cli_refuses_to_start_with_an_unknown_name(
    without: Without, capsys: pytest.CaptureFixture[str]
) -> None:
    without("journal,turbo")
    assert cli.main(["render-slices", "--node-name", "n"]) == 2
    assert "DRA_FAKE_WITHOUT='journal,turbo'" in capsys.readouterr().err


def _entry() -> ClaimEntry[GpuClaimData]:
    return ClaimEntry[GpuClaimData].model_validate(
        {"state": "PrepareCompleted", "name": "c", "namespace": "ns", "driverData": {}, "cdiSpec": {"a": [1]}}
    )


def test_without_journal_every_save_rewrites_the_checkpoint_alone(tmp_path: Path, without: Without) -> None:
    boot = tmp_path / "boot_id"
    boot.write_text("boot-a")
    store = CheckpointStore(tmp_path / "plugin", GpuClaimData, boot, on_corrupt=lambda _: None)
    store.save(store.load().data)  # a journal left by a run with it: removed at the next save
    assert store.journal_path.exists()
    without("journal")
    codec = Codec(GpuClaimData)
    for uid in ("a", "b", "c"):
        data = store.load().data
        data.claims[uid] = _entry()
        store.save(data, durable=False)
        assert not store.journal_path.exists()
        assert uid in codec.decode(store.path.read_bytes()).claims  # the file alone holds the save
    again = CheckpointStore(tmp_path / "plugin", GpuClaimData, boot).load()
    assert again.status == "ok" and set(again.data.claims) == {"a", "b", "c"}
    assert isinstance(again.data, CheckpointData)
