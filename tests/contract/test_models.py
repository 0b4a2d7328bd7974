import json
import math
import sys
from decimal import Decimal
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given
from pydantic import ValidationError

import sandbox_ledger
from sandbox_ledger import (
    CheckpointInfo,
    EnvironmentRecord,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    SandboxDetails,
    SandboxStatus,
)
from sandbox_ledger.testing import EXOTIC_PAYLOADS
from verification.strategies import odd_values

WIRE = {
    "ts": 1700000000000,
    "name": "build",
    "sandboxId": "sb-1",
    "stepIndex": -1,
    "event": "sandbox.created",
    "payload": {"image": "python:3.12"},
}


def test_public_api_is_exactly_all() -> None:
    public = {
        n
        for n in dir(sandbox_ledger)
        if not n.startswith("_") and not isinstance(getattr(sandbox_ledger, n), ModuleType)
    }
    assert public == set(sandbox_ledger.__all__) - {"__version__"}


def test_entry_from_wire_and_back() -> None:
    entry = LedgerEntry.model_validate(WIRE)
    assert entry.sandbox_id == "sb-1" and entry.step_index == -1
    assert entry.event == LedgerEvent.SandboxCreated
    assert entry.model_dump(by_alias=True, exclude_none=True) == WIRE
    assert json.loads(entry.model_dump_json(by_alias=True, exclude_none=True)) == WIRE
    assert LedgerEntry.model_validate_json(json.dumps(WIRE)) == entry


def test_entry_by_snake_case_keywords() -> None:
    entry = LedgerEntry(
        ts=1, name="n", sandbox_id="s", step_index=0, branch=1, event=LedgerEvent.ExecComplete
    )
    assert entry.wire() == {
        "ts": 1,
        "name": "n",
        "sandboxId": "s",
        "stepIndex": 0,
        "branch": 1,
        "event": "exec.complete",
    }
    assert type(entry.wire()["event"]) is str


def test_event_enum_values() -> None:
    assert {e.value for e in LedgerEvent} >= {
        "sandbox.created",
        "sandbox.closed",
        "exec.started",
        "exec.complete",
        "exec.failed",
        "sandbox.checkpoint_created",
    }
    assert SandboxStatus.Running == "running" and SandboxStatus.Completed == "completed"
    assert LedgerEntry.model_validate({**WIRE, "event": "future.thing"}).event == "future.thing"


@pytest.mark.parametrize("payload", EXOTIC_PAYLOADS)
def test_payload_survives_json(payload: Any) -> None:
    entry = LedgerEntry.model_validate({**WIRE, "payload": payload})
    again = LedgerEntry.model_validate_json(entry.model_dump_json(by_alias=True))
    assert again.payload == payload


