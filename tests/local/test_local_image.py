"""The image of a data file's items (issue 41, item 5): a restart takes each session's items
from ``.FILE.image`` where its lines are the ones the image was built from, and stores
exactly what building them (and the import) stores; an image damaged, stale, of another
version or crafted is never read as data."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import pickle
from pathlib import Path
from typing import Any

import pytest

from sandbox_ledger import LedgerEvent
from sandbox_ledger import keys as k
from sandbox_ledger.cli.interrupt import StopSignals
from sandbox_ledger.cli.local_saves import Saver
from sandbox_ledger.deployment import SweepSettings
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.local import LocalDynamoDB, bulk, image, inprocess
from sandbox_ledger.local.persist import load_state, read_lines
from sandbox_ledger.testing._build import entry
from sandbox_ledger.transfer import entry_line

from .test_local_bulk import REGION, _items, _lines, _normalised, server

__all__ = ["server"]  # the module's server fixture, shared

_tables = iter(range(10**6))


def _load(
    server: LocalDynamoDB,
    lines: list[str],
    with_image: image.Image | None,
    *,
    use_bulk: bool = True,
) -> tuple[str, SyncDynamoDBAdapter]:
    """``lines`` loaded into a new table as a restart loads them (``with_image`` read
    already, or none); the table's name and its ledger."""
    table = f"image-{next(_tables)}"
    ledger = inprocess.ledger(server, table, REGION)
    ledger.create_table(sweep=SweepSettings())
    store = inprocess.resource_store(server, table, REGION)

    def bulk_load(
        sessions: Any, progress: Any, sequences: Any = None, orders: Any = None
    ) -> int | None:
        done = bulk.load_entries(
            server,
            ledger,
            sessions,
            progress=progress,
            sequences=sequences,
            orders=orders,
            image=with_image,
        )
        assert done is not None
        return done

    load_state(read_lines(lines), ledger, store, bulk=bulk_load if use_bulk else None)
    return table, ledger


def _moto_items(server: LocalDynamoDB, ledger: SyncDynamoDBAdapter) -> Any:
    table = bulk._moto_table(server, ledger)
    with server.exclusive():
        return {key: dict(partition) for key, partition in table.items.items()}


def _raw(server: LocalDynamoDB, table: str) -> dict[tuple[str, str], str]:
    """Each ledger session's item's bytes as a scan returns them (its attributes in their
    stored order; the rest of the table is written through the stores either way)."""
    items = [i for i in _items(server, table) if i["PK"]["S"].startswith(k.SESSION_PREFIX)]
    return {(i["PK"]["S"], i["SK"]["S"]): json.dumps(i, default=repr) for i in items}


@pytest.fixture
def written(server: LocalDynamoDB, tmp_path: Path) -> tuple[image.Image, list[str], str]:
    """An image written by a load that built every session from ``_lines()``."""
    lines = _lines()
    first = image.Image(tmp_path / ".dev.jsonl.image")
    first.read()
    table, _ = _load(server, lines, first)
    assert first.used == 0 and first.kept
    assert first.write()
    return first, lines, table


def _reread(path: Path) -> image.Image:
    again = image.Image(path)
    again.read()
    return again


def test_a_restart_from_the_image_stores_what_the_build_stored_byte_for_byte(
    server: LocalDynamoDB, written: tuple[image.Image, list[str], str]
) -> None:
    first, lines, built_table = written
    assert first.path.stat().st_mode & 0o777 == 0o600  # FILE's data: its owner's only
    again = _reread(first.path)
    assert again.found.ignored is None
    table, ledger = _load(server, lines, again)
    assert again.used == len(first.kept) == 4  # every session from the image
    assert again.current  # nothing to write again
    # The same items, attribute by attribute and in the same order, as the load that built
    # them (the same random order ids and incarnations: they were built once).
    assert _raw(server, table) == _raw(server, built_table)
    assert len(_raw(server, table)) > 300
    built = _moto_items(server, inprocess.ledger(server, built_table, REGION))
    loaded = _moto_items(server, ledger)
    sessions = [key for key in built if key.value.startswith(k.SESSION_PREFIX)]
    for key in sessions:  # moto's objects, every field
        assert bulk._same(loaded[key], built[key]), key
    # And what the import stores, but for what is random by design.
    imported, _ = _load(server, lines, None, use_bulk=False)
    assert _normalised(_items(server, table)) == _normalised(_items(server, imported))
    assert _orders(server, table) == _orders(server, imported)  # attributes in its order


