"""Store parity, a part of the conformance suite: what one store accepts, stores, returns and
refuses, every store does alike, so a ledger moves from any store to any other."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from sandbox_ledger.errors import InvalidInputError, KeyTooLongError
from sandbox_ledger.models import EnvironmentRecord, LedgerEvent, ListSandboxOptions
from sandbox_ledger.testing._build import entry, session

if TYPE_CHECKING:
    from sandbox_ledger.protocol import StorageAdapter

# The most decimal digits an integer may have: Python's default int-str limit (4,300).
_LONGEST = 10**4300 - 1


class StoreParityContract:
    """Parity tests; :class:`~sandbox_ledger.testing.StorageAdapterContract` includes them."""

    async def test_the_store_keeps_its_own_copies(self, adapter: StorageAdapter) -> None:
        appended = entry(
            "n", "s", LedgerEvent.CheckpointCreated, 1, payload={"snapshotId": "x", "l": [1]}
        )
        await adapter.append(appended)
        wire = appended.wire()
        appended.payload["l"].append("changed after append")
        appended.payload["snapshotId"] = "changed"
        [back] = await adapter.read_all("n", "s")
        assert back.wire() == wire
        back.payload["l"].append("changed after read")
        last = await adapter.last_checkpoint("n", "s")
        assert last is not None and last.wire() == wire
        last.payload["l"].clear()
        assert [e.wire() for e in await adapter.read_all("n", "s")] == [wire]

        record = EnvironmentRecord.model_validate({"name": "py", "builtAt": 1, "spec": {"a": [1]}})
        await adapter.save_environment(record)
        saved = record.wire()
        (record.model_extra or {})["spec"]["a"].append(2)
        got = await adapter.get_environment("py")
        assert got is not None and got.wire() == saved
        (got.model_extra or {})["spec"]["a"].append(3)
        [listed] = await adapter.list_environments()
        assert listed.wire() == saved
        (listed.model_extra or {})["spec"]["a"].append(4)
        again = await adapter.get_environment("py")
        assert again is not None and again.wire() == saved

    async def test_keys_holding_nul_answer_as_for_nothing_stored(
        self, adapter: StorageAdapter
    ) -> None:
        await session(adapter, "n", "s", 1, execs=1)
        await adapter.append(entry("n", "s", LedgerEvent.CheckpointCreated, 2, payload={}))
        await adapter.save_environment(EnvironmentRecord(name="e", built_at=1))
        for name, sandbox_id in (("n\x00", "s"), ("n", "s\x00"), ("\x00", "\x00")):
            assert await adapter.read_all(name, sandbox_id) == []
            assert await adapter.get_sandbox_details(name, sandbox_id) is None
            assert await adapter.last_checkpoint(name, sandbox_id) is None
            assert await adapter.list_checkpoints(name, sandbox_id) == []
            await adapter.delete_sandbox(name, sandbox_id)
        assert await adapter.list_sandbox_details("n\x00") == []
        page = await adapter.list_sandbox_page("n\x00", ListSandboxOptions(limit=1))
        assert (page.sessions, page.cursor) == ([], None)
        assert await adapter.get_environment("e\x00") is None
        await adapter.delete_environment("e\x00")
        # Nothing else was touched.
        assert len(await adapter.read_all("n", "s")) == 4
        assert [e.name for e in await adapter.list_environments()] == ["e"]

    async def test_nul_in_a_text_field_is_refused_by_every_store(
        self, adapter: StorageAdapter
    ) -> None:
        """PostgreSQL text cannot hold NUL, so no store takes it in a name, id, event or
        error (a ledger one store took could not move to PostgreSQL): refused before any
        write, naming the field. In a payload it is JSON (escaped) and stored everywhere."""
        refused = (
            ("name", entry("n\x00", "s", LedgerEvent.SandboxCreated, 1)),
            ("sandboxId", entry("n", "s\x00", LedgerEvent.SandboxCreated, 1)),
            ("event", entry("n", "s", "custom\x00", 1)),
            ("error", entry("n", "s", LedgerEvent.ExecComplete, 1, error="boom\x00")),
        )
        for field, bad in refused:
            with pytest.raises(InvalidInputError) as refusal:
                await adapter.append(bad)
            assert refusal.value.field == f"entry.{field}", refusal.value
        with pytest.raises(InvalidInputError) as refusal:
            await adapter.save_environment(EnvironmentRecord(name="e\x00", built_at=1))
        assert refusal.value.field == "record.name"
        assert await adapter.read_all("n", "s") == []
        assert await adapter.list_environments() == []
        await adapter.append(entry("n", "s", LedgerEvent.SandboxCreated, 1, payload="a\x00b"))
        [kept] = await adapter.read_all("n", "s")
        assert kept.payload == "a\x00b"

    async def test_one_length_rule_for_environment_names(self, adapter: StorageAdapter) -> None:
        longest = "é" * 512  # 1,024 UTF-8 bytes: DynamoDB's sort-key limit
        await adapter.save_environment(EnvironmentRecord(name=longest, built_at=1))
        got = await adapter.get_environment(longest)
        assert got is not None and got.name == longest
        assert [e.name for e in await adapter.list_environments()] == [longest]
        await adapter.delete_environment(longest)
        for too_long in ("e" * 1025, longest + "e", "🚀" * 256 + "e"):
            with pytest.raises(KeyTooLongError, match="name"):
                await adapter.save_environment(EnvironmentRecord(name=too_long, built_at=1))
            with pytest.raises(KeyTooLongError, match="name"):
                await adapter.get_environment(too_long)
            with pytest.raises(KeyTooLongError, match="name"):
                await adapter.delete_environment(too_long)
        assert await adapter.list_environments() == []

    async def test_integers_of_4300_digits_round_trip_and_longer_are_refused(
        self, adapter: StorageAdapter
    ) -> None:
        payload = {"n": [_LONGEST, -_LONGEST]}
        await adapter.append(entry("n", "s", LedgerEvent.ExecComplete, 1, payload=payload))
        [back] = await adapter.read_all("n", "s")
        assert back.payload == payload
        wire = {"name": "py", "builtAt": 1, "n": -_LONGEST}
        await adapter.save_environment(EnvironmentRecord.model_validate(wire))
        got = await adapter.get_environment("py")
        assert got is not None and got.wire() == wire
        # One digit more is refused by the models, naming the field, before any store sees it.
        for big, where in ((_LONGEST + 1, "payload"), ({"k": [-(_LONGEST + 1)]}, "payload.k[0]")):
            with pytest.raises(ValueError, match="payload") as info:
                entry("n", "s", LedgerEvent.ExecComplete, 2, payload=big)
            assert where in str(info.value)
        with pytest.raises(ValueError, match="huge"):
            EnvironmentRecord.model_validate({"name": "x", "builtAt": 1, "huge": 10**5000})
