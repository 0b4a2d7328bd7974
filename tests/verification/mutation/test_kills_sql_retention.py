"""The ledger retention of the SQL stores (``sql/retention.py``) as an operator meets it: what
``connect()`` says when it records a retention, a retention recorded by a concurrent first
connect is agreed with, and ``purge_expired`` refuses a bad batch size by name."""

from __future__ import annotations

import logging
from datetime import timedelta
from pathlib import Path

import pytest

from sandbox_ledger.deployment import DeploymentMismatchError
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.sql import retention
from sandbox_ledger.sqlite import SQLiteAdapter

DAY = timedelta(days=1)


async def test_recording_a_retention_says_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    path = tmp_path / "ledger.db"
    async with SQLiteAdapter(path, retention=DAY):
        pass
    async with SQLiteAdapter(path, retention=DAY):
        pass
    said = [r.getMessage() for r in caplog.records if "recorded ledger retention" in r.getMessage()]
    assert said == [
        f"recorded ledger retention of 86400 s at ledger_settings of sqlite {path}: entries "
        "appended from now on "
        "expire (those appended before keep forever)"
    ]


async def test_a_retention_recorded_by_a_concurrent_first_connect_must_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "ledger.db"
    async with SQLiteAdapter(path, retention=DAY):
        pass
    reads = []
    stored = retention._stored

    async def first_read_before_the_other_connect_recorded(*args: object) -> int | None:
        reads.append(1)
        return None if len(reads) == 1 else await stored(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(retention, "_stored", first_read_before_the_other_connect_recorded)
    with pytest.raises(DeploymentMismatchError):
        async with SQLiteAdapter(path, retention=2 * DAY):
            pass
    assert len(reads) == 2


@pytest.mark.parametrize(
    ("size", "message"),
    [
        (0, "must be a positive integer, got 0"),
        (-1, "must be a positive integer, got -1"),
        (True, "must be a positive integer, got True"),
        (1.5, "must be a positive integer, got 1.5"),
        ("10", "must be a positive integer, got '10'"),
        (1_000_001, "must be at most 1,000,000, got 1,000,001"),
    ],
)
async def test_a_bad_batch_size_is_refused_by_name(
    tmp_path: Path, size: object, message: str
) -> None:
    async with SQLiteAdapter(tmp_path / "ledger.db", retention=DAY) as adapter:
        with pytest.raises(InvalidInputError) as caught:
            await adapter.purge_expired(batch_size=size)  # type: ignore[arg-type]
        assert (caught.value.field, str(caught.value)) == ("batch_size", f"batch_size: {message}")


@pytest.mark.parametrize("size", [1, 2, 1_000_000])
async def test_any_batch_size_in_range_purges(tmp_path: Path, size: int) -> None:
    async with SQLiteAdapter(tmp_path / "ledger.db", retention=DAY) as adapter:
        assert await adapter.purge_expired(batch_size=size) == 0