def _orders(server: LocalDynamoDB, table: str) -> dict[str, list[tuple[str, ...]]]:
    """Each session partition's items' attribute names, in their stored order; but for the
    summary's, whose order is the order its attributes were first set (an import updates
    it once per transaction, a load sets them at once: the same attributes and values)."""
    found: dict[str, list[tuple[str, ...]]] = {}
    for key, text in _raw(server, table).items():
        if key[1] != k.SUMMARY_SK:
            found.setdefault(key[0], []).append(tuple(json.loads(text)))
    return {pk: sorted(names) for pk, names in found.items()}


def test_a_session_whose_lines_changed_is_built_again_the_others_taken(
    server: LocalDynamoDB, written: tuple[image.Image, list[str], str]
) -> None:
    first, lines, _ = written
    changed = [line for line in lines if '"sb-0"' not in line or "sandbox.closed" not in line]
    changed.insert(0, entry_line(entry("svc-9", "sb-9", LedgerEvent.SandboxCreated, 1)) + "\n")
    changed = [line for line in changed if '"sb-3"' not in line]  # a session gone
    again = _reread(first.path)
    table, _ = _load(server, changed, again)
    assert again.used == 2  # sb-1 and sb-2; sb-0 changed, sb-9 new
    assert not again.current
    imported, _ = _load(server, changed, None, use_bulk=False)
    assert _normalised(_items(server, table)) == _normalised(_items(server, imported))
    assert set(again.kept) == {
        ("svc-0", "sb-0"),
        ("svc-1", "sb-1"),
        ("svc-0", "sb-2"),
        ("svc-9", "sb-9"),
    }


def test_order_ids_go_on_after_the_images(
    server: LocalDynamoDB, written: tuple[image.Image, list[str], str]
) -> None:
    first, lines, _ = written
    latest = max(stored.last_order for stored in first.kept.values())
    it.order_ids._last = 0  # as a new process whose clock is behind the image's writer
    _load(server, lines, _reread(first.path))
    assert it.order_ids.next() > latest


def _damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    first_record = data.index(b"\n", len(image.MAGIC)) + 1
    if how == "byte":  # inside the first record's pickle
        data[first_record + len(image._EMPTY) + 10] ^= 0x01
    elif how == "digest":
        data[first_record + image._LENGTH.size] ^= 0x01
    elif how == "empty":
        data = bytearray()
    elif how == "format":
        data[: len(image.MAGIC)] = image.MAGIC.replace(b"image 1", b"image 9")
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["byte", "digest", "empty", "format"])
def test_a_damaged_image_is_ignored_as_a_whole(
    server: LocalDynamoDB, written: tuple[image.Image, list[str], str], how: str
) -> None:
    first, lines, _ = written
    _damage(first.path, how)
    again = _reread(first.path)
    assert again.found.ignored is not None and not again.found.sessions
    table, _ = _load(server, lines, again)
    assert again.used == 0 and not again.current  # built, to be written again
    imported, _ = _load(server, lines, None, use_bulk=False)
    assert _normalised(_items(server, table)) == _normalised(_items(server, imported))


def _rewritten(path: Path, change: Any) -> None:
    """The image at ``path`` with its sessions passed through ``change``, digest made
    right (an image that reads as intact)."""
    found = image.read(path)
    kept = dict(found.sessions)
    written = image.Image(path, kept=change(kept), fingerprint=found.fingerprint)
    assert written.write()


def test_an_image_of_another_version_is_ignored(
    server: LocalDynamoDB, written: tuple[image.Image, list[str], str]
) -> None:
    first, lines, _ = written
    written_image = image.Image(first.path, kept=dict(first.kept), fingerprint="another")
    assert written_image.write()
    again = _reread(first.path)
    _load(server, lines, again)
    assert again.used == 0 and again.found.ignored is not None
    assert "another version" in again.found.ignored


