"""The model-based ledger checks, per adapter. Adding an adapter is one subclass with one
fixture (``subject``) returning a :class:`~verification.stores.Subject`."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from .profiles import PROFILE, run_ledger
from .stores import DynamoDBSubject, FreshPerExample, MemorySubject, Subject


class LedgerModelSuite:
    """Random sequences of every contract operation, several clients, compared with the model."""

    kind = "server"
    plain_kind = "server-plain"
    delete_races = True  # delete_sandbox is consistent under concurrent writers (83af102)

    @pytest.fixture
    def subject(self) -> Subject:
        raise NotImplementedError

    def test_model(self, subject: Subject) -> None:
        if PROFILE == "fast" and self.plain_kind != self.kind:
            pytest.skip("fast profile: the run with faults (some of them 'none') covers it")
        run_ledger(subject, self.plain_kind, faults=False, delete_races=self.delete_races)


class BotocoreFaultSuite(LedgerModelSuite):
    """The same, with faults injected into the clients through botocore's event hooks."""

    @pytest.mark.usefixtures("fast_sdk_backoff")
    def test_model_with_faults(self, subject: Subject) -> None:
        run_ledger(subject, self.kind, faults=True, delete_races=self.delete_races)


class TestMemory(LedgerModelSuite):
    kind = plain_kind = "in-process"

    @pytest.fixture
    def subject(self) -> Subject:
        return MemorySubject()


class TestDynamoDBAsync(BotocoreFaultSuite):
    @pytest.fixture
    def subject(self, moto_endpoint: str, moto_server: Any) -> Subject:
        return DynamoDBSubject(moto_endpoint, sync=False, server=moto_server)


class TestDynamoDBSync(BotocoreFaultSuite):
    @pytest.fixture
    def subject(self, moto_endpoint: str, moto_server: Any) -> Subject:
        return DynamoDBSubject(moto_endpoint, sync=True, server=moto_server)


class TestSQLite(LedgerModelSuite):
    """Several SQLiteAdapter instances (separate connections) on one database file."""

    kind = plain_kind = "in-process"

    @pytest.fixture
    def subject(self, tmp_path: Path) -> Subject:
        from sandbox_ledger.sqlite import SQLiteAdapter

        return FreshPerExample(
            "sqlite", lambda i, example: SQLiteAdapter(tmp_path / f"ledger-{example}.db")
        )


class TestPostgres(LedgerModelSuite):
    """Several PostgresAdapter pools on one schema of the test PostgreSQL server."""

    kind = plain_kind = "server-plain"

    @pytest.fixture
    def subject(self, postgres_dsn: str) -> Subject:
        from sandbox_ledger.postgres import PostgresAdapter

        run = uuid.uuid4().hex[:8]
        return FreshPerExample(
            "postgres",
            lambda i, example: PostgresAdapter(
                postgres_dsn, schema=f"v_{run}_{example}", max_size=2
            ),
        )
