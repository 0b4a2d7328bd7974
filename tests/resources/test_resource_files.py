"""Outpost's resources directories: import (idempotent, never back in time), show, export."""

from __future__ import annotations

import json
import os
import shutil
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from resources.resource_fixtures import TS_RECORD, caught_up, record
from sandbox_ledger.cli import app
from sandbox_ledger.resources import ResourceActivityRecord, SyncResourceRecordStore
from sandbox_ledger.resources.files import (
    export_directory,
    import_directory,
    read_record_file,
    record_file_text,
)
from sandbox_ledger.resources.models import to_iso

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "resource-record.json"


@pytest.fixture
def store(moto_endpoint: str, sync_table: str) -> SyncResourceRecordStore:
    return SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)


def _fresh(minutes_ago: float = 1) -> ResourceActivityRecord:
    return record(age=timedelta(minutes=minutes_ago))


@pytest.fixture
def directory(tmp_path: Path) -> Path:
    """Good files (the documented example among them, one with a byte-order mark), bad files,
    and a file that is not a record file at all."""
    folder = tmp_path / "resources"
    folder.mkdir()
    example = json.loads(EXAMPLE.read_text())
    (folder / f"{example['id']}.json").write_text(EXAMPLE.read_text())
    for r in (_fresh(), _fresh(2)):
        (folder / f"{r.id}.json").write_text(record_file_text(r))
    bom = _fresh(3)
    (folder / f"{bom.id}.json").write_bytes(b"\xef\xbb\xbf" + record_file_text(bom).encode())
    (folder / "broken.json").write_text("{ not json")
    no_phase = {k: v for k, v in TS_RECORD.items() if k != "phase"}
    (folder / f"{no_phase['id']}.json").write_text(json.dumps(no_phase))
    misnamed = _fresh(4)
    (folder / "renamed.json").write_text(record_file_text(misnamed))
    (folder / "notes.txt").write_text("not a record file")
    return folder


def test_the_documented_example_is_a_valid_record_in_the_seed_shape(tmp_path: Path) -> None:
    example = json.loads(EXAMPLE.read_text())
    copy = tmp_path / f"{example['id']}.json"
    shutil.copy(EXAMPLE, copy)
    assert json.loads(record_file_text(read_record_file(copy))) == example
    assert set(example) == {  # every field of the seed's ResourceActivityRecord
        "version", "id", "pid", "identity", "sandboxProvider", "placement", "workspace",
        "createdAt", "updatedAt", "phase", "operations", "lastOperation", "lastFailure",
    }  # fmt: skip


def test_import_reports_bad_files_by_name_and_keeps_the_good_ones(
    store: SyncResourceRecordStore, directory: Path
) -> None:
    report = import_directory(store, directory)
    assert len(report.written) == 4 and report.unchanged == []
    assert sorted(report.failed) == sorted(
        ["broken.json", f"{TS_RECORD['id']}.json", "renamed.json"]
    )
    assert "not JSON" in report.failed["broken.json"]
    assert "phase" in report.failed[f"{TS_RECORD['id']}.json"]
    assert "must be named" in report.failed["renamed.json"]
    for name in report.written:
        file_record = read_record_file(directory / name)
        assert store.get(file_record.id) == file_record


def test_import_is_idempotent_and_never_goes_back_in_time(
    store: SyncResourceRecordStore, directory: Path
) -> None:
    first = import_directory(store, directory)

    def revisions() -> dict[str, int]:
        return {n: store.get_versioned(Path(n).stem).revision for n in first.written}  # type: ignore[union-attr]

    before = revisions()
    again = import_directory(store, directory)
    assert again.written == [] and sorted(again.unchanged) == sorted(first.written)
    assert revisions() == before

    # An owner heartbeats after the import: a re-import must not restore the older file.
    touched_id = Path(first.written[0]).stem
    touched = store.touch(touched_id)
    third = import_directory(store, directory)
    assert first.written[0] in third.unchanged
    assert store.get(touched_id) == touched.record

    # A file newer than the table wins.
    newer = touched.record.model_copy(
        update={"updated_at": to_iso(datetime.now(UTC) + timedelta(seconds=5))}
    )
    (directory / f"{touched_id}.json").write_text(record_file_text(newer))
    fourth = import_directory(store, directory)
    assert fourth.written == [f"{touched_id}.json"]
    assert store.get(touched_id) == newer


