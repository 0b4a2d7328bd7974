import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from resources.resource_fixtures import TS_RECORD, record
from sandbox_ledger import keys as k
from sandbox_ledger.resources import (
    ExpiryPolicy,
    LocalProcessIdentity,
    ResourceActivityRecord,
    SweeperSettings,
    current_identity,
    expiry_reason,
    is_owner_alive,
    is_ttl_removal,
    ttl_expiry,
)
from sandbox_ledger.resources import _items as ri
from sandbox_ledger.resources.owner import process_start_time


def test_a_typescript_record_file_round_trips_unchanged(tmp_path: Path) -> None:
    path = tmp_path / "resources" / f"{TS_RECORD['id']}.json"
    path.parent.mkdir()
    path.write_text(json.dumps(TS_RECORD, indent=2))
    parsed = ResourceActivityRecord.model_validate_json(path.read_text())
    assert parsed.wire() == TS_RECORD
    assert parsed.identity is not None and parsed.identity.pid_namespace == 4026531836
    minimal = {
        k: v for k, v in TS_RECORD.items() if k not in ("identity", "lastOperation", "lastFailure")
    }
    assert ResourceActivityRecord.model_validate(minimal).wire() == minimal


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"version": 2}, "version"),
        ({"phase": "sleeping"}, "phase"),
        ({"placement": "cloud"}, "placement"),
        ({"id": "not-a-uuid"}, "id"),
        ({"sandboxProvider": ""}, "sandboxProvider"),
        ({"pid": -1}, "pid"),
        ({"updatedAt": "2026-11-30T09:00:00.000Z"}, "updatedAt"),
        ({"createdAt": "yesterday"}, "createdAt"),
        ({"operations": [{"kind": "exec", "count": -1}]}, "count"),
        (
            {"lastOperation": {"kind": "x", "outcome": "maybe", "at": "2026-11-30T10:00:00Z"}},
            "outcome",
        ),
    ],
)
def test_invalid_records_name_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        ResourceActivityRecord.model_validate({**TS_RECORD, **change})


CANONICAL_ID = TS_RECORD["id"]
assert isinstance(CANONICAL_ID, str)
# Spellings of one UUID (and near-UUIDs) that uuid.UUID() accepts: each would have been a
# record of its own, so one sandbox could be expired and reported several times.
OTHER_SPELLINGS = {
    "upper case": CANONICAL_ID.upper(),
    "braces": "{" + CANONICAL_ID + "}",
    "urn": "urn:uuid:" + CANONICAL_ID,
    "no hyphens": CANONICAL_ID.replace("-", ""),
    "newline": CANONICAL_ID + "\n",
    "trailing space": CANONICAL_ID + " ",
    "underscore": CANONICAL_ID[0] + "_" + CANONICAL_ID[2:],
    "leading plus": "+" + CANONICAL_ID[1:],
    "full-width digits": CANONICAL_ID.replace("5", "\uff15"),
    "arabic-indic digits": CANONICAL_ID.replace("5", "\u0665"),
}


@pytest.mark.parametrize("spelling", OTHER_SPELLINGS.values(), ids=OTHER_SPELLINGS.keys())
def test_a_record_id_is_exactly_a_canonical_uuid(spelling: str) -> None:
    import uuid

    uuid.UUID(spelling.strip())  # what the old check accepted
    with pytest.raises(ValueError, match=r"id: .* not a UUID in canonical form"):
        ResourceActivityRecord.model_validate({**TS_RECORD, "id": spelling})
    with pytest.raises(ValueError, match=r"^id: "):
        k.resource_pk(spelling)
    assert ResourceActivityRecord.model_validate(TS_RECORD).id == CANONICAL_ID


def test_the_refusal_names_the_canonical_spelling_only_for_the_same_uuid() -> None:
    with pytest.raises(ValueError, match=f"write it as '{CANONICAL_ID}'"):
        k.check_record_id(CANONICAL_ID.upper())
    # uuid.UUID reads '+b8f...' as '0b8f...': another id, so no hint that it is the same.
    with pytest.raises(ValueError) as refused:
        k.check_record_id(OTHER_SPELLINGS["leading plus"])
    assert "write it as" not in str(refused.value)


def test_item_round_trip_keeps_the_wire_shape() -> None:
    original = ResourceActivityRecord.model_validate(TS_RECORD)
    values = ri.write_values(original, expires_at=1_800_000_000, shard_count=4)
    item = {**ri.record_key(original.id), **values, "rev": {"N": "3"}}
    back = ri.decode(item)
    assert back.record.wire() == TS_RECORD and back.revision == 3
    assert back.expires_at == 1_800_000_000
    forever = ri.write_values(original, expires_at=None, shard_count=4)
    assert k.TTL_ATTRIBUTE not in forever


NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("phase", "age", "policy", "expired"),
    [
        ("ready", timedelta(minutes=14), ExpiryPolicy(), False),
        ("ready", timedelta(minutes=16), ExpiryPolicy(), True),
        ("allocating", timedelta(minutes=16), ExpiryPolicy(), True),
        ("closing", timedelta(hours=1), ExpiryPolicy(stale_after=timedelta(hours=2)), False),
        ("cleanup-failed", timedelta(days=6), ExpiryPolicy(), False),
        ("cleanup-failed", timedelta(days=8), ExpiryPolicy(), True),
        ("allocation-uncertain", timedelta(days=8), ExpiryPolicy(), True),
        (
            "allocation-uncertain",
            timedelta(days=800),
            ExpiryPolicy(retain_failed=timedelta(0)),
            False,
        ),
    ],
)
def test_expiry_policy(phase: str, age: timedelta, policy: ExpiryPolicy, expired: bool) -> None:
    """``age``: how long the sweeper has seen the revision unchanged (its clock); the record's
    own updatedAt plays no part."""
    r = record(age=timedelta(days=365 * 20), phase=phase, now=NOW)
    reason = expiry_reason(r, unchanged_for=age, policy=policy)
    assert (reason is not None) is expired
    if reason:
        assert phase in reason


