"""Resource records in the fleet under faults (sandbox_ledger/soak: owner.py, sweeper.py,
check_resources.py; docs/reliability.md): the checker on hand-made histories, the TTL
stream reader on a hand-made stream, and short runs on DynamoDB that must pass and, with a
known defect put in the sweeper, fail."""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sandbox_ledger.resources.models import to_iso
from sandbox_ledger.resources.ttl_stream import TtlStream
from sandbox_ledger.resources.unreported import report_ttl_removals
from sandbox_ledger.soak.check_resources import ResourceReport, Timing, check_resources
from sandbox_ledger.soak.history import History, Operation, operations
from sandbox_ledger.soak.sweeper import HistoryPublisher, last_ttl_position

from .soak_runs import run_soak

T0 = 1_800_000_000.0
TIMING = Timing(window=4.0, lease=4.0, interval=1.0)
"""A bound of 2 * 4 + 3 * 1 + 2 * 4 = 19 s when sweeps come every second."""
R = "0b8f5a8e-3c1e-4b8e-9f53-7b1c2d3e4f50"
OTHER = "0b8f5a8e-3c1e-4b8e-9f53-7b1c2d3e4f51"


class _Lines:
    """A hand-made history: each line at a time of the test's choosing (seconds after T0)."""

    def __init__(self) -> None:
        self.lines: list[dict[str, Any]] = []
        self._numbers: dict[str, int] = {}

    def _next(self, process: str) -> int:
        self._numbers[process] = self._numbers.get(process, -1) + 1
        return self._numbers[process]

    def write(
        self,
        op: str,
        at: float,
        *,
        rev: int | None = None,
        outcome: str = "ok",
        deleted: bool | None = None,
        record: str = R,
        process: str = "o0",
    ) -> None:
        """An owner's write invoked at ``at`` and answered a tenth of a second later (or
        never: ``outcome="crashed"``)."""
        number = self._next(process)
        base = {"p": process, "i": number}
        self.lines.append({**base, "t": "invoke", "op": op, "at": T0 + at, "r": record})
        if outcome == "ok":
            done: dict[str, Any] = {"deleted": deleted} if op == "r_delete" else {"rev": rev}
            self.lines.append({**base, "t": "ok", "at": T0 + at + 0.1, **done})
        elif outcome == "fail":
            self.lines.append({**base, "t": "fail", "at": T0 + at + 0.1, "error": "x"})

    def expired(
        self,
        at: float,
        rev: int,
        *,
        key: str | None = None,
        trigger: str = "sweeper",
        record: str = R,
        process: str = "z",
    ) -> None:
        when = to_iso(datetime.fromtimestamp(T0 + at, UTC))
        self.lines.append(
            {
                "p": process,
                "i": self._next(process),
                "t": "event",
                "op": "expired",
                "at": T0 + at,
                "r": record,
                "created": "2027-01-15T08:00:00.000Z",
                "rev": rev,
                "key": key or f"{record}/2027-01-15T08:00:00.000Z/{rev}",
                "trigger": trigger,
                "expiredAt": when,
            }
        )

    def sweeps(self, *times: float) -> None:
        for at in times:
            number = self._next("z")
            self.lines.append({"p": "z", "i": number, "t": "invoke", "op": "sweep", "at": T0 + at})
            self.lines.append({"p": "z", "i": number, "t": "ok", "at": T0 + at + 0.2})

    def ops(self) -> list[Operation]:
        return operations(iter(self.lines))


def _check(lines: _Lines, stored: set[str] | None = None, end: float = 60.0) -> ResourceReport:
    lines.sweeps(*range(int(end)))
    return check_resources(lines.ops(), stored or set(), TIMING, end=T0 + end)


def _found(report: ResourceReport) -> list[str]:
    return [v.what for v in report.violations]


