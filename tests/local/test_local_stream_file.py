"""``local --data``'s table stream across a restart (sandbox_ledger/local/streamfile.py), in
process: the strict view's shards (closed, split, open), numbers and records, and moto's
one shard, as a restarted server serves them; the sidecar's bounds and damage."""

from __future__ import annotations

import itertools
import json
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import boto3
import pytest

from sandbox_ledger.deployment import SweepSettings
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.local import LocalDynamoDB, inprocess, streamfile
from sandbox_ledger.local.streamfile import StreamFile
from sandbox_ledger.local.strict import StrictProfile

REGION = "us-east-1"
_tables = itertools.count()


class Started:
    """A server as ``local --data`` runs one (the table made in process with one store
    identity, then its stream restored), and its sidecar."""

    def __init__(
        self,
        data: Path,
        table: str,
        strict: bool,
        stream_records: int | None,
        clock: Callable[[], float] | None = None,
    ) -> None:
        profile = (
            StrictProfile(conflict_hold=0, shard_records=3, shard_split=2, stream_retention=1000)
            if strict
            else None
        )
        self.server = LocalDynamoDB(
            stream_records=stream_records, strict=profile if profile is not None else False
        )
        self.server.start()
        if clock is not None:
            assert self.server._front is not None
            self.server._front.streams.clock = clock
        self.table = table
        self.ledger: SyncDynamoDBAdapter = inprocess.ledger(self.server, table, REGION)
        self.ledger.create_table(sweep=SweepSettings(), store_id="one-store")
        self.said: list[str] = []
        self.stream = StreamFile(data, self.server, self.ledger, self.said.append)
        self.stream.restore()  # after the load, as local --data does
        self.ddb = boto3.client("dynamodb", endpoint_url=self.server.endpoint_url)
        self.streams = boto3.client("dynamodbstreams", endpoint_url=self.server.endpoint_url)

    def arn(self) -> str:
        return str(self.ddb.describe_table(TableName=self.table)["Table"]["LatestStreamArn"])

    def put(self, key: str, value: int) -> None:
        self.ddb.put_item(
            TableName=self.table,
            Item={"PK": {"S": key}, "SK": {"S": "x"}, "v": {"N": str(value)}},
        )

    def shards(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        params: dict[str, Any] = {"StreamArn": self.arn()}
        while True:
            page = self.streams.describe_stream(**params)["StreamDescription"]
            out += page["Shards"]
            if "LastEvaluatedShardId" not in page:
                return out
            params["ExclusiveStartShardId"] = page["LastEvaluatedShardId"]

    def read(self, shard: str, **where: str) -> list[dict[str, Any]]:
        """The records of ``shard`` (from its trim horizon, or ``where`` says)."""
        where = where or {"ShardIteratorType": "TRIM_HORIZON"}
        iterator = self.streams.get_shard_iterator(StreamArn=self.arn(), ShardId=shard, **where)[
            "ShardIterator"
        ]
        out: list[dict[str, Any]] = []
        while iterator:
            page = self.streams.get_records(ShardIterator=iterator)
            out += page["Records"]
            iterator = page.get("NextShardIterator")
            if not page["Records"]:
                break
        return out

    def everything(self) -> dict[str, list[dict[str, Any]]]:
        return {s["ShardId"]: self.read(s["ShardId"]) for s in self.shards()}

    def stop(self) -> None:
        """Stop, the table gone (moto's tables outlive a server in this process)."""
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        self.server.stop()
        dynamodb_backends[DEFAULT_ACCOUNT_ID][REGION].delete_table(self.table)


@pytest.fixture
def data(tmp_path: Path) -> Path:
    path = tmp_path / "dev.jsonl"
    path.write_text("")  # FILE is there: its sidecar is its stream
    return path


def _seq(record: dict[str, Any]) -> int:
    return int(record["dynamodb"]["SequenceNumber"])


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "moto"])
def test_a_restart_serves_the_same_shards_numbers_and_records(data: Path, strict: bool) -> None:
    """Shards closed, split and open (strict), their ids, parents and ranges, every record
    with its number and body, the ARN and label: as before the restart. A position inside a
    shard reads on after it; a write after the restart is numbered after every record."""
    table = f"stream-file-{next(_tables)}"
    first = Started(data, table, strict, 1000)
    for i in range(20):
        first.put(f"k{i % 7}", i)
    first.stream.save()
    arn, shards, records = first.arn(), first.shards(), first.everything()
    first.stop()
    if strict:
        assert len(shards) > 4 and any(
            "EndingSequenceNumber" in s["SequenceNumberRange"] for s in shards
        )
        assert len({s.get("ParentShardId") for s in shards}) < len(shards)  # a split

    again = Started(data, table, strict, 1000)
    try:
        assert again.said == []
        assert again.arn() == arn
        assert again.shards() == shards
        assert again.everything() == records
        shard, kept = max(records.items(), key=lambda item: len(item[1]))
        middle = kept[len(kept) // 2]["dynamodb"]["SequenceNumber"]
        after = again.read(shard, ShardIteratorType="AFTER_SEQUENCE_NUMBER", SequenceNumber=middle)
        assert after == kept[len(kept) // 2 + 1 :]
        again.put("k-new", 99)
        newest = max(_seq(r) for found in records.values() for r in found)
        new = [r for found in again.everything().values() for r in found if _seq(r) > newest]
        assert [r["dynamodb"]["Keys"]["PK"]["S"] for r in new] == ["k-new"]
    finally:
        again.stop()


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "moto"])
def test_a_lower_stream_records_bound_keeps_the_newest_across_a_restart(
    data: Path, strict: bool
) -> None:
    table = f"stream-file-{next(_tables)}"
    first = Started(data, table, strict, 1000)
    for i in range(12):
        first.put(f"k{i % 5}", i)
    first.stream.save()
    numbers = sorted(_seq(r) for found in first.everything().values() for r in found)
    first.stop()
    again = Started(data, table, strict, 4)
    try:
        kept = sorted(_seq(r) for found in again.everything().values() for r in found)
        assert kept == numbers[-4:]
    finally:
        again.stop()


