"""The fast canonical text against df193f5's digest (the canonical text of ``entry.wire()``)
for payloads it could write and must not (red team rt14; these failed on b91d2b3).

The fast text encodes the payload object itself with the C encoder (sort_keys: it calls a
dict's ``items()``); ``wire()``'s ``model_dump`` copies a dict or list subclass from its
storage. A container whose ``items()`` / iteration is not its storage (werkzeug's and
Django's MultiDict store lists and give one value per key) is digested differently: two
entries df193f5 told apart become one identity, and ``append_once`` drops the second.
Such a payload reaches an entry built without validation (``model_construct``) or one whose
payload is changed in place after it was checked, the cases b91d2b3 meant to send to wire()."""

from __future__ import annotations

from typing import Any

import pytest

from sandbox_ledger import LedgerEntry
from sandbox_ledger.blocking import BlockingAdapter
from sandbox_ledger.memory import MemoryAdapter
from sandbox_ledger.transfer import content_digest
from verification.digests import old_digest


class MultiDict(dict):  # type: ignore[type-arg]
    """A multi-value dict as werkzeug / Django write it: lists stored, the last value given."""

    def __init__(self, pairs: list[tuple[str, Any]]) -> None:
        super().__init__()
        for key, value in pairs:
            dict.setdefault(self, key, []).append(value)

    def __getitem__(self, key: str) -> Any:
        return dict.__getitem__(self, key)[-1]

    def items(self) -> Any:  # type: ignore[override]
        return [(key, self[key]) for key in dict.keys(self)]


class Reversed(list):  # type: ignore[type-arg]
    def __iter__(self) -> Any:
        return iter(list.__reversed__(self))


_BASE: dict[str, Any] = {"ts": 1, "name": "n", "sandbox_id": "s", "step_index": 0, "event": "e"}


def _constructed(payload: Any) -> LedgerEntry:
    return LedgerEntry.model_construct(**_BASE, payload=payload)


def _changed_in_place(payload: Any) -> LedgerEntry:
    entry = LedgerEntry(**_BASE, payload={"form": None})
    entry.payload["form"] = payload
    return entry


@pytest.mark.parametrize("build", [_constructed, _changed_in_place], ids=["construct", "in-place"])
@pytest.mark.parametrize(
    "payload",
    [
        pytest.param(MultiDict([("a", "1"), ("a", "2")]), id="multidict"),
        pytest.param(Reversed([1, 2]), id="list-subclass-iter"),
    ],
)
def test_digest_of_a_container_subclass_payload_is_df193f5s(build: Any, payload: Any) -> None:
    entry = build(payload)
    assert content_digest(entry) == old_digest(entry)


def test_two_entries_df193f5_told_apart_are_both_stored() -> None:
    """{"a": ["1", "2"]} and {"a": ["2"]} as MultiDicts: distinct wire shapes, distinct
    identities in df193f5; the fast text gives both the digest of {"a": "2"}."""
    first = _constructed(MultiDict([("a", "1"), ("a", "2")]))
    second = _constructed(MultiDict([("a", "2")]))
    assert first.wire() != second.wire()
    assert old_digest(first) != old_digest(second)
    target = BlockingAdapter(MemoryAdapter())
    try:
        assert target.append_once(first, 1) is True
        assert target.append_once(second, 1) is True  # fails: "already stored"
        assert len(target.read_all("n", "s")) == 2
    finally:
        target.close()