def test_a_dead_record_expired_once_in_time_passes() -> None:
    lines = _Lines()
    lines.write("r_put", 0, rev=1)
    lines.write("r_touch", 1, rev=2)
    lines.lines.append({"p": "o0", "i": 9, "t": "event", "op": "r_abandon", "at": T0 + 2, "r": R})
    lines.expired(8, 2)
    lines.expired(9, 2, trigger="ttl")  # the TTL stream's report, under the same key
    report = _check(lines)
    assert _found(report) == []
    assert (report.records, report.heartbeats, report.abandoned) == (1, 1, 1)
    assert (report.expired, report.reports, report.ttl_reports, report.duplicates) == (1, 2, 1, 1)
    assert report.bound == pytest.approx(19.0)


def test_a_record_written_again_after_its_expired_revision_was_a_live_owners() -> None:
    lines = _Lines()
    lines.write("r_put", 0, rev=1)
    lines.write("r_touch", 1, rev=2)
    lines.write("r_touch", 2, rev=3)  # acknowledged: revision 2 was no longer the record's
    lines.expired(8, 2)
    [found] = _found(_check(lines))
    assert found == (
        f"record {R} of a live owner was expired at revision 2, yet its owner's write made a "
        "later revision (acknowledged)"
    )


def test_a_record_deleted_by_its_owner_is_never_reported_expired() -> None:
    lines = _Lines()
    lines.write("r_put", 0, rev=1)
    lines.write("r_delete", 1, deleted=True)
    lines.expired(8, 1)
    assert _found(_check(lines)) == [
        f"record {R} of a live owner was expired at revision 1, yet its owner deleted it "
        "(acknowledged)"
    ]


@pytest.mark.parametrize(("expired", "violation"), [(2.5, True), (4.5, False)])
def test_a_revision_expires_no_sooner_than_a_window_after_its_write_began(
    expired: float, violation: bool
) -> None:
    lines = _Lines()
    lines.write("r_put", 0, rev=1)
    lines.write("r_touch", 0.4, rev=2)
    lines.expired(0.4 + expired, 2)
    found = _found(_check(lines))
    assert found == (
        [
            f"record {R} of a live owner was expired {expired:.2f} s after the write of "
            "revision 2 began, within its window of 4.0 s"
        ]
        if violation
        else []
    )


def test_a_revision_no_acknowledged_write_made_is_timed_from_the_first_unknown_one() -> None:
    lines = _Lines()
    lines.write("r_put", 0, rev=1)
    lines.write("r_touch", 1, rev=2)
    lines.write("r_touch", 5, outcome="fail")  # may have made 3 (its answer was lost)
    lines.write("r_touch", 6, outcome="crashed")  # may have made 3 or 4
    lines.expired(7, 3)  # 2 s after the earliest write that may have made it
    [found] = _found(_check(lines))
    assert "expired 2.00 s after the write of revision 3 began" in found
    later = _Lines()
    later.lines = [line for line in lines.lines if line.get("op") != "expired"]
    later._numbers = dict(lines._numbers)
    later.expired(9.5, 3)
    assert _found(_check(later)) == []


@pytest.mark.parametrize(("end", "violation"), [(18.0, False), (21.0, True)])
def test_a_dead_record_still_stored_past_the_bound_was_not_expired(
    end: float, violation: bool
) -> None:
    lines = _Lines()
    lines.write("r_put", 0, rev=1)
    lines.write("r_touch", 1, rev=2)  # its last write: the bound runs from here
    found = _found(_check(lines, stored={R}, end=end))
    assert found == (
        [
            f"record {R} is still stored {end - 1:.1f} s after its last write, beyond the "
            "bound of 19.0 s (a dead owner's record not expired)"
        ]
        if violation
        else []
    )


def test_a_record_expired_later_than_the_bound_fails() -> None:
    lines = _Lines()
    lines.write("r_put", 0, rev=1)
    lines.expired(25, 1)
    assert _found(_check(lines)) == [
        f"record {R} was expired 25.0 s after its last write, beyond the bound of 19.0 s"
    ]


