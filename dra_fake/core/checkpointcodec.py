"""Encoding a checkpoint (dra_fake.core.checkpoint's format), each entry recorded as written (what
the journal compares), and decoding one into a driver's typed models."""

from __future__ import annotations

import hashlib
import operator
from collections.abc import Collection
from typing import Any, Generic, NamedTuple

from pydantic import ValidationError

from dra_fake.core.checkpoint import (
    FORMAT_VERSION,
    PREPARE_STARTED,
    REASON_SCHEMA,
    V1,
    CheckpointData,
    ClaimEntry,
    ClaimState,
    CorruptCheckpointError,
    P,
    canonical_json,
    decode_document,
)

_Key = tuple[ClaimState, bool, bool]  # an entry's changeable fields: state, unpreparing, recovered


def _key(entry: ClaimEntry[Any]) -> _Key:
    return (entry.state, entry.unpreparing, entry.recovered)


def _fixed(entry: ClaimEntry[Any]) -> tuple[object, ...]:
    """The objects of an entry's other fields: replaced, never changed in place (ClaimEntry)."""
    return (entry.name, entry.namespace, entry.preparedDevices, entry.driverData, entry.cdiSpec)


class _Written(NamedTuple):
    """An entry as last serialised: the object and its changeable fields; after a PrepareStarted
    record also the objects of its other fields (held, so that `is` compares them) and the plain
    form serialised (`entry_json`)."""

    entry: ClaimEntry[Any]
    key: _Key
    fixed: tuple[object, ...]
    dump: dict[str, Any] | None


class Codec(Generic[P]):
    """Encodes and decodes the checkpoint of a driver whose per-claim payload is `payload`."""

    def __init__(self, payload: type[P]) -> None:
        self.payload = payload
        self.model: type[CheckpointData[P]] = CheckpointData[payload]  # type: ignore[valid-type]
        # uid -> the entry as last serialised: after a successful write, what the files hold
        # (CheckpointStore appends what differs)
        self._entries: dict[str, _Written] = {}

    def empty(self, boot_id: str = "") -> CheckpointData[P]:
        return self.model(nodeBootID=boot_id)

    def encode(self, data: CheckpointData[P]) -> bytes:
        return self.encode_with_checksum(data)[0]

    def encode_with_checksum(self, data: CheckpointData[P]) -> tuple[bytes, str]:
        """`{"checksum":…,"data":…,"version":…}` (keys sorted), compact, the checksum over the same
        canonical bytes that go into the file; and that checksum. The payload is serialised
        compactly (`canonical_json`), entry by entry (`entry_json`)."""
        payload = self._payload(data)
        digest = "sha256:" + hashlib.sha256(payload).hexdigest()
        raw = (
            b'{"checksum":"' + digest.encode() + b'","data":' + payload + b',"version":%d}\n' % FORMAT_VERSION
        )
        return raw, digest

    def entry_json(self, uid: str, entry: ClaimEntry[P]) -> tuple[bytes, bytes]:
        """The canonical JSON of `uid` and of `entry`; the entry recorded as written (`changes`)."""
        key, hit = _key(entry), self._entries.get(uid)
        if (
            hit is not None
            and hit.dump is not None
            and hit.entry is entry
            and all(map(operator.is_, hit.fixed, _fixed(entry)))
        ):
            # a prepare's PrepareCompleted after its PrepareStarted: only the changeable fields
            # may differ, so the entry is not dumped again
            dump = {**hit.dump, "state": key[0], "unpreparing": key[1], "recovered": key[2]}
        else:
            dump = entry.model_dump(mode="json", exclude_none=True)
        # Kept after a write-ahead record only, for the one that follows it in the same batch: the
        # plain form of every entry held would be objects the garbage collector scans for as long
        # as the claim is prepared.
        started = key[0] == PREPARE_STARTED
        self._entries[uid] = _Written(entry, key, _fixed(entry) if started else (), dump if started else None)
        return canonical_json(uid), canonical_json(dump)

    def changes(
        self, data: CheckpointData[P], touched: Collection[str] | None = None
    ) -> tuple[list[str], list[str]]:
        """What differs in `data` from the entries last serialised: the uids of new or changed
        entries (serialised by `entry_json` when written) and the uids no longer held (forgotten).
        Called at every save: one pass over the claims held, without a call per entry; or, when
        the caller names the only claims it `touched` since, over those (a save that adds or
        drops a claim it did not name still finds the counts differ and makes the whole pass)."""
        claims, entries = data.claims, self._entries
        names = claims if touched is None else dict.fromkeys(touched)  # once each, in order
        changed = [
            uid
            for uid in names
            if (entry := claims.get(uid)) is not None
            and (
                (hit := entries.get(uid)) is None
                or hit.entry is not entry
                or hit.key != (entry.state, entry.unpreparing, entry.recovered)  # _key, inlined
            )
        ]
        if touched is None:
            gone = list(entries.keys() - claims.keys())
        else:
            gone = [uid for uid in names if uid not in claims and uid in entries]
            if len(entries) + sum(uid not in entries for uid in changed) - len(gone) != len(claims):
                return self.changes(data)  # a claim added or dropped that the caller did not name
        for uid in gone:
            del entries[uid]
        return changed, gone

    def states(self) -> dict[str, tuple[ClaimState, int]]:
        """Claim UID -> (state, devices) of the entries as last serialised: after a successful
        save, what the files hold. Safe without the lock (one atomic copy of the map; each
        entry's state is the one serialised, whatever the object's fields have become since)."""
        return {uid: (hit.key[0], len(hit.entry.preparedDevices)) for uid, hit in list(self._entries.items())}

    def _payload(self, data: CheckpointData[P]) -> bytes:
        """canonical_json(data), assembled entry by entry (`entry_json`), the entries no longer
        held forgotten."""
        parts = []
        for uid in sorted(data.claims):
            uid_json, entry_json = self.entry_json(uid, data.claims[uid])
            parts.append(uid_json + b":" + entry_json)
        for gone in self._entries.keys() - data.claims.keys():
            del self._entries[gone]
        return b'{"claims":{' + b",".join(parts) + b'},"nodeBootID":' + canonical_json(data.nodeBootID) + b"}"

    def decode(self, raw: bytes) -> CheckpointData[P]:
        """Parse a checkpoint file (format 3, 2 or 1) without its journal;
        CorruptCheckpointError(reason) if it cannot be trusted."""
        version, _, data = decode_document(raw)
        return self.validate(data, version)

    def validate(self, data: dict[str, Any], version: int = FORMAT_VERSION) -> CheckpointData[P]:
        try:
            if version == V1:
                data = self._from_v1(data)
            return self.model.model_validate(data)
        except (ValidationError, TypeError, AttributeError) as exc:
            raise CorruptCheckpointError(REASON_SCHEMA, str(exc).replace("\n", " ")) from None

    def _from_v1(self, data: dict[str, Any]) -> dict[str, Any]:
        claims = {}
        for uid, entry in (data.get("claims") or {}).items():
            entry = dict(entry)
            undo = entry.pop("undo", None) or {}
            entry["driverData"] = self.payload.from_v1_undo(undo).model_dump(mode="json", exclude_none=True)
            claims[uid] = entry
        return {**data, "claims": claims}
