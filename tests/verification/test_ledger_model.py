"""The model-based ledger checks, per adapter. Adding an adapter is one subclass with one
fixture (``subject``) returning a :class:`~verification.stores.Subject`."""

from __future__ import annotations

import pytest

from .profiles import PROFILE, run_ledger
from .stores import DynamoDBSubject, MemorySubject, Subject


class LedgerModelSuite:
    """Random sequences of every contract operation, several clients, compared with the model."""

    kind = "server"
    plain_kind = "server-plain"
    delete_races = False

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
    def subject(self, moto_endpoint: str) -> Subject:
        return DynamoDBSubject(moto_endpoint, sync=False)


class TestDynamoDBSync(BotocoreFaultSuite):
    @pytest.fixture
    def subject(self, moto_endpoint: str) -> Subject:
        return DynamoDBSubject(moto_endpoint, sync=True)