def test_a_live_owner_keeps_a_stale_record() -> None:
    stale, hour = record(age=timedelta(hours=1), now=NOW), timedelta(hours=1)
    assert expiry_reason(stale, unchanged_for=hour, owner_alive=True) is None
    gone = expiry_reason(stale, unchanged_for=hour, owner_alive=False)
    assert "owner process gone" in (gone or "")


def test_policy_refuses_bad_windows() -> None:
    with pytest.raises(ValueError, match="stale_after"):
        ExpiryPolicy(stale_after=timedelta(0))
    with pytest.raises(ValueError, match="retain_failed"):
        ExpiryPolicy(retain_failed=timedelta(seconds=-1))


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
def test_owner_liveness_on_this_host() -> None:
    me = current_identity()
    assert me is not None
    assert is_owner_alive(me, os.getpid()) is True
    # A reused PID: same number, another start time.
    reused = me.model_copy(update={"start_time": int(me.start_time) + 1})
    assert is_owner_alive(reused, os.getpid()) is False
    # A dead owner: no such process.
    assert is_owner_alive(me, 2**22 + 12345) is False
    assert process_start_time(2**22 + 12345) is None
    # Another host or another boot: this host cannot tell.
    assert is_owner_alive(me.model_copy(update={"host": "elsewhere"}), os.getpid()) is None
    assert is_owner_alive(me.model_copy(update={"boot_id": "x"}), os.getpid()) is None
    assert is_owner_alive(None, os.getpid()) is None


def test_start_time_parsing_survives_odd_command_names(tmp_path: Path) -> None:
    (tmp_path / "77").mkdir()
    fields = ["S"] + [str(i) for i in range(4, 60)]
    (tmp_path / "77" / "stat").write_text("77 (a) b (c)) " + " ".join(fields))
    assert process_start_time(77, tmp_path) == 22


def test_handler_settings() -> None:
    settings = SweeperSettings.from_env(
        {
            "TABLE_NAME": "tbl",
            "DRY_RUN": "true",
            "STALE_AFTER_SECONDS": "60",
            "RETAIN_FAILED_SECONDS": "0",
        }
    )
    assert settings.dry_run and settings.event_bus_name == "default"
    assert settings.policy == ExpiryPolicy(
        stale_after=timedelta(seconds=60), retain_failed=timedelta(0)
    )
    defaults = SweeperSettings.from_env({"TABLE_NAME": "tbl"})
    assert defaults.policy == ExpiryPolicy() and not defaults.dry_run
    for env, name in [
        ({}, "TABLE_NAME"),
        ({"TABLE_NAME": "t"}, "TABLE_NAME"),
        ({"TABLE_NAME": "tbl", "STALE_AFTER_SECONDS": "soon"}, "STALE_AFTER_SECONDS"),
        ({"TABLE_NAME": "tbl", "STALE_AFTER_SECONDS": "0"}, "STALE_AFTER_SECONDS"),
        ({"TABLE_NAME": "tbl", "RETAIN_FAILED_SECONDS": "-5"}, "RETAIN_FAILED_SECONDS"),
        ({"TABLE_NAME": "tbl", "DRY_RUN": "maybe"}, "DRY_RUN"),
        ({"TABLE_NAME": "tbl", "SHARD_COUNT": "0"}, "SHARD_COUNT"),
    ]:
        with pytest.raises(ValueError, match=name):
            SweeperSettings.from_env(env)


def stream_remove(item: dict[str, Any], *, ttl: bool) -> dict[str, Any]:
    event: dict[str, Any] = {
        "eventID": "1",
        "eventName": "REMOVE",
        "eventSource": "aws:dynamodb",
        "awsRegion": "us-east-1",
        "dynamodb": {
            "ApproximateCreationDateTime": 1764504000,
            "Keys": {},
            "OldImage": item,
            "SequenceNumber": "111",
            "SizeBytes": 100,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        },
        "eventSourceARN": "arn:aws:dynamodb:us-east-1:123456789012:table/t/stream/x",
    }
    if ttl:
        event["userIdentity"] = {"type": "Service", "principalId": "dynamodb.amazonaws.com"}
    return event


def test_ttl_removals_are_recognised() -> None:
    original = ResourceActivityRecord.model_validate(TS_RECORD)
    item = {
        **ri.record_key(original.id),
        **ri.write_values(original, expires_at=10, shard_count=4),
        "rev": {"N": "2"},
    }
    assert is_ttl_removal(stream_remove(item, ttl=True))
    expiry = ttl_expiry(stream_remove(item, ttl=True))
    assert expiry is not None and expiry.record.wire() == TS_RECORD
    assert expiry.trigger == "ttl" and expiry.detail()["record"] == TS_RECORD
    assert ttl_expiry(stream_remove(item, ttl=False)) is None
    summary = {"PK": {"S": "S#1#n#s"}, "SK": {"S": "#SUMMARY"}, "itemType": {"S": "session"}}
    assert ttl_expiry(stream_remove(summary, ttl=True)) is None
    with pytest.raises(ValueError):
        ttl_expiry(stream_remove({**item, "rec": {"S": "{}"}}, ttl=True))


def test_identity_accepts_strings_and_numbers() -> None:
    ident = LocalProcessIdentity.model_validate(
        {"host": "h", "bootId": "b", "pidNamespace": "pid:[4026531836]", "startTime": "42"}
    )
    assert ident.wire()["pidNamespace"] == "pid:[4026531836]"