def test_an_image_naming_another_sessions_items_is_not_read_for_it(
    server: LocalDynamoDB, written: tuple[image.Image, list[str], str]
) -> None:
    """A session is taken from the image by the digest of its lines, and only if its items
    are in its partition."""
    first, lines, _ = written

    def swapped(kept: dict[Any, image.Stored]) -> dict[Any, image.Stored]:
        a, b = ("svc-0", "sb-0"), ("svc-1", "sb-1")
        kept[a], kept[b] = kept[b]._replace(digest=kept[a].digest), kept[a]
        return kept

    _rewritten(first.path, swapped)
    again = _reread(first.path)
    table, _ = _load(server, lines, again)
    assert again.used == 2  # sb-0 (another session's items) and sb-1 (another digest) built
    imported, _ = _load(server, lines, None, use_bulk=False)
    assert _normalised(_items(server, table)) == _normalised(_items(server, imported))


def test_a_pickle_naming_a_class_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    class Boom:
        def __reduce__(self) -> Any:
            return (os.system, ("touch " + str(tmp_path / "ran"),))

    data = pickle.dumps([("a", "b", b"", "", [Boom()])], protocol=5)
    path = tmp_path / ".dev.jsonl.image"
    path.write_bytes(
        image.MAGIC
        + json.dumps({"fingerprint": "x"}).encode()
        + b"\n"
        + image._LENGTH.pack(len(data))
        + hashlib.sha256(data).digest()
        + data
    )
    found = image.read(path)
    assert found.ignored is not None and "class" in found.ignored and not found.sessions
    assert not (tmp_path / "ran").exists()


def test_a_record_appended_replaces_the_sessions_earlier_one_and_a_torn_one_is_left_out(
    server: LocalDynamoDB, written: tuple[image.Image, list[str], str]
) -> None:
    first, lines, _ = written
    more = entry_line(entry("svc-0", "sb-0", LedgerEvent.ExecStarted, 9000, step=50)) + "\n"
    grown = [*lines, more]
    sb0 = [line for line in grown if '"sb-0"' in line]
    stored = bulk.session_items(("svc-0", "sb-0"), sb0, first.shard_count or 0)
    assert stored is not None
    assert first.append({("svc-0", "sb-0"): stored})
    appended = first.path.read_bytes()
    again = _reread(first.path)
    assert again.found.records == 5 and not again.found.torn
    table, _ = _load(server, grown, again)
    assert again.used == 4  # sb-0 from its appended record
    assert not again.current  # five records for four sessions: written whole again
    imported, _ = _load(server, grown, None, use_bulk=False)
    assert _normalised(_items(server, table)) == _normalised(_items(server, imported))
    # kill -9 during an append: its record cut short, left out; sb-0 from the first.
    first.path.write_bytes(appended[:-100])
    torn = _reread(first.path)
    assert torn.found.torn and torn.found.ignored is None and torn.found.records == 4
    table, _ = _load(server, grown, torn)
    assert torn.used == 3  # sb-0 built: its lines are not the first record's
    assert _normalised(_items(server, table)) == _normalised(_items(server, imported))


def test_an_image_replaced_by_another_file_is_not_appended_to(
    written: tuple[image.Image, list[str], str],
) -> None:
    first, _, _ = written
    first.path.unlink()
    first.path.write_bytes(b"someone else's")
    assert not first.append(dict(list(first.kept.items())[:1]))
    assert first.path.read_bytes() == b"someone else's"


def test_a_write_stopped_half_way_leaves_the_last_image(
    server: LocalDynamoDB, written: tuple[image.Image, list[str], str]
) -> None:
    first, _, _ = written
    before = first.path.read_bytes()
    other = image.Image(first.path, kept=dict(first.kept), fingerprint="newer")
    asked = iter([True, False])
    monkey_chunk = image.CHUNK
    try:
        image.CHUNK = 1  # a chunk per session: stopped after the first
        assert not other.write(lambda: next(asked))
    finally:
        image.CHUNK = monkey_chunk
    assert first.path.read_bytes() == before
    assert sorted(p.name for p in first.path.parent.iterdir()) == [first.path.name]


def _started(data: Path) -> tuple[LocalDynamoDB, Saver, SyncDynamoDBAdapter]:
    """A local server on ``data`` as ``sandbox-ledger local`` runs one, its load done and
    its image kept; its saver, and a ledger client over HTTP."""
    local = LocalDynamoDB()
    log = inprocess.WriteLog()
    local.observe(log.note)
    local.start()
    table = f"saves-{next(_tables)}"  # moto's tables outlive a server in this process
    ledger = inprocess.ledger(local, table, REGION)
    store = inprocess.resource_store(local, table, REGION)
    saver = Saver(data, ledger, store, log)
    saver.bulk = functools.partial(bulk.load_entries, local, ledger, image=saver.image)
    ledger.create_table(sweep=SweepSettings(), store_id=saver.read())
    with StopSignals() as stop:
        assert saver.load(stop)
        saver.keep_image(stop)
    client = SyncDynamoDBAdapter(  # a client over HTTP: its writes are saved
        table, endpoint_url=local.endpoint_url, region_name=REGION
    )
    return local, saver, client


