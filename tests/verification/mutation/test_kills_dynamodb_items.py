"""The DynamoDB items of the ledger (``dynamodb/_items.py``) as a deployed table holds them: the
stored form of an entry (what another version reads back), when it is compressed and split,
how a split entry is put back together or refused when a part is missing, which items a read
hides for their TTL, and what a session's summary item says."""

from __future__ import annotations

import json
import os
import random
import re
import zlib

import pytest

from sandbox_ledger import LedgerEntry, SandboxStatus
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import _items as it

ORDER = "00000000000000000042beefcafe"


def entry(
    payload: object, ts: int = 1_700_000_000_123, event: str = "exec.complete"
) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name="build", sandbox_id="sb-1", step_index=2, event=event, payload=payload
    )


def test_a_small_entry_is_stored_as_readable_json() -> None:
    encoded = it.encode_entry(entry({"ok": True}), ORDER, ttl=1_700_086_400)
    assert encoded.parts == []
    head = dict(encoded.head)
    body = json.loads(bytes(head.pop("d")["B"]))
    assert body == {
        k: v for k, v in entry({"ok": True}).wire().items() if k not in ("name", "sandboxId")
    }
    assert head == {
        "PK": {"S": "S#5#build#sb-1"},
        "SK": {"S": f"E#0001700000000123#{ORDER}"},
        "ts": {"N": "1700000000123"},
        "ev": {"S": "exec.complete"},
        "expiresAt": {"N": "1700086400"},
    }
    assert "expiresAt" not in it.encode_entry(entry(None), ORDER).head


def test_an_entry_is_compressed_from_1024_bytes_when_that_saves_a_tenth() -> None:
    base = len(it.encode_entry(entry(""), ORDER).head["d"]["B"])  # the body with an empty payload

    def stored(size: int) -> dict[str, object]:
        return it.encode_entry(entry("a" * (size - base)), ORDER).head

    assert "z" not in stored(1023) and len(stored(1023)["d"]["B"]) == 1023
    packed = stored(1024)
    assert packed["z"] == {"S": "zlib"}
    assert json.loads(zlib.decompress(bytes(packed["d"]["B"])))["payload"] == "a" * (1024 - base)


def scattered_text(length: int) -> str:
    """Characters of 1 to 4 UTF-8 bytes, drawn so that their bytes spread over about 200
    values: zlib, which codes the bytes one at a time, saves nothing on them."""
    rng = random.Random(29)
    printable = [chr(c) for c in range(0x20, 0x7F) if chr(c) not in '"\\']
    widths = [(93, None), (30, (0x80, 0x800)), (16, (0xE000, 0x10000)), (5, (0x10000, 0x110000))]
    text = []
    for _ in range(length):
        (_, span), *_ = rng.choices(widths, weights=[w for w, _ in widths])
        text.append(rng.choice(printable) if span is None else chr(rng.randrange(*span)))
    return "".join(text)


def test_an_entry_that_zlib_shrinks_by_less_than_a_tenth_is_stored_as_it_is() -> None:
    payload = scattered_text(800)
    head = it.encode_entry(entry(payload), ORDER).head
    stored = bytes(head["d"]["B"])
    assert len(stored) >= 1024 and len(zlib.compress(stored, 6)) > 0.9 * len(stored)
    assert "z" not in head and json.loads(stored)["payload"] == payload


