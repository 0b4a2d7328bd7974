"""Paging cursors (``cursor.py``) as a caller meets them: a cursor printed by another process is
accepted, every cursor a listing makes is accepted back (names in any script), and a wrong one
is refused with an error naming ``cursor`` that says what is wrong."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from sandbox_ledger import LedgerEntry, LedgerEvent, ListSandboxOptions, MemoryAdapter
from sandbox_ledger import cursor as cursors
from sandbox_ledger.errors import InvalidInputError

# Made by this version in another process, as
# `encode_cursor(KIND, {"t": 1700000000000, "q": 7}, LISTING)`: a cursor printed by one CLI
# invocation is read by the next.
KIND = "memory-sessions"
LISTING = ["memory", "名前 #1", "running", None]
PRINTED = (
    "eyJrIjoibWVtb3J5LXNlc3Npb25zIiwibCI6IlczeXJqOFhDSnEtNCIsInMiOnsidCI6MTcwMDAwMDAwMDAwMCwicS"
    "I6N30sImgiOiJQMkVhSWZEaWhPdGdlNnJVIn0"
)


def refused(message: str) -> Any:
    return pytest.raises(InvalidInputError, match=f"^cursor: {message}$")


# The same at t=1700000000167, whose digest ends in "X" (base64's alphabet ends the text: no
# character of it may be trimmed).
PRINTED_X = (
    "eyJrIjoibWVtb3J5LXNlc3Npb25zIiwibCI6IlczeXJqOFhDSnEtNCIsInMiOnsidCI6MTcwMDAwMDAwMDE2NywicS"
    "I6N30sImgiOiJFdDJsWFNFaDhFc3NEWTJYIn0"
)


def test_a_cursor_printed_by_another_process_is_accepted() -> None:
    assert cursors.decode_cursor(KIND, PRINTED, LISTING) == {"t": 1700000000000, "q": 7}
    assert cursors.decode_cursor(KIND, PRINTED_X, LISTING) == {"t": 1700000000167, "q": 7}


def test_a_printed_cursor_belongs_to_its_listing_only() -> None:
    other = r"belongs to another listing \(another name, status, before or store\): pass it back "
    other += "to the listing that returned it"
    with refused(other) as caught:
        cursors.decode_cursor(KIND, PRINTED, ["memory", "名前 #1", "completed", None])
    assert caught.value.field == "cursor"
    with refused(other):
        cursors.decode_cursor("sqlite-sessions", PRINTED, LISTING)


def test_every_cursor_made_is_accepted_back() -> None:
    # DynamoDB's cursors carry the last key read: names in any script, whose UTF-8 spells
    # base64's '-' and '_' (the URL-safe alphabet) in some cursors.
    listing = ["dynamodb", "table", "名前"]
    for n in range(200):
        state = {"p": {"name": f"名前 {chr(0x4E00 + n) * 3}", "sk": n}}
        assert (
            cursors.decode_cursor("k", cursors.encode_cursor("k", state, listing), listing) == state
        )


@pytest.mark.parametrize("cursor", [123, b"abc", ["x"], ""])
def test_a_cursor_that_is_not_a_non_empty_string_is_refused(cursor: object) -> None:
    with refused("must be a non-empty string returned by a listing") as caught:
        cursors.decode_cursor(KIND, cursor, LISTING)
    assert caught.value.field == "cursor"


@pytest.mark.parametrize("edit", [lambda c: c[:-1], lambda c: "A" + c[1:], lambda c: c + "=="])
def test_an_altered_cursor_is_refused(edit: object) -> None:
    with refused("damaged or altered: not as a listing returned it") as caught:
        cursors.decode_cursor(KIND, edit(PRINTED), LISTING)  # type: ignore[operator]
    assert caught.value.field == "cursor"


async def test_a_forged_position_is_refused_by_the_listing() -> None:
    adapter = MemoryAdapter()
    await adapter.append(
        LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=0, event=LedgerEvent.SandboxCreated)
    )
    forged = cursors.encode_cursor(
        "memory-sessions", {"t": "1", "q": 0}, ["memory", "n", None, None]
    )
    with refused("not a position of this listing") as caught:
        cursors.check_int(True, 0, 1)
    assert caught.value.field == "cursor"
    with pytest.raises(InvalidInputError, match=r"^cursor: "):
        await adapter.list_sandbox_page("n", ListSandboxOptions(cursor=forged))


def test_a_cursor_whose_state_was_edited_is_refused() -> None:
    # A naive edit: the state changed, the JSON well formed, the digest kept.
    raw = base64.urlsafe_b64decode(PRINTED + "=" * (-len(PRINTED) % 4))
    edited = raw.replace(b'"q":7', b'"q":8')
    assert edited != raw
    forged = base64.urlsafe_b64encode(edited).decode().rstrip("=")
    with refused("damaged or altered: not as a listing returned it"):
        cursors.decode_cursor(KIND, forged, LISTING)