def test_saves_keep_the_image_up_and_a_restart_takes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server started on no FILE: once a save finds FILE holding IMAGE_ENTRIES entries it
    writes the image whole, later saves append the sessions they changed, and the next
    start takes every session from it (but those the exit's save changed)."""
    monkeypatch.setattr(Saver, "IMAGE_ENTRIES", 10)
    data = tmp_path / "dev.jsonl"

    local, saver, client = _started(data)
    kept = tmp_path / ".dev.jsonl.image"
    for n in range(3):
        client.append(entry("svc", f"sb-{n}", LedgerEvent.SandboxCreated, 1000 + n))
    saver.save()
    assert not kept.exists()  # 3 entries: none yet
    for n in range(12):
        client.append(entry("svc", f"sb-{n % 4}", LedgerEvent.ExecStarted, 2000 + n, step=n))
    saver.save()
    found = image.read(kept)
    assert found.ignored is None and found.records == len(found.sessions) == 4
    client.append(entry("svc", "sb-1", LedgerEvent.SandboxClosed, 3000))
    client.append(entry("svc", "sb-9", LedgerEvent.SandboxCreated, 3001))
    saver.save()
    found = image.read(kept)
    assert found.records == 6 and len(found.sessions) == 5  # sb-1 again, sb-9 new
    size = kept.stat().st_size
    for n in range(30):  # new sessions: appended, however much the image grows
        client.append(entry("svc", f"new-{n}", LedgerEvent.SandboxCreated, 3100 + n))
        saver.save()
    assert kept.stat().st_size > 3 * size and not saver.image_off
    assert image.read(kept).records == len(image.read(kept).sessions) + 1 == 36
    client.append(entry("svc", "sb-2", LedgerEvent.SandboxClosed, 3002))
    saver.save(final=True)  # not appended: the exit is not held up
    assert not saver.image_off
    assert image.read(kept).records == 36
    expected = {key: client.read_all(*key) for key in client.scan_sessions(None)}
    client.close()
    local.stop()

    local, saver, client = _started(data)
    assert saver.image is not None
    assert saver.image.used == 34  # sb-2 built again: changed by the exit's save
    assert {key: client.read_all(*key) for key in client.scan_sessions(None)} == expected
    found = image.read(kept)
    assert found.records == len(found.sessions) == 35  # written whole again
    client.close()
    local.stop()


def test_saves_stop_keeping_the_image_past_a_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A save builds no session of IMAGE_SESSION entries or more (it would build them all
    for the few it added), and stops appending once the records appends replaced hold more
    entries than FILE, or after a request that may have changed anything: the next start
    builds what the image lacks."""
    monkeypatch.setattr(Saver, "IMAGE_ENTRIES", 10)
    monkeypatch.setattr(Saver, "IMAGE_SESSION", 8)
    data = tmp_path / "dev.jsonl"
    local, saver, client = _started(data)
    kept = tmp_path / ".dev.jsonl.image"
    for n in range(12):
        client.append(entry("svc", f"sb-{n % 3}", LedgerEvent.ExecStarted, 2000 + n, step=n))
    saver.save()
    assert image.read(kept).records == 3
    for n in range(8):  # sb-0 grows to 12 entries: not built at a save
        client.append(entry("svc", "sb-0", LedgerEvent.ExecStarted, 3000 + n, step=20 + n))
    saver.save()
    assert image.read(kept).records == 3
    monkeypatch.setattr(Saver, "IMAGE_SESSION", 100)
    for n in range(40):  # sb-1 appended again at each save, until what was replaced holds
        client.append(entry("svc", "sb-1", LedgerEvent.ExecStarted, 4000 + n, step=40 + n))
        saver.save()  # more entries than FILE
        if saver.image_off:
            break
    assert saver.image_off and saver.image_dead > saver.mirror.entries
    saver.image_off, saver.image_dead = False, 0
    saver.log.note("DynamoDB_20120810.ExecuteStatement", b"{}")  # may have changed anything
    saver.save()  # every table read again: no session built for the image at this save
    assert saver.image_off
    size = kept.stat().st_size
    client.append(entry("svc", "sb-1", LedgerEvent.SandboxClosed, 5000))
    saver.save()
    assert kept.stat().st_size == size  # no more appends
    expected = {key: client.read_all(*key) for key in client.scan_sessions(None)}
    saver.save(final=True)
    client.close()
    local.stop()
    local, saver, client = _started(data)
    assert saver.image is not None and saver.image.used == 1  # sb-2; sb-0 and sb-1 built
    assert {key: client.read_all(*key) for key in client.scan_sessions(None)} == expected
    client.close()
    local.stop()


def test_an_image_replaced_while_serving_is_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(Saver, "IMAGE_ENTRIES", 3)
    data = tmp_path / "dev.jsonl"
    local, saver, client = _started(data)
    kept = tmp_path / ".dev.jsonl.image"
    for n in range(4):
        client.append(entry("svc", f"sb-{n}", LedgerEvent.SandboxCreated, 1000 + n))
    saver.save()
    assert image.read(kept).records == 4
    kept.unlink()
    kept.write_bytes(b"another's")
    client.append(entry("svc", "sb-0", LedgerEvent.SandboxClosed, 2000))
    saver.save()
    assert saver.image_off and kept.read_bytes() == b"another's"
    client.append(entry("svc", "sb-1", LedgerEvent.SandboxClosed, 2001))
    saver.save()  # nothing built, nothing written
    assert kept.read_bytes() == b"another's"
    client.close()
    local.stop()


def test_nothing_is_appended_after_a_torn_record(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An image ending in a record cut short (``kill -9``) and not written again at the
    start (FILE too small) gets no records after it: they would be read as that record's."""
    monkeypatch.setattr(Saver, "IMAGE_ENTRIES", 3)
    data = tmp_path / "dev.jsonl"
    local, saver, client = _started(data)
    for n in range(4):
        client.append(entry("svc", f"sb-{n}", LedgerEvent.SandboxCreated, 1000 + n))
    saver.save()
    saver.save(final=True)
    client.close()
    local.stop()
    kept = tmp_path / ".dev.jsonl.image"
    kept.write_bytes(kept.read_bytes()[:-50])
    assert image.read(kept).torn
    monkeypatch.setattr(Saver, "IMAGE_ENTRIES", 100)
    local, saver, client = _started(data)
    torn = kept.read_bytes()
    client.append(entry("svc", "sb-0", LedgerEvent.SandboxClosed, 2000))
    saver.save()
    assert kept.read_bytes() == torn
    client.close()
    local.stop()


def test_a_session_whose_sequence_changed_is_built_not_taken_from_the_image(
    server: LocalDynamoDB, written: tuple[image.Image, list[str], str]
) -> None:
    """The image keys a session's items by its lines and its sequence (FILE's
    ``localSequences`` line: the marks' incarnation and numbers), so a session whose lines
    are the same but whose sequence is not is built with FILE's marks, not the image's."""
    from sandbox_ledger.local.persist import sequences_line

    first, lines, _ = written
    named = [*lines, sequences_line({("svc-0", "sb-0"): (("feedbeef0001", 7, 0),)})]
    again = _reread(first.path)
    table, _ = _load(server, named, again)
    assert again.used == 3  # sb-0 built: the image's record has other marks
    pk = k.session_pk("svc-0", "sb-0")
    marks = [
        (k.sequence_number(i["SK"]["S"]), i[A.INCARNATION]["S"])
        for i in _items(server, table)
        if i["PK"]["S"] == pk and A.REF in i and k.sequence_number(i["SK"]["S"]) is not None
    ]
    assert marks and {inc for _, inc in marks} == {"feedbeef0001"}
    assert sorted(n for n, _ in marks) == list(range(7, 7 + len(marks)))
    assert again.write()
    third = _reread(first.path)
    table, _ = _load(server, named, third)
    assert third.used == 4  # now the image holds sb-0 as FILE names it
    assert {
        i[A.INCARNATION]["S"]
        for i in _items(server, table)
        if i["PK"]["S"] == pk and A.REF in i and k.sequence_number(i["SK"]["S"]) is not None
    } == {"feedbeef0001"}
