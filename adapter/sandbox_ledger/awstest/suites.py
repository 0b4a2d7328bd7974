"""The suites a ``make test-aws`` run takes through its one table, in order: each a pytest run
of this repository's tests in one-table mode (tests/conftest.py ``ONE_TABLE``).

Each suite's units are what it consumed in a whole run against the strict embedded server
(``sandbox-ledger local --strict``, then ``python -m sandbox_ledger.awstest --endpoint-url
URL run``, 2026-12-07): the estimate a run prints before it starts."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Suite:
    """A named pytest run: its arguments (paths, markers, selections), and what it consumed
    on the embedded server (the estimate a run prints before it starts)."""

    name: str
    args: tuple[str, ...]
    read_units: float = 0.0
    write_units: float = 0.0
    stream_reads: int = 0


SUITES = (
    Suite(
        "conformance",
        ("tests/dynamodb/test_dynamodb_conformance.py", "-m", "not slow and not variant"),
        read_units=19_235,
        write_units=30_857,
        stream_reads=62,
    ),
    Suite(
        "model-based checks (fast profile)",
        (
            "tests/verification/test_ledger_model.py",
            "tests/verification/test_changes_model.py",
            "tests/verification/test_follow_model.py",
            "-k",
            "dynamodb or DynamoDB",
            "-m",
            "not slow",
        ),
        read_units=1_086,
        write_units=903,
        stream_reads=195,
    ),
    Suite(
        "resources and the sweeper",
        (
            "tests/resources/test_resources_store.py",
            "tests/resources/test_resources_expiry.py",
            "tests/resources/test_resources_claims.py",
            "tests/resources/test_resources_index_lag.py",
            "-m",
            "not slow",
        ),
        read_units=4_849,
        write_units=5_962,
    ),
    Suite(
        "follow and changes",
        (
            "tests/dynamodb/test_follow_dynamodb.py",
            "tests/dynamodb/test_changes_stream.py",
            "-m",
            "not slow",
        ),
        read_units=720,
        write_units=1_416,
        stream_reads=4,
    ),
    Suite(
        "import and export",
        (
            "tests/contract/test_transfer.py",
            "tests/dynamodb/test_export_whole.py",
            "tests/dynamodb/test_import_batches.py",
            "-k",
            "dynamodb or DynamoDB or not (sqlite or postgres or memory)",
            "-m",
            "not slow",
        ),
        read_units=6_361,
        write_units=30_671,
    ),
)


def chosen(names: list[str] | None) -> tuple[Suite, ...]:
    """The suites named (by a word of their name, e.g. ``conformance``, ``follow``), all if
    None.

    Raises:
        ValueError: a name that matches no suite.
    """
    if not names:
        return SUITES
    picked = []
    for name in names:
        found = [suite for suite in SUITES if name.lower() in suite.name.lower()]
        if not found:
            known = ", ".join(repr(suite.name) for suite in SUITES)
            raise ValueError(f"--suite {name!r}: no suite of that name (the suites: {known})")
        picked += [suite for suite in found if suite not in picked]
    return tuple(picked)