@pytest.mark.parametrize(
    ("payload", "where"),
    [
        (math.nan, "payload"),
        (math.inf, "payload"),
        ({"a": [1, -math.inf]}, "payload.a[1]"),
        ({1, 2}, "payload"),
        (b"bytes", "payload"),
        (object(), "payload"),
        ({"k": Decimal("1.5")}, "payload.k"),
        ({1: "int key"}, "payload"),
    ],
)
def test_payload_json_cannot_carry_is_refused(payload: Any, where: str) -> None:
    with pytest.raises(ValueError, match="payload") as info:
        LedgerEntry.model_validate({**WIRE, "payload": payload})
    assert where in str(info.value)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"name": ""}, "name"),
        ({"sandboxId": ""}, "sandboxId"),
        ({"ts": -1}, "ts"),
        ({"ts": 1.5}, "ts"),
        ({"ts": "12"}, "ts"),
        ({"ts": True}, "ts"),
        ({"ts": 2**53}, "ts"),
        ({"stepIndex": -2}, "stepIndex"),
        ({"event": ""}, "event"),
        ({"unknown": math.nan}, "unknown"),
    ],
)
def test_invalid_entries_name_the_field(change: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        LedgerEntry.model_validate({**WIRE, **change})


def test_entries_keep_fields_of_a_newer_client() -> None:
    wire = {**WIRE, "traceId": "abc", "sampled": None}
    entry = LedgerEntry.model_validate(wire)
    assert entry.wire() == wire
    assert entry.model_extra == {"traceId": "abc", "sampled": None}


def test_missing_ts_is_refused() -> None:
    wire = {k: v for k, v in WIRE.items() if k != "ts"}
    with pytest.raises(ValidationError, match="ts"):
        LedgerEntry.model_validate(wire)


def test_entries_are_immutable() -> None:
    entry = LedgerEntry.model_validate(WIRE)
    with pytest.raises(ValidationError):
        entry.ts = 5  # type: ignore[misc]


def test_environment_keeps_unknown_fields() -> None:
    wire = {"name": "py", "builtAt": 5, "snapshotId": "s", "spec": {"cpu": 2, "tags": ["a"]}}
    record = EnvironmentRecord.model_validate(wire)
    assert record.built_at == 5
    assert record.model_dump(by_alias=True) == wire
    assert EnvironmentRecord(name="x", built_at=1).wire() == {"name": "x", "builtAt": 1}
    with pytest.raises(ValueError, match="builtAt"):
        EnvironmentRecord.model_validate({"name": "py"})
    with pytest.raises(ValueError, match="spec"):
        EnvironmentRecord.model_validate({"name": "py", "builtAt": 1, "spec": math.nan})


def test_details_options_and_checkpoints_wire_shape() -> None:
    details = SandboxDetails.model_validate(
        {
            "name": "n",
            "sandboxId": "s",
            "status": "completed",
            "startedAt": 1,
            "completedAt": 2,
            "execCount": 3,
        }
    )
    assert details.status is SandboxStatus.Completed
    assert details.model_dump(by_alias=True, exclude_none=True)["completedAt"] == 2
    opts = ListSandboxOptions.model_validate({"status": "running", "before": 10, "limit": 5})
    assert (opts.status, opts.before, opts.limit) == (SandboxStatus.Running, 10, 5)
    with pytest.raises(ValueError, match="limit"):
        ListSandboxOptions(limit=-1)
    with pytest.raises(ValueError, match="status"):
        ListSandboxOptions.model_validate({"status": "paused"})
    info = CheckpointInfo(snapshot_id="snap", tag="t", created_at=9)
    assert info.model_dump(by_alias=True) == {"snapshotId": "snap", "tag": "t", "createdAt": 9}


def test_integer_digits_follow_a_fixed_limit_not_the_process_setting() -> None:
    """At most 4,300 digits (CPython's default int-string limit), whatever this process set:
    raising the limit (or 0, none) does not let a longer integer in, since a default process
    could not read it back; lowering it refuses from the lowered limit (this process could not
    write such a number), naming the field instead of failing in a store's serializer."""
    before = sys.get_int_max_str_digits()
    try:
        for setting in (0, 100_000):
            sys.set_int_max_str_digits(setting)
            LedgerEntry.model_validate({**WIRE, "payload": 10**4300 - 1})
            with pytest.raises(ValueError, match=r"payload\.n"):
                LedgerEntry.model_validate({**WIRE, "payload": {"n": 10**4300}})
        sys.set_int_max_str_digits(640)
        LedgerEntry.model_validate({**WIRE, "payload": 10**640 - 1})
        with pytest.raises(ValueError, match="more than 640 digits"):
            LedgerEntry.model_validate({**WIRE, "payload": 10**640})
    finally:
        sys.set_int_max_str_digits(before)


@pytest.mark.parametrize("setting", [None, 0, 100_000, 640])
def test_the_one_pass_storable_check_agrees_with_the_walk(setting: int | None) -> None:
    """require_storable judges a storable value in one pass of the C encoder (issue 26: the
    walk in Python was a third of an import's write CPU); whatever the process's integer
    limit, it refuses exactly what the walk refuses, naming the same path."""
    from sandbox_ledger._json import _find_unstorable, find_unstorable

    surrogate = "\ud800"
    values = [
        {"a": [1, "x", {"b": None, "c": 2.5}]},
        {"a": [1, {"b": surrogate}]},
        {surrogate: 1},
        {"n": 10**4300},
        {"n": -(10**4300 - 1)},
        {"n": 10**640},
        {"deep": [[[["é", 10**639]]]]},
        float("nan"),
        {1: "non-string key"},
    ]
    before = sys.get_int_max_str_digits()
    try:
        if setting is not None:
            sys.set_int_max_str_digits(setting)
        for value in values:
            assert find_unstorable(value, "entry") == _find_unstorable(value, "entry"), value
    finally:
        sys.set_int_max_str_digits(before)


@given(odd_values)
def test_a_payload_is_judged_as_the_walk_that_names_each_part_judges_it(value: object) -> None:
    """``check_json_value`` walks a payload once without building paths, and again with
    them only to name what it refuses: the result, or the error and its message, is always
    the naming walk's."""
    from sandbox_ledger import _json

    def outcome(check: Any) -> tuple[str, Any]:
        try:
            return "ok", check()
        except ValueError as exc:
            return "refused", str(exc)

    assert outcome(lambda: _json.check_json_value(value, "payload")) == outcome(
        lambda: _json._check(value, "payload", 0, _json._largest_int())
    )


def test_a_payload_nested_past_200_levels_is_refused_with_its_path() -> None:
    from sandbox_ledger import _json

    value: Any = "leaf"
    for _ in range(201):
        value = [value]
    with pytest.raises(ValueError, match=r"payload(\[0\]){201}: nested more than 200 levels deep"):
        _json.check_json_value(value, "payload")
    assert _json.check_json_value(value[0], "payload") == value[0]
