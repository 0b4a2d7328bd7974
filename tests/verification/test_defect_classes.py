"""Every defect class of the mutation table (docs/verification.md) put back in process, one
at a time, and the fixed scenario that must catch it: deterministic, in ``make test``, a
few seconds each. The model-based runs explore; these make sure a known bug never comes
back on an unlucky seed.

A defect is a textual change to one function's source (compiled in its own module's
namespace and installed where that function is looked up, by every module that imported
it by name). When a defect's text no longer matches the code it was written against, its
test fails saying so: rewrite the defect against the new code, never drop it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from dynamodb import test_delete_race as race
from dynamodb.faults import PartialBatches, ResendAfterSuccess
from resources.resource_fixtures import Collector, record
from sandbox_ledger import LedgerEntry, LedgerError, LedgerEvent, ListSandboxOptions
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.errors import ConflictError
from sandbox_ledger.resources import ExpiryPolicy, SyncResourceRecordStore, VersionedRecord, sweep
from sandbox_ledger.resources.policy import expiry_reason
from sandbox_ledger.transfer import export_lines, import_entries, parse_lines
from verification.mutants import Patch, install

# -- scenarios ------------------------------------------------------------------------------


@dataclass
class World:
    endpoint: str
    table: str
    tmp: Path
    settle: Callable[[], None]
    """Returns once the server's indexes have every write (a scenario that checks what an
    index shows once settled calls it first)."""

    def ledger(self) -> SyncDynamoDBAdapter:
        return SyncDynamoDBAdapter(self.table, endpoint_url=self.endpoint)

    def records(self) -> SyncResourceRecordStore:
        return SyncResourceRecordStore(self.table, endpoint_url=self.endpoint)


def entry(event: str, ts: int, step: int = -1, sid: str = "s1") -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name="defects", sandbox_id=sid, step_index=step, event=event, payload={"n": ts}
    )


def lifecycle(sid: str = "s1") -> list[LedgerEntry]:
    return [
        entry(LedgerEvent.SandboxCreated, 10, sid=sid),
        entry(LedgerEvent.ExecStarted, 11, 0, sid=sid),
        entry(LedgerEvent.ExecComplete, 12, 0, sid=sid),
        entry(LedgerEvent.ExecComplete, 13, 1, sid=sid),
        entry(LedgerEvent.SandboxClosed, 14, sid=sid),
    ]


def resent_writes_count_once(world: World) -> None:
    """Every write's response is lost and the SDK resends it, once each: each entry is stored
    once and counted once. The transactions carry no ``ClientRequestToken``: DynamoDB (and
    the strict profile) answers a resend with its token once, for 10 minutes; the head's
    condition is what holds where no token does (a resend past those minutes, a client that
    sends none)."""
    ledger = world.ledger()
    resend = ResendAfterSuccess(1.0, {"PutItem", "TransactWriteItems", "UpdateItem"})
    resend.attach(ledger.client())

    def no_token(params: dict[str, Any], **_: Any) -> None:
        body = json.loads(params["body"])
        body.pop("ClientRequestToken", None)
        params["body"] = json.dumps(body).encode()

    ledger.client().meta.events.register("before-call.dynamodb.TransactWriteItems", no_token)
    sent = lifecycle()
    for e in sent:
        try:
            ledger.append(e)
        except LedgerError as exc:  # a resend must be recognised as stored, not fought
            pytest.fail(f"append {e.event} failed: {exc}")
    assert resend.resent >= len(sent)
    assert [e.wire() for e in ledger.read_all("defects", "s1")] == [e.wire() for e in sent]
    # Followed once each: one sequence mark per entry.
    assert [e.wire() for e in ledger.read_in_append_order("defects", "s1")] == [
        e.wire() for e in sent
    ]
    details = ledger.get_sandbox_details("defects", "s1")
    assert details is not None and details.exec_count == 2, details


def the_first_created_wins(world: World) -> None:
    """A second sandbox.created (a later ts) changes neither startedAt nor the listing's
    order key."""
    ledger = world.ledger()
    ledger.append(entry(LedgerEvent.SandboxCreated, 10))
    ledger.append(entry(LedgerEvent.SandboxCreated, 20))
    details = ledger.get_sandbox_details("defects", "s1")
    assert details is not None and details.started_at == 10, details
    world.settle()  # the listing's index has both writes
    listed = ledger.list_sandbox_details("defects", ListSandboxOptions(before=15))
    assert [d.sandbox_id for d in listed] == ["s1"]


def an_append_racing_a_delete_is_counted_where_it_lands(world: World) -> None:
    """An exec.complete lands between the delete's read of the partition and its writes."""
    race.test_an_append_between_the_delete_query_and_its_writes(world.endpoint, world.table)