def test_the_bound_grows_with_the_longest_interval_between_sweeps() -> None:
    lines = _Lines()
    lines.write("r_put", 0, rev=1)
    lines.sweeps(1, 2, 14)  # the sweeper out for 12 s
    lines.expired(25, 1)
    lines.lines.append({"p": "z2", "i": 0, "t": "invoke", "op": "sweep", "at": T0 + 14.5})
    report = check_resources(lines.ops(), set(), TIMING, end=T0 + 25)
    assert (report.sweeps, report.sweeps_killed) == (3, 1)  # one killed mid-sweep
    assert report.longest_interval == pytest.approx(12.0)
    assert report.bound == pytest.approx(2 * 4 + 3 * 12 + 2 * 4)
    assert _found(report) == []


def test_the_bound_of_a_record_counts_the_sweeps_of_its_own_time_only() -> None:
    lines = _Lines()
    lines.sweeps(1, 2, *range(14, 60))  # out for 12 s early on, then every second
    lines.write("r_put", 30, rev=1)
    lines.expired(55, 1)  # 25 s after: the outage long before is no excuse
    lines.write("r_put", 0, rev=1, record=OTHER)  # a record of the outage's time
    lines.expired(20, 1, record=OTHER)
    report = check_resources(lines.ops(), set(), TIMING, end=T0 + 60)
    assert report.bound == pytest.approx(2 * 4 + 3 * 12 + 2 * 4)  # the run's, a figure
    assert _found(report) == [
        f"record {R} was expired 25.0 s after its last write, beyond the bound of 19.0 s"
    ]


def test_an_expiry_reported_under_two_keys_fails_with_both() -> None:
    lines = _Lines()
    lines.write("r_put", 0, rev=1)
    lines.expired(8, 1)
    lines.expired(8.1, 1, key=f"{R}/2027-01-15T08:00:00.000Z/1/again")
    report = _check(lines)
    [violation] = report.violations
    assert violation.what.startswith(f"record {R} was reported expired 2 times under 2 different")
    assert sum("expired" in line and "key" in line for line in violation.excerpt) == 2
    assert report.duplicates == 0


def test_a_record_gone_that_nobody_reported_fails_unless_its_owner_may_have_deleted_it() -> None:
    gone, deleting, never = (f"{R[:-1]}{n}" for n in "123")
    lines = _Lines()
    lines.write("r_put", 0, rev=1, record=gone)
    lines.write("r_put", 0, rev=1, record=deleting)
    lines.write("r_delete", 1, outcome="crashed", record=deleting)  # may have deleted it
    lines.write("r_put", 0, outcome="fail", record=never)  # may never have existed
    assert _found(_check(lines, end=10)) == [
        f"record {gone} is gone, yet nobody reported it expired and its owner never deleted it"
    ]


def test_a_report_of_a_record_no_owner_wrote_fails() -> None:
    lines = _Lines()
    lines.expired(3, 1)
    assert _found(_check(lines)) == [f"record {R} was reported expired, written by no owner"]


def _stream_record(sequence: str, event: str = "REMOVE") -> dict[str, Any]:
    return {
        "eventID": sequence,
        "eventName": event,
        "userIdentity": {"Type": "Service", "PrincipalId": "dynamodb.amazonaws.com"},
        "dynamodb": {
            "SequenceNumber": sequence,
            "ApproximateCreationDateTime": datetime(2027, 1, 15, 8, 0, 10, tzinfo=UTC),
            "Keys": {"PK": {"S": f"R#{sequence}"}, "SK": {"S": "R"}},
            "OldImage": {"blob": {"B": b"\x00\x01"}},
        },
    }