def test_saves_append_and_the_file_is_rewritten_once_trimmed_records_dominate(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each save appends only the records since the last one and a state line (nothing when
    nothing changed); once the file holds more than twice what the stream keeps it is
    written whole again."""
    monkeypatch.setattr(streamfile, "REWRITE_LINES", 0)
    started = Started(data, f"stream-file-{next(_tables)}", True, 3)
    sidecar = data.with_name(".dev.jsonl.stream")
    try:
        started.put("a", 0)
        started.stream.save()
        assert [next(iter(json.loads(line))) for line in sidecar.read_text().splitlines()] == [
            "kind",
            "r",
            "state",
        ]
        started.put("a", 1)
        started.stream.save()
        assert [next(iter(json.loads(line))) for line in sidecar.read_text().splitlines()] == [
            "kind",
            "r",
            "state",
            "r",
            "state",
        ]
        before = sidecar.read_bytes()
        started.stream.save()
        assert sidecar.read_bytes() == before  # nothing new: nothing written
        for i in range(2, 30):
            started.put("a", i)
            started.stream.save()
            assert sidecar.read_text().count('{"r":') <= 2 * 3 + 1
    finally:
        started.stop()


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "moto"])
def test_records_trimmed_after_they_were_saved_are_dropped_at_the_restart(
    data: Path, strict: bool
) -> None:
    """Saves append each record once; the stream trims the oldest past its bound later, and
    the sidecar still holds them (until it is written whole): the restart drops them and
    serves the rest. Before, under --strict, such a sidecar was refused as damaged ("record
    ... is not one of its shards'") and the stream started new: the 30-minute soak's final
    sidecar (50,023 records, 23 trimmed) was."""
    table = f"stream-file-{next(_tables)}"
    first = Started(data, table, strict, 8)
    for i in range(6):
        first.put(f"k{i % 3}", i)
    first.stream.save()
    for i in range(6, 12):  # 12 taken, 8 kept: 4 trimmed that the sidecar holds
        first.put(f"k{i % 3}", i)
    first.stream.save()
    kept = sorted(_seq(r) for found in first.everything().values() for r in found)
    first.stop()
    sidecar = data.with_name(".dev.jsonl.stream")
    assert sidecar.read_text().count('{"r":') == 12  # appended, not written whole
    again = Started(data, table, strict, 8)
    try:
        assert again.said == []
        assert sorted(_seq(r) for found in again.everything().values() for r in found) == kept
        assert len(kept) == 8
    finally:
        again.stop()


def test_a_sidecar_that_does_not_describe_a_stream_is_ignored_with_a_word(data: Path) -> None:
    table = f"stream-file-{next(_tables)}"
    first = Started(data, table, True, 1000)
    first.put("a", 1)
    first.stream.save()
    arn = first.arn()
    first.stop()
    sidecar = data.with_name(".dev.jsonl.stream")
    lines = sidecar.read_text().splitlines()
    state = json.loads(lines[-1])
    state["state"]["shards"][0][4] = 5  # the open shards no longer cover the key space
    sidecar.write_text("\n".join([*lines[:-1], json.dumps(state)]) + "\n")
    again = Started(data, table, True, 1000)
    try:
        assert len(again.said) == 1 and again.said[0].startswith(f"{sidecar}: damaged (")
        assert again.said[0].endswith("; ignored (the table's stream starts new)")
        assert again.arn() != arn
        assert again.everything() == {s["ShardId"]: [] for s in again.shards()}
    finally:
        again.stop()


def test_the_strict_retention_runs_on_across_a_restart(
    data: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A record's age runs on while the server is down: one taken 600 s before the save and
    restored 500 s later is past the 1,000 s retention, trimmed; the newer ones are kept."""
    from sandbox_ledger.local.strict import streams

    now = [1000.0]
    table = f"stream-file-{next(_tables)}"
    first = Started(data, table, True, 1000, clock=lambda: now[0])
    first.put("old", 0)
    now[0] += 600
    first.put("new", 1)
    first.put("new", 2)
    first.stream.save()
    first.stop()
    later = time.time() + 500
    monkeypatch.setattr(
        streams, "time", types.SimpleNamespace(time=lambda: later, monotonic=time.monotonic)
    )
    again = Started(data, table, True, 1000, clock=lambda: 50.0)
    try:
        kept = [r for found in again.everything().values() for r in found]
        assert [r["dynamodb"]["NewImage"]["v"]["N"] for r in kept] == ["1", "2"]
    finally:
        again.stop()


def test_a_sidecar_of_the_other_mode_or_of_a_file_gone_is_ignored_with_a_word(
    data: Path,
) -> None:
    """A stream kept with --strict is not served by a server without it (its shards are the
    profile's), nor the reverse; a sidecar whose FILE is gone is a new store's: ignored."""
    table = f"stream-file-{next(_tables)}"
    sidecar = data.with_name(".dev.jsonl.stream")
    first = Started(data, table, True, 1000)
    first.put("a", 1)
    first.stream.save()
    arn = first.arn()
    first.stop()
    other = Started(data, table, False, 1000)
    try:
        assert other.said == [
            f"{sidecar}: kept by a server with --strict; ignored (the table's stream starts new)"
        ]
        assert other.arn() != arn
    finally:
        other.stop()
    data.unlink()
    gone = Started(data, table, True, 1000)
    try:
        assert gone.said == [
            f"{sidecar}: {data} does not exist; ignored (the table's stream starts new)"
        ]
        assert gone.arn() != arn
        assert gone.everything() == {s["ShardId"]: [] for s in gone.shards()}
    finally:
        gone.stop()