def a_delete_under_partial_batches_removes_everything(world: World) -> None:
    """Every BatchWriteItem leaves part of its batch unprocessed: the delete still removes
    every entry, and a large entry's parts are all written."""
    ledger = world.ledger()
    sent = [entry(LedgerEvent.SandboxCreated, 10)]
    sent += [entry(LedgerEvent.ExecStarted, 11 + i, i) for i in range(30)]
    sent.append(
        LedgerEntry(
            ts=99,
            name="defects",
            sandbox_id="s1",
            step_index=30,
            event=LedgerEvent.ExecComplete,
            payload={"blob": "x" * 1_500_000},  # several parts, written in one batch
        )
    )
    PartialBatches(0.5).attach(ledger.client())
    for e in sent:
        ledger.append(e)
    assert [e.wire() for e in ledger.read_all("defects", "s1")] == [e.wire() for e in sent]
    ledger.delete_sandbox("defects", "s1")
    assert ledger.read_all("defects", "s1") == []
    assert ledger.get_sandbox_details("defects", "s1") is None


def claim(
    store: SyncResourceRecordStore, stored: VersionedRecord, *, owner: str, now: datetime
) -> None:
    """Claim ``stored`` as it was read, for a 10-minute lease."""
    now_ms = int(now.timestamp() * 1000)
    store.claim(stored, "stale", owner=owner, now_ms=now_ms, until_ms=now_ms + 600_000)


def a_claim_needs_the_revision_it_judged(world: World) -> None:
    """A sweeper claims at the revision it read: the owner's heartbeat in between wins."""
    store = world.records()
    stored = store.put(record(age=timedelta(hours=1)))
    store.touch(stored.record.id)
    with pytest.raises(ConflictError):
        claim(store, stored, owner="sweeper", now=datetime.now(UTC))
    store.touch(stored.record.id)  # still the owner's


def an_export_imported_back_writes_nothing(world: World) -> None:
    """The entries were appended (no import identity): importing their export into the same
    store finds them all present."""
    ledger = world.ledger()
    sent = lifecycle() + lifecycle("s2")
    for e in sent:
        ledger.append(e)
    lines = list(export_lines(ledger, ledger.scan_sessions()))
    report = import_entries(ledger, parse_lines(line.encode() for line in lines))
    assert (report.new, report.present, report.failed) == (0, len(sent), []), report
    assert len(ledger.read_all("defects", "s1")) == 5


def ttls_follow_the_retention_policy(world: World) -> None:
    """Each phase's TTL lies beyond the policy's own expiry of it by the horizon: a failed
    record kept for a week is not removed by TTL after the horizon alone."""
    store = world.records()
    for phase in ("ready", "cleanup-failed"):
        before = datetime.now(UTC).timestamp()
        stored = store.put(record(age=timedelta(0), phase=phase))
        latest = ExpiryPolicy().latest_expiry(phase)
        assert latest is not None and stored.expires_at is not None
        floor = before + latest.total_seconds() + store.ttl_horizon.total_seconds()
        assert stored.expires_at >= int(floor), (phase, stored.expires_at, floor)


def failed_records_are_kept_for_their_retention(world: World) -> None:
    """A cleanup-failed record unchanged a little past stale_after is kept (retained for a
    week), where a live one expires."""
    unchanged = ExpiryPolicy().stale_after + timedelta(minutes=1)
    failed = record(age=timedelta(0), phase="cleanup-failed")
    assert expiry_reason(failed, unchanged_for=unchanged) is None
    assert expiry_reason(record(age=timedelta(0)), unchanged_for=unchanged) is not None


def another_sweepers_live_claim_is_left_to_it(world: World) -> None:
    """A record another run claimed (its lease live) is skipped, not published again."""
    store = world.records()
    stored = store.put(record(age=timedelta(hours=1)))
    now = datetime.now(UTC)
    claim(store, stored, owner="another-run", now=now)
    world.settle()  # the sweep's index has the record
    publisher = Collector()
    result = sweep(store, publisher, now=now + timedelta(minutes=1))
    assert result.skipped == [stored.record.id] and result.expired == [], result
    assert publisher.published == []


# -- the table ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Defect:
    row: int
    what: str
    patches: tuple[Patch, ...]
    scenario: Callable[[World], None]