@pytest.fixture
def _small_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Parts of 350 bytes instead of 350,000: the same splitting, a thousandth of the bytes
    (tests/dynamodb/test_dynamodb_design.py stores real 400 KB entries)."""
    monkeypatch.setattr(it, "CHUNK_BYTES", 350)


def split(size: int) -> it.EncodedEntry:
    """An entry of about ``size`` stored bytes (random hex: zlib halves it)."""
    return it.encode_entry(entry(os.urandom(size).hex()), ORDER, ttl=99)


@pytest.mark.usefixtures("_small_chunks")
def test_a_large_entry_is_split_into_parts_that_read_back_whole() -> None:
    big = split(800)
    head_sk = big.head["SK"]["S"]
    chunks = [bytes(i["d"]["B"]) for i in (big.head, *big.parts)]
    assert big.head["np"] == {"N": "2"} and len(big.parts) == 2
    assert [p["SK"]["S"] for p in big.parts] == [f"{head_sk}#00001", f"{head_sk}#00002"]
    assert [len(c) for c in chunks[:2]] == [350, 350] and 0 < len(chunks[2]) <= 350
    assert all(p["expiresAt"] == {"N": "99"} and p["PK"] == big.head["PK"] for p in big.parts)
    assert all(set(p) == {"PK", "SK", "d", "expiresAt"} for p in big.parts)
    [(sk, back)] = it.decode_keyed_entries("build", "sb-1", [big.head, *big.parts])
    stored = json.loads(zlib.decompress(b"".join(chunks)))
    assert sk == head_sk and back.payload == stored["payload"] and len(back.payload) == 1_600


@pytest.mark.usefixtures("_small_chunks")
def test_an_entry_of_two_chunks_has_one_part() -> None:
    for size in range(300, 500, 20):
        two = split(size)
        if len(two.parts) == 1:
            break
    assert two.head["np"] == {"N": "1"} and two.parts[0]["SK"]["S"].endswith("#00001")
    [(_, back)] = it.decode_keyed_entries("build", "sb-1", [two.head, *two.parts])
    assert len(back.payload) == 2 * size


@pytest.mark.usefixtures("_small_chunks")
def test_a_head_missing_a_part_is_refused_or_left_out() -> None:
    big = split(800)
    small = it.encode_entry(entry({"n": 1}, ts=1_800_000_000_000), ORDER)
    orphan = {**big.parts[0], "SK": {"S": "E#0000000000000001#x#00001"}}
    items = [orphan, big.head, big.parts[1], small.head]
    head_sk = big.head["SK"]["S"]
    with pytest.raises(ValueError, match=rf"^entry '{head_sk}' is missing part 1 of 2$"):
        it.decode_keyed_entries("build", "sb-1", items)
    whole = it.decode_keyed_entries("build", "sb-1", items, complete_only=True)
    assert [e.payload for _, e in whole] == [{"n": 1}]
    with pytest.raises(ValueError, match=r"is missing part 2 of 2$"):
        it.decode_keyed_entries("build", "sb-1", [big.head, big.parts[0]])


def test_an_item_is_hidden_from_the_second_its_ttl_passes() -> None:
    assert it.live({}, 10**10)
    assert it.live({"expiresAt": {"N": "100"}}, 99)
    assert not it.live({"expiresAt": {"N": "100"}}, 100)


def test_a_summary_item_reads_as_the_sessions_details() -> None:
    item = {"name": {"S": "build"}, "sandboxId": {"S": "sb-1"}, "startedAt": {"N": "5"}}
    running = it.decode_details(item)
    assert running is not None and running.status == SandboxStatus.Running
    assert (running.started_at, running.completed_at, running.exec_count) == (5, None, 0)
    done = it.decode_details({**item, "completedAt": {"N": "9"}, "execCount": {"N": "3"}})
    assert done is not None and (done.status, done.completed_at, done.exec_count) == (
        SandboxStatus.Completed,
        9,
        3,
    )
    assert it.decode_details({"name": {"S": "build"}, "execCount": {"N": "1"}}) is None


def test_order_ids_rise_and_carry_the_writers_clock() -> None:
    ids = [it.order_ids.next() for _ in range(200)]
    assert ids == sorted(set(ids)) and all(len(i) == 28 for i in ids)
    stamp = it.order_time_ns(ids[0])
    assert stamp is not None and abs(stamp - int(ids[0][:20])) == 0
    assert it.order_time_ns("not-an-order-id-at-all-x") is None
    assert it.append_order(k.event_sk(12, ids[0])) == ids[0]


def test_order_ids_rise_while_the_clock_stands_still_or_steps_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([5_000, 5_000, 5_000, 4_000, 4_000, 6_000])
    monkeypatch.setattr(it.time, "time_ns", lambda: next(clock))
    ids = it._OrderIds()
    stamps = [int(ids.next()[:20]) for _ in range(6)]
    assert stamps == sorted(set(stamps)) and stamps[0] == 5_000 and stamps[-1] == 6_000


def _applied_to_a_new_item(update: dict[str, object]) -> dict[str, object]:
    """What an UpdateItem of SET clauses (``a = :v`` or ``a = if_not_exists(a, :v)``) and an
    optional ADD stores on an item that does not exist yet, as DynamoDB reads it (keywords in
    any case)."""
    expression = str(update["UpdateExpression"])
    names = dict(update["ExpressionAttributeNames"])  # type: ignore[call-overload]
    values = dict(update["ExpressionAttributeValues"])  # type: ignore[call-overload]
    sets, *adds = re.split(r"(?i) add ", re.split(r"(?i)^set ", expression)[1], maxsplit=1)
    item = dict(update["Key"])  # type: ignore[call-overload]
    for clause in re.split(r", (?![^(]*\))", sets):  # not the comma inside if_not_exists
        attribute, _, value = clause.partition(" = ")
        placeholder = re.sub(r"^if_not_exists\([^,]+, (.+)\)$", r"\1", value)
        item[names.get(attribute, attribute)] = values[placeholder]
    for clause in adds[0].split(", ") if adds else []:
        attribute, _, placeholder = clause.partition(" ")
        item[attribute] = values[placeholder]
    return item


@pytest.mark.parametrize("event", ["sandbox.created", "sandbox.closed"])
def test_a_summary_is_stored_in_its_sessions_shard_with_its_type_and_ttl(event: str) -> None:
    """On a table of 8 shards, the session's summary goes to the listing partitions of its
    key's shard (6 for this key: ``A#006``), is a ``session`` item (what scans select) and
    carries its entry's TTL as its expiry and the TTL it is kept to (DynamoDB deletes it
    after the session's last entry)."""
    update = it.summary_update(entry(None, event=event), 8, ttl=1_700_086_400, kept=1_700_200_000)
    assert update is not None
    stored = _applied_to_a_new_item(update)
    status = "running" if event == "sandbox.created" else "completed"
    expected = {
        "PK": {"S": "S#5#build#sb-1"},
        "SK": {"S": "#SUMMARY"},
        "name": {"S": "build"},
        "sandboxId": {"S": "sb-1"},
        "itemType": {"S": "session"},
        "g2pk": {"S": f"NS#{status}#build"},
        "g4pk": {"S": f"AS#{status}#006"},
        "eex": {"N": "1700086400"},
        k.TTL_ATTRIBUTE: {"N": "1700200000"},
        # what this write changed of the session's lifecycle (the changes feed reads it)
        "lc": {"L": [{"M": {"ev": {"S": event}, "ts": {"N": "1700000000123"}}}]},
    }
    if event == "sandbox.created":
        at = {"N": "1700000000123"}
        expected |= {"startedAt": at, "gsk": at, "g1pk": {"S": "N#build"}, "g3pk": {"S": "A#006"}}
    else:
        expected["completedAt"] = {"N": "1700000000123"}
    assert stored == expected