def test_export_writes_the_seed_shape_and_round_trips(
    store: SyncResourceRecordStore, directory: Path, tmp_path: Path
) -> None:
    imported = import_directory(store, directory).written
    out = tmp_path / "exported"
    written = export_directory(store, out).written
    assert sorted(written) == sorted(imported)
    assert sorted(p.name for p in out.iterdir()) == sorted(imported)  # no temporary files left
    for name in written:
        original = json.loads((directory / name).read_bytes().decode("utf-8-sig"))
        assert json.loads((out / name).read_text()) == original
    assert import_directory(store, out).written == []


def test_import_of_a_missing_directory_is_refused(store: SyncResourceRecordStore) -> None:
    with pytest.raises(ValueError, match="is not a directory"):
        import_directory(store, Path("/nonexistent/resources"))


def test_cli_import_show_export(
    moto_endpoint: str, sync_table: str, directory: Path, tmp_path: Path
) -> None:
    runner = CliRunner()
    args = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    result = runner.invoke(app, [*args, "resources", "import", str(directory)])
    assert result.exit_code == 4  # three bad files: partly failed
    lines = result.stderr.strip().splitlines()
    assert len([line for line in lines if line.startswith("error: ")]) == 3
    assert any("broken.json" in line for line in lines)
    assert lines[-1] == "4 written, 0 unchanged (the table's version is as new or newer), 3 failed"

    example_id = json.loads(EXAMPLE.read_text())["id"]
    shown = runner.invoke(app, [*args, "resources", "show", example_id, "--json"])
    assert shown.exit_code == 0
    assert json.loads(shown.stdout) == json.loads(EXAMPLE.read_text())
    table = runner.invoke(app, [*args, "resources", "show", example_id])
    assert table.exit_code == 0 and "being expired" in table.stdout and "revision" in table.stdout

    missing = runner.invoke(
        app, [*args, "resources", "show", "0" * 8 + "-0000-0000-0000-" + "0" * 12]
    )
    assert missing.exit_code == 3
    [line] = missing.stderr.strip().splitlines()
    assert line.startswith("error: no resource record 00000000-0000-0000-0000-000000000000 in ")
    assert "resources ls" in line  # names where it looked and the next command

    exported = runner.invoke(app, [*args, "resources", "export", str(tmp_path / "out")])
    assert exported.exit_code == 0
    assert len(list((tmp_path / "out").glob("*.json"))) == 4


