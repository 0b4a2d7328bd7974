"""The import's fast paths are taken (issue 26's speed), not only correct.

A fast path that fails falls back to the general one with the same result, so a mutant that
breaks it (``head -= ...``, a guard turned around, the fast text never tried) changes no
digest and no row, only the time: these tests say the fast path is the one that answers for
the entries an import meets (``wire()`` or the full storability walk made to fail), and what
it answers."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from sandbox_ledger import LedgerEntry, _json
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.sql import rows
from sandbox_ledger.transfer import _canonical_text, content_digest
from verification.digests import old_canonical


def _plain_entries() -> list[LedgerEntry]:
    """What an export holds: every event kind, flat payloads of each JSON scalar type, an
    error, a branch."""

    def e(event: str, payload: Any = None, **kw: Any) -> LedgerEntry:
        return LedgerEntry(
            ts=1_700_000_000_123,
            name="job",
            sandbox_id="sb-1",
            step_index=2,
            event=event,
            payload=payload,
            **kw,
        )

    return [
        e("sandbox.created"),
        e("exec.started", branch=0),
        e("exec.complete", {"exitCode": 0, "durationMs": 12.5, "ok": True, "none": None, "s": "é"}),
        e("exec.failed", "boom", error="exit 1"),
        e("checkpoint.created", {"snapshotId": "snap-1", "name": "before"}),
        e("custom", 7, branch=3, error=""),
        e("custom", 1.5),
        e("custom", False),
        e("sandbox.closed", {}),
    ]


@pytest.mark.parametrize("entry", _plain_entries(), ids=lambda e: e.event)
def test_the_fast_text_answers_for_a_plain_entry(
    entry: LedgerEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = old_canonical(entry)
    digest = hashlib.sha256(expected.encode("utf-8", "surrogatepass")).hexdigest()[:32]
    assert _canonical_text(entry) == expected

    def no_wire(self: LedgerEntry) -> dict[str, Any]:
        raise AssertionError("the digest of a plain entry went through wire()")

    monkeypatch.setattr(LedgerEntry, "wire", no_wire)
    assert content_digest(entry) == digest


@pytest.mark.parametrize(
    "payload",
    [[1, 2], {"a": {"b": 1}}, {"a": [1]}],
    ids=["list", "nested-object", "object-holding-a-list"],
)
def test_a_nested_payload_is_left_to_the_wire_shape(payload: Any) -> None:
    entry = LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=0, event="e", payload=payload)
    assert _canonical_text(entry) is None
    assert (
        content_digest(entry)
        == hashlib.sha256(old_canonical(entry).encode("utf-8")).hexdigest()[:32]
    )


@pytest.mark.parametrize("entry", _plain_entries(), ids=lambda e: e.event)
def test_a_plain_row_needs_no_storability_walk(
    entry: LedgerEntry, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row's own checks judge a plain entry: the full walk (``require_storable``) runs
    only for one they cannot (NUL in a text column, a ts past 64 bits)."""

    def no_walk(value: object) -> None:
        raise AssertionError("require_storable ran for a plain entry")

    monkeypatch.setattr(rows, "require_storable", no_walk)
    row = rows.encode_entry(entry, key="k")
    assert row.payload == (None if entry.payload is None else _json.text(entry.payload))
    assert row.extra is None
    assert row.ts_s == entry.ts // 1000


def test_nul_in_a_text_column_is_refused_by_the_walk_naming_it() -> None:
    entry = LedgerEntry(ts=1, name="n\x00", sandbox_id="s", step_index=0, event="e")
    with pytest.raises(InvalidInputError, match="name"):
        rows.encode_entry(entry, key="k")