def test_a_checkpoint_marker_carries_its_entrys_ttl() -> None:
    checkpoint = entry({"snapshotId": "snap-1"}, event="sandbox.checkpoint_created")
    marker = it.checkpoint_marker(checkpoint, ORDER, ttl=1_700_086_400)
    assert marker[k.TTL_ATTRIBUTE] == {"N": "1700086400"}
    assert k.TTL_ATTRIBUTE not in it.checkpoint_marker(checkpoint, ORDER)


def test_a_summary_put_whole_refuses_an_update_form_it_does_not_know_by_name() -> None:
    """``summary_item`` (an import's summary put whole) derives the item from the update's
    own text and refuses, naming it, any clause it cannot read instead of writing part of
    it; the one ADD clause adds to nothing, so the item holds its value."""
    created = LedgerEntry(
        ts=5, name="build", sandbox_id="sb-1", step_index=-1, event="sandbox.created"
    )
    update = it.summary_fold([created, entry(None, ts=6)], 1)
    assert update is not None
    item = it.summary_item(update)
    assert item[k.LedgerAttr.EXEC_COUNT] == {"N": "1"} and item["startedAt"] == {"N": "5"}
    odd = update["UpdateExpression"].replace("SET ", "SET x = list_append(x, :nm), ")
    with pytest.raises(
        ValueError, match=re.escape("not a summary update this version writes: 'x = list_append")
    ):
        it.summary_item({**update, "UpdateExpression": odd})