def test_cli_import_refuses_without_a_table(
    directory: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SANDBOX_LEDGER_TABLE", raising=False)
    result = CliRunner().invoke(app, ["resources", "import", str(directory)])
    assert result.exit_code == 2  # usage: no table named
    [line] = result.stderr.strip().splitlines()
    assert "--table NAME or --store URL" in line and "SANDBOX_LEDGER_TABLE" in line


def test_hostile_files_are_reported_by_name_and_the_rest_still_loads(
    store: SyncResourceRecordStore, tmp_path: Path
) -> None:
    folder = tmp_path / "hostile"
    folder.mkdir()
    good = _fresh()
    (folder / f"{good.id}.json").write_text(record_file_text(good))
    (folder / "deep.json").write_text("[" * 100_000)
    surrogate = _fresh()
    text = record_file_text(surrogate).replace('"workspace": "', '"workspace": "\\ud800')
    (folder / f"{surrogate.id}.json").write_text(text)
    os.mkfifo(folder / "pipe.json")  # reading it would block forever
    (folder / "dir.json").mkdir()
    report = import_directory(store, folder)
    assert report.written == [f"{good.id}.json"]
    assert sorted(report.failed) == sorted(
        ["deep.json", f"{surrogate.id}.json", "pipe.json", "dir.json"]
    )
    assert "nested too deeply" in report.failed["deep.json"]
    assert "workspace: unpaired surrogate" in report.failed[f"{surrogate.id}.json"]
    assert "not a regular file" in report.failed["pipe.json"]
    assert store.get(surrogate.id) is None  # nothing half-written


def test_export_files_are_readable_by_others_and_survive_heartbeats(
    store: SyncResourceRecordStore, tmp_path: Path
) -> None:
    records = [_fresh(minutes_ago=60 - i) for i in range(24)]
    for r in records:
        store.put(r)
    oldest = [r.id for r in records[:6]]
    touched: list[str] = []

    def heartbeat_the_oldest(name: str) -> None:
        if not touched:  # after the first file: the six oldest move in front of the cursor
            touched.extend(store.touch(record_id).record.id for record_id in oldest)

    out = tmp_path / "exported"
    old_mask = os.umask(0o022)
    try:
        written = export_directory(store, out, on_file=heartbeat_the_oldest, page_size=12).written
    finally:
        os.umask(old_mask)
    assert touched == oldest
    assert sorted(written) == sorted(f"{r.id}.json" for r in records)
    assert {stat.S_IMODE((out / name).stat().st_mode) for name in written} == {0o644}


def test_cli_resources_import_through_a_dynamodb_store_url(
    moto_endpoint: str, sync_table: str, directory: Path
) -> None:
    url = f"dynamodb://{sync_table}?endpoint_url={moto_endpoint}&region=us-east-1"
    result = CliRunner().invoke(app, ["--store", url, "resources", "import", str(directory)])
    assert result.stderr.strip().splitlines()[-1].startswith("4 written, 0 unchanged")


def test_a_file_older_than_the_ttl_horizon_is_imported_and_readable(
    store: SyncResourceRecordStore, tmp_path: Path
) -> None:
    """The TTL runs from the importing store's clock, beyond the policy's own expiry, never
    from the record's updatedAt: an old record is stored, readable, and left to the sweep."""
    folder = tmp_path / "old"
    folder.mkdir()
    old, recent = record(age=timedelta(days=31)), record(age=timedelta(days=29))
    for r in (old, recent):
        (folder / f"{r.id}.json").write_text(record_file_text(r))
    report = import_directory(store, folder)
    assert sorted(report.written) == sorted([f"{old.id}.json", f"{recent.id}.json"])
    assert store.get(old.id) == old and store.get(recent.id) == recent
    stored = store.get_versioned(old.id)
    assert stored is not None and stored.expires_at is not None
    assert stored.expires_at > store.clock().timestamp() + 30 * 86400


def test_an_unreadable_record_is_never_dropped_from_an_export_silently(
    moto_endpoint: str, sync_table: str, store: SyncResourceRecordStore, tmp_path: Path
) -> None:
    """A record a newer writer stored (a field this version does not know) cannot be written
    back as a file: the export names it on stderr and exits 4; the count is what was written."""
    import boto3

    from sandbox_ledger import keys as k
    from sandbox_ledger.resources import _items as ri

    good = [_fresh(minutes_ago=i + 1) for i in range(3)]
    for r in good:
        store.put(r)
    newer = _fresh(minutes_ago=10)
    item = {**ri.record_key(newer.id), k.REVISION: {"N": "1"}}
    item.update(ri.write_values(newer, expires_at=2**31, shard_count=4))
    body = json.loads(item[k.RECORD_BODY]["S"])
    item[k.RECORD_BODY] = {"S": json.dumps({**body, "gpu": "a100"})}
    boto3.client("dynamodb", endpoint_url=moto_endpoint).put_item(TableName=sync_table, Item=item)

    report = export_directory(store, tmp_path / "lib", page_size=2)
    assert sorted(report.written) == sorted(f"{r.id}.json" for r in good)
    assert list(report.unreadable) == [newer.id] and "gpu" in report.unreadable[newer.id]

    args = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    out = tmp_path / "out"
    result = CliRunner().invoke(app, [*args, "resources", "export", str(out), "--json"])
    assert result.exit_code == 4, result.output
    lines = result.stderr.strip().splitlines()
    assert any(newer.id in line and line.startswith("error: ") for line in lines)
    assert lines[-1].startswith(f"exported 3 record(s) to {out}; 1 unreadable")
    assert len(list(out.glob("*.json"))) == 3
    shown = json.loads(result.stdout)
    assert sorted(shown["files"]) == sorted(f"{r.id}.json" for r in good)
    assert list(shown["unreadable"]) == [newer.id]


def test_an_export_reads_every_record_whatever_its_phase_or_index_attributes(
    moto_endpoint: str, sync_table: str, store: SyncResourceRecordStore, tmp_path: Path
) -> None:
    """The phase index holds only the phases this version knows: a record in a newer
    writer's phase ("paused") is in a partition no listing queries, and a record without its
    index attributes is in none. The export still names the first (exit 4) and writes the
    second; ledger entries in the same table are no records."""
    import boto3

    from sandbox_ledger import LedgerEntry
    from sandbox_ledger import keys as k
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.resources import _items as ri

    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    good = _fresh(minutes_ago=1)
    store.put(good)

    def raw(r: ResourceActivityRecord) -> dict[str, dict[str, str]]:
        item = {**ri.record_key(r.id), k.REVISION: {"N": "1"}}
        item.update(ri.write_values(r, expires_at=2**31, shard_count=4))
        return item

    paused = _fresh(minutes_ago=2)
    item = raw(paused)
    body = json.loads(item[k.RECORD_BODY]["S"])
    item[k.RECORD_BODY] = {"S": json.dumps({**body, "phase": "paused"})}
    item[k.RECORD_PHASE] = {"S": "paused"}
    item[k.RESOURCES_BY_PHASE.partition_key] = {"S": k.resource_phase_pk("paused", 0)}
    client.put_item(TableName=sync_table, Item=item)
    unindexed = _fresh(minutes_ago=3)
    item = raw(unindexed)
    for name in (k.RESOURCES_BY_PHASE.partition_key, k.RESOURCES_BY_PROVIDER.partition_key):
        del item[name]
    client.put_item(TableName=sync_table, Item=item)
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    ledger.append(
        LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=-1, event="sandbox.created")
    )

    report = export_directory(store, tmp_path / "lib", page_size=1, segments=3)
    assert sorted(report.written) == sorted(f"{r.id}.json" for r in (good, unindexed))
    assert list(report.unreadable) == [paused.id] and "phase" in report.unreadable[paused.id]
    assert read_record_file(tmp_path / "lib" / f"{unindexed.id}.json") == unindexed

    args = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    result = CliRunner().invoke(app, [*args, "resources", "export", str(tmp_path / "out")])
    assert result.exit_code == 4, result.output
    assert any(paused.id in line for line in result.stderr.splitlines())
    assert result.stderr.strip().splitlines()[-1].startswith("exported 2 record(s)")


