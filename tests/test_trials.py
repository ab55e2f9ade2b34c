"""dra_fake.core.trials: DRA_FAKE_WITHOUT switches each piece of machinery to the plain way it
replaced (bench/machinery.py measures both); each test asserts the plain path was taken."""

from __future__ import annotations

import gc
import http.client
import json
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from unittest import mock

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from dra_fake import cli
from dra_fake.core import httpconn, kube, trials, yamlio
from dra_fake.core.checkpoint import CheckpointData, ClaimEntry
from dra_fake.core.checkpointcodec import Codec
from dra_fake.core.checkpointstore import CheckpointStore
from dra_fake.fleet import main as fleet_main
from dra_fake.gpu.claimdata import GpuClaimData

Without = Callable[[str], None]


@pytest.fixture
def without(monkeypatch: pytest.MonkeyPatch) -> Iterator[Without]:
    """Set DRA_FAKE_WITHOUT for this test (the value is read once per process: forgotten)."""

    def switch(value: str) -> None:
        monkeypatch.setenv(trials.ENV, value)
        trials.switched_off.cache_clear()

    yield switch
    trials.switched_off.cache_clear()


def test_the_list_is_parsed_and_an_unknown_name_is_an_error_naming_the_value(without: Without) -> None:
    assert trials.parse(" journal, ,httpconn") == {"journal", "httpconn"}
    assert trials.parse("") == frozenset()
    with pytest.raises(
        trials.UnknownPieceError, match=r"DRA_FAKE_WITHOUT='journal,jit'.*unknown piece\(s\) jit"
    ):
        trials.parse("journal,jit")
    without("gcfreeze")
    assert trials.without("gcfreeze") and not trials.without("journal")
    with pytest.raises(trials.UnknownPieceError, match="'nope'"):
        trials.without("nope")


def test_the_cli_refuses_to_start_with_an_unknown_name(
    without: Without, capsys: pytest.CaptureFixture[str]
) -> None:
    without("httpconn,turbo")
    assert cli.main(["render-slices", "--node-name", "n"]) == 2
    assert "DRA_FAKE_WITHOUT='httpconn,turbo'" in capsys.readouterr().err


class _Answers(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    ports: list[int] = []  # noqa: RUF012  (one server per test)

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.ports.append(self.client_address[1])
        status = 404 if "missing" in self.path else 200
        answer = json.dumps({"path": self.path, "body": body.decode(), "auth": self.headers["Authorization"]})
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        data = answer.encode()
        self.wfile.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))

    do_GET = do_POST = _answer

    def log_message(self, *args: Any) -> None:
        pass


def test_without_httpconn_the_same_requests_go_over_http_client(without: Without) -> None:
    without("httpconn")
    _Answers.ports = []
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Answers)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        configuration = client.Configuration()
        configuration.host = f"http://127.0.0.1:{srv.server_address[1]}"
        configuration.api_key = {"BearerToken": "Bearer t"}
        api = kube.TimeoutApiClient(configuration)
        original = http.client.HTTPConnection.request
        with (
            mock.patch.object(httpconn.Connection, "exchange", side_effect=AssertionError("httpconn used")),
            mock.patch.object(
                http.client.HTTPConnection, "request", autospec=True, side_effect=original
            ) as requests,
        ):
            got = kube.get_json(api, "/api/v1/nodes/{name}", name="a b")
            sent = kube.send_json(api, "POST", "/api/v1/nodes", {"x": 1})
            with pytest.raises(ApiException) as err:
                kube.get_json(api, "/api/v1/nodes/{name}", name="missing")
        assert got == {"path": "/api/v1/nodes/a%20b", "body": "", "auth": "Bearer t"}
        assert json.loads(sent["body"]) == {"x": 1}
        assert err.value.status == 404
        assert requests.call_count == 3 and len(set(_Answers.ports)) == 1  # one kept-alive connection
    finally:
        srv.shutdown()
        srv.server_close()


def _entry() -> ClaimEntry[GpuClaimData]:
    return ClaimEntry[GpuClaimData].model_validate(
        {"state": "PrepareCompleted", "name": "c", "namespace": "ns", "driverData": {}, "cdiSpec": {"a": [1]}}
    )


@pytest.mark.parametrize("off", [False, True])
def test_without_entrycache_every_entry_is_serialised_again(without: Without, off: bool) -> None:
    without("entrycache" if off else "")
    codec, entry = Codec(GpuClaimData), _entry()
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


@pytest.mark.parametrize("off", [False, True])
def test_without_yamlwriter_cdi_specs_go_through_pyyaml(without: Without, off: bool) -> None:
    without("yamlwriter" if off else "")
    doc = {"cdiVersion": "0.5.0", "devices": [{"name": "a", "containerEdits": {"env": ["X=1"]}}]}
    with mock.patch.object(yamlio, "dump_block", wraps=yamlio.dump_block) as direct:
        text = yamlio.dump(doc)
    assert text == yamlio.dump_pyyaml(doc)
    assert direct.called is not off


@pytest.mark.parametrize("off", [False, True])
def test_without_gcfreeze_nothing_is_frozen(without: Without, off: bool) -> None:
    without("gcfreeze" if off else "")
    gc.unfreeze()
    threshold = gc.get_threshold()
    try:
        fleet_main.quieter_garbage_collector()
        assert (gc.get_freeze_count() == 0) is off
    finally:
        gc.unfreeze()
        gc.set_threshold(*threshold)


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