class _Streams:
    """A stream of two shards, a parent closed after two records and its open child."""

    def __init__(self) -> None:
        self.shards = {"a": ["1", "2"], "b": ["3"]}
        self.calls: list[tuple[str, str | None]] = []
        self.trimmed_to: dict[str, int] = {}

    def describe_stream(self, **params: Any) -> dict[str, Any]:
        shards = [{"ShardId": "b", "ParentShardId": "a"}, {"ShardId": "a"}]
        return {"StreamDescription": {"Shards": shards}}

    def get_shard_iterator(self, **params: Any) -> dict[str, Any]:
        self.calls.append((params["ShardId"], params.get("SequenceNumber")))
        after = params.get("SequenceNumber")
        records = self.shards[params["ShardId"]]
        trimmed = self.trimmed_to.get(params["ShardId"], 0)
        if after and int(after) < trimmed:
            error = {"Error": {"Code": "TrimmedDataAccessException", "Message": "trimmed"}}
            raise ClientError(error, "GetShardIterator")
        start = records.index(after) + 1 if after else 0
        start = max(start, sum(int(r) <= trimmed for r in records))
        return {"ShardIterator": json.dumps([params["ShardId"], start])}

    def get_records(self, **params: Any) -> dict[str, Any]:
        shard, start = json.loads(params["ShardIterator"])
        records = [_stream_record(s) for s in self.shards[shard][start:]]
        following = json.dumps([shard, len(self.shards[shard])])
        closed = shard == "a" and start >= len(self.shards[shard])
        return {"Records": records, "NextShardIterator": None if closed else following}


ARN = "arn:aws:dynamodb:us-east-1:000000000000:table/soak-ledger/stream/2027-01-15T08:00:00.000"


def test_the_ttl_stream_reads_parents_first_and_resumes_after_its_position() -> None:
    streams = _Streams()
    stream = TtlStream(streams, ARN, None)
    records = stream.read()
    assert [r["dynamodb"]["SequenceNumber"] for r in records] == ["1", "2", "3"]
    # As a Lambda event source mapping hands them out: its table's ARN, Unix seconds, base64.
    assert {r["eventSourceARN"] for r in records} == {ARN}
    first = records[0]["dynamodb"]
    assert (
        first["ApproximateCreationDateTime"]
        == datetime(2027, 1, 15, 8, 0, 10, tzinfo=UTC).timestamp()
    )
    assert first["OldImage"]["blob"] == {"B": "AAE="}
    assert stream.position() == {"arn": ARN, "at": {"b": "3"}, "done": ["a"]}
    streams.shards["b"].append("4")
    again = TtlStream(streams, ARN, stream.position())  # started again from the saved one
    assert [r["dynamodb"]["SequenceNumber"] for r in again.read()] == ["4"]
    assert streams.calls[-1] == ("b", "3")
    # A position of another stream (a restarted local server's, the table made again) is not
    # this one's: read from the start, and what the old stream held after it is said lost.
    replaced = TtlStream(streams, ARN + "x", stream.position())
    assert len(replaced.read()) == 4
    assert replaced.lost == [f"stream {ARN} replaced by {ARN}x"]


class _GoneStreams(_Streams):
    """A stream replaced under a running reader: its ARN is gone, the table's is another."""

    def describe_stream(self, **params: Any) -> dict[str, Any]:
        if params["StreamArn"] == ARN:
            error = {"Error": {"Code": "ResourceNotFoundException", "Message": "gone"}}
            raise ClientError(error, "DescribeStream")
        return super().describe_stream(**params)


def test_a_reader_whose_stream_is_gone_goes_on_in_the_tables_new_one() -> None:
    stream = TtlStream(_GoneStreams(), ARN, None, latest=lambda: ARN + "-new")
    assert len(stream.read()) == 3  # all the new one holds
    assert stream.arn == ARN + "-new" and stream.lost == [f"stream {ARN} replaced by {ARN}-new"]
    with pytest.raises(ClientError, match="gone"):  # none to go on in: said, not passed over
        TtlStream(_GoneStreams(), ARN, None, latest=lambda: ARN).read()


def test_the_ttl_stream_says_what_was_trimmed_and_reads_on_from_what_is_held() -> None:
    streams = _Streams()
    streams.trimmed_to = {"b": 4}  # records 3 and 4 of the child are trimmed
    streams.shards["b"] += ["4", "5"]
    stream = TtlStream(streams, ARN, {"arn": ARN, "at": {"b": "3"}, "done": ["a"]})
    assert [r["dynamodb"]["SequenceNumber"] for r in stream.read()] == ["5"]
    assert stream.lost == ["b after 3"]