def test_show_names_an_unreadable_record_and_shows_it_as_stored(
    moto_endpoint: str, sync_table: str, store: SyncResourceRecordStore, moto_server: Any
) -> None:
    """`resources ls` names unreadable records by id; `show` of that id must let the
    operator look at it. An id an older version stored in another spelling of a UUID was
    refused as a usage error (exit 2), a newer writer's record failed as exit 1: both are now
    shown as stored, with why, exit 4; nothing about them changes."""
    import boto3

    from sandbox_ledger import keys as k
    from sandbox_ledger.resources import _items as ri

    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    newer, twin = _fresh(minutes_ago=5), _fresh(minutes_ago=6)
    legacy_id = twin.id.upper()  # as an older version took it
    for r, pk, extra in ((newer, newer.id, {"gpu": "a100"}), (twin, legacy_id, {"id": legacy_id})):
        item = {**ri.record_key(r.id), k.REVISION: {"N": "1"}}
        item.update(ri.write_values(r, expires_at=2**31, shard_count=4))
        item[k.PARTITION_KEY] = {"S": k.RESOURCE_PREFIX + pk}
        item[k.RECORD_BODY] = {"S": json.dumps({**json.loads(item[k.RECORD_BODY]["S"]), **extra})}
        client.put_item(TableName=sync_table, Item=item)
    args = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    runner = CliRunner()
    caught_up(moto_server)  # about naming unreadable records: the listing's settled state
    listed = json.loads(runner.invoke(app, [*args, "resources", "ls", "--json"]).stdout)
    assert sorted(u["id"] for u in listed["unreadable"]) == sorted([newer.id, legacy_id])
    for record_id, why in ((newer.id, "gpu"), (legacy_id, "id")):
        result = runner.invoke(app, [*args, "resources", "show", record_id, "--json"])
        assert result.exit_code == 4, result.output
        shown = json.loads(result.stdout)
        assert shown["id"] == record_id and why in shown["unreadable"]
        assert json.loads(shown["stored"])["id"] == record_id
        text = runner.invoke(app, [*args, "resources", "show", record_id, "--output", "text"])
        assert text.exit_code == 4 and record_id in text.stdout
        assert "unreadable by this version" in text.stderr
    inspected = store.inspect(legacy_id)
    assert isinstance(inspected, ri.Unreadable) and inspected.body is not None
    assert store.get_many([legacy_id]) == {legacy_id: inspected}  # as the sweeper reads it
    # A canonical id still reads as before; an id no record can have is still bad input.
    store.put(good := _fresh())
    assert runner.invoke(app, [*args, "resources", "show", good.id, "--json"]).exit_code == 0
    # Another spelling that nothing was stored under: refused naming the canonical one, so
    # a record stored under that is never reported missing (the fourth red team: exit 3).
    for spelling in ("{" + good.id + "}", "urn:uuid:" + good.id, good.id.replace("-", "")):
        other = runner.invoke(app, [*args, "resources", "show", spelling])
        assert other.exit_code == 2 and f"write it as '{good.id}'" in other.stderr, other.output
    bad = runner.invoke(app, [*args, "resources", "show", "a\nb"])
    assert bad.exit_code == 2 and "id: " in bad.stderr, bad.output


def test_show_never_sends_a_stored_bodys_control_characters_to_the_terminal(
    moto_endpoint: str, sync_table: str
) -> None:
    """Fourth red team: an unreadable body holding terminal escapes (a title change, a
    screen clear) was printed raw by --output text and table."""
    import boto3

    from sandbox_ledger import keys as k
    from sandbox_ledger.resources import _items as ri

    r = _fresh()
    item = {**ri.record_key(r.id), k.REVISION: {"N": "1"}}
    item.update(ri.write_values(r, expires_at=2**31, shard_count=4))
    item[k.RECORD_BODY] = {"S": "\x1b]0;PWNED\x07\x1b[2J\x1b[31mgarbage"}
    boto3.client("dynamodb", endpoint_url=moto_endpoint).put_item(TableName=sync_table, Item=item)
    args = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    for output in ("text", "table"):
        shown = CliRunner().invoke(app, [*args, "resources", "show", r.id, "--output", output])
        assert shown.exit_code == 4, shown.output
        assert "\x1b" not in shown.stdout and "\x07" not in shown.stdout
        assert "\\u001b]0;PWNED" in shown.stdout.replace("\n", "")