OPS = "sandbox_ledger.dynamodb._ops"
DEFECTS = (
    Defect(
        1,
        "unconditional append: the head's attribute_not_exists removed",
        (
            Patch(
                OPS,
                "append",
                'actions: list[dict[str, Any]] = [{"Put": {"TableName": table, "Item": head, '
                "**absent}}]",
                'actions: list[dict[str, Any]] = [{"Put": {"TableName": table, "Item": head}}]',
            ),
        ),
        resent_writes_count_once,
    ),
    Defect(
        2,
        "the summary updated outside the entry's transaction",
        (
            Patch(
                OPS,
                "append",
                '            actions.append({"Update": {"TableName": table, **update, '
                "**condition}})\n",
                '            yield Call("update_item", {"TableName": table, **update})\n',
            ),
        ),
        resent_writes_count_once,
    ),
    Defect(
        3,
        "the last sandbox.created wins instead of the first",
        (
            Patch(
                "sandbox_ledger.dynamodb._items",
                "summary_fold",
                '_set_if_absent(A.STARTED_AT, ":ts"),\n'
                '            _set_if_absent(k.INDEX_SORT_KEY, ":ts"),',
                'f"{A.STARTED_AT} = :ts",\n            f"{k.INDEX_SORT_KEY} = :ts",',
            ),
        ),
        the_first_created_wins,
    ),
    Defect(
        4,
        "appends racing delete_sandbox: the summary's delete lease not checked",
        (
            Patch(
                OPS,
                "_summary_condition",
                'condition = "(attribute_not_exists(#dl) OR #dl < :now)"',
                'condition = "(attribute_not_exists(#dl) OR #dl < :now OR #dl >= :now)"',
            ),
        ),
        an_append_racing_a_delete_is_counted_where_it_lands,
    ),
    Defect(
        5,
        "retention ignored: failed-phase records judged like live ones",
        (
            Patch(
                "sandbox_ledger.resources.policy",
                "ExpiryPolicy.window",
                "return self.retain_failed or None",
                "return self.stale_after",
            ),
        ),
        failed_records_are_kept_for_their_retention,
    ),
    Defect(
        7,
        "unprocessed batch items dropped",
        (
            Patch(
                "sandbox_ledger.sdk.batching",
                "batch_write",
                "queue.extendleft(reversed(left))",
                "pass",
            ),
        ),
        a_delete_under_partial_batches_removes_everything,
    ),
    Defect(
        8,
        "a claim without the revision condition",
        (
            Patch(
                "sandbox_ledger.resources._ops",
                "mark_expiring",
                '"ConditionExpression": f"{as_judged} AND (attribute_not_exists(#exp) OR "',
                "\"ConditionExpression\": f\"{as_judged.replace('#rev = :rev AND ', '')} AND \""
                '"(attribute_not_exists(#exp) OR "',
            ),
        ),
        a_claim_needs_the_revision_it_judged,
    ),
    Defect(
        9,
        "position-keyed import: the copies the session holds not reconciled",
        (
            Patch(
                "sandbox_ledger._import_stream",
                "_write",
                "held = Counter(content_digest(e) for e in read.pop(key))",
                "held = Counter()",
            ),
        ),
        an_export_imported_back_writes_nothing,
    ),
    Defect(
        10,
        "a TTL that ignores the retention policy",
        (
            Patch(
                "sandbox_ledger.resources.store",
                "_Base._ttls",
                "None if latest is None else int(now_s + latest.total_seconds() + self._horizon)",
                "int(now_s + self._horizon)",
            ),
        ),
        ttls_follow_the_retention_policy,
    ),
    Defect(
        11,
        "a sweeper taking another's live claim",
        (
            Patch(
                "sandbox_ledger.resources.sweeper",
                "_held_by_another",
                "    return (\n        stored.expiring is not None",
                "    return False and (\n        stored.expiring is not None",
            ),
            Patch(
                "sandbox_ledger.resources._ops",
                "mark_expiring",
                '"attribute_not_exists(#until) OR #until < :now)"',
                '"attribute_not_exists(#until) OR #until < :now OR attribute_exists(#exp))"',
            ),
        ),
        another_sweepers_live_claim_is_left_to_it,
    ),
)


@pytest.fixture
def world(
    moto_endpoint: str, sync_table: str, tmp_path: Path, wait_for_indexes: Callable[[], None]
) -> World:
    return World(moto_endpoint, sync_table, tmp_path, wait_for_indexes)


@pytest.mark.parametrize("defect", DEFECTS, ids=[f"row{d.row}" for d in DEFECTS])
def test_the_scenario_holds(defect: Defect, world: World) -> None:
    defect.scenario(world)


@pytest.mark.parametrize("defect", DEFECTS, ids=[f"row{d.row}" for d in DEFECTS])
@pytest.mark.usefixtures("fast_sdk_backoff")  # a defect's writer backs off until it gives up
def test_the_defect_is_caught(
    defect: Defect, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    for patch in defect.patches:
        install(patch, monkeypatch)
    with pytest.raises((AssertionError, pytest.fail.Exception)) as caught:
        defect.scenario(world)
    print(f"row {defect.row} ({defect.what}): {str(caught.value).splitlines()[0][:200]}")