def test_ttl_removals_read_off_the_stream_are_reported_with_their_keys(tmp_path: Path) -> None:
    from sandbox_ledger import keys as k
    from sandbox_ledger.resources import _items as ri
    from sandbox_ledger.resources.models import ResourceActivityRecord

    record = ResourceActivityRecord.model_validate(
        {
            "version": 1,
            "id": R,
            "pid": 1,
            "sandboxProvider": "soak",
            "placement": "remote",
            "workspace": "/w",
            "createdAt": "2027-01-15T08:00:00.000Z",
            "updatedAt": "2027-01-15T08:00:00.000Z",
            "phase": "ready",
            "operations": [],
        }
    )
    image = {
        **ri.record_key(R),
        **ri.write_values(record, expires_at=1, shard_count=4),
        k.REVISION: {"N": "5"},
    }
    removal = _stream_record("7")
    removal["dynamodb"]["OldImage"] = image
    history = History(tmp_path / "h.jsonl", "z")
    stream = TtlStream(None, ARN, None)
    shaped = [stream._as_lambda(removal), stream._as_lambda(_stream_record("8", "MODIFY"))]
    report = report_ttl_removals(
        shaped, table_name="soak-ledger", publisher=HistoryPublisher(history), store=None
    )
    assert report.published == [R]
    history.event("ttl_position", pos={"arn": ARN, "at": {"a": "8"}, "done": []})
    history.close()
    [line] = [json.loads(x) for x in (tmp_path / "h.jsonl").read_text().splitlines()][:1]
    assert (line["op"], line["r"], line["rev"], line["trigger"]) == ("expired", R, 5, "ttl")
    assert line["key"] == f"{R}/2027-01-15T08:00:00.000Z/5"
    assert line["expiredAt"] == "2027-01-15T08:00:10.000Z"
    assert last_ttl_position(tmp_path / "h.jsonl") == {"arn": ARN, "at": {"a": "8"}, "done": []}


def _run(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_soak(tmp_path, "--store", "dynamodb", *args)


@pytest.mark.slow
def test_a_short_run_with_owners_and_the_sweeper_passes(tmp_path: Path) -> None:
    done = _run(tmp_path, "--seconds", "15", "--workers", "2", "--kill-every", "2")
    assert done.returncode == 0, done.stdout + done.stderr
    figures = json.loads(done.stdout.splitlines()[-1])
    assert figures["violations"] == 0, figures
    assert figures["resourceRecords"] > 0 and figures["heartbeats"] > 0, figures
    assert figures["recordsExpired"] > 0 and figures["sweeps"] > 0, figures


@pytest.mark.slow
@pytest.mark.parametrize(
    ("defect", "found"),
    [
        ("early", "of a live owner was expired"),
        ("republish", "different keys"),
    ],
)
def test_the_checker_bites_a_sweeper_with_a_known_defect(
    tmp_path: Path, defect: str, found: str
) -> None:
    """A sweeper that judges by a fortieth of the window (it expires records whose owners
    heartbeat on time), or one that publishes each expiry again under a new key, fails the
    run with the records' history lines, the seed and the command that runs it again."""
    done = _run(tmp_path, "--seconds", "20", "--workers", "1", "--defect", defect)
    assert done.returncode == 1, done.stdout + done.stderr
    assert found in done.stderr, done.stderr
    # The excerpt: the owner's writes of the record and the reports.
    assert " expired " in done.stderr and " -> ok" in done.stderr
    assert "--seed 1" in done.stderr and f"--defect {defect}" in done.stderr


def test_an_owner_refuses_a_store_that_keeps_no_resource_records() -> None:
    from sandbox_ledger.soak.owner import record_store

    with pytest.raises(ValueError, match="store: resource records are kept on DynamoDB only"):
        record_store("sqlite:///x.db")
    store = record_store("dynamodb://tab?region=us-east-1&endpoint_url=http://127.0.0.1:1")
    assert store.table_name == "tab"


def test_the_last_sweeper_takes_a_listing_that_failed_for_records_still_held() -> None:
    from sandbox_ledger.soak.sweeper import _holds_records

    class Failing:
        def list(self, **options: Any) -> Any:
            raise ConnectionResetError("reset by the proxy")

    assert _holds_records(Failing()) is True  # never quiet on what it could not see
