"""The local server's saves (issue 41, item 5): each save appends only what the served
requests changed, and the file, loaded, holds the tables as the last save found them,
whatever the writes between saves; a save cut short by ``kill -9`` loses that save, never the
file."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sandbox_ledger import EnvironmentRecord, LedgerEntry
from sandbox_ledger import keys as k
from sandbox_ledger.cli.local_saves import Saver
from sandbox_ledger.deployment import SweepSettings
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.local import LocalDynamoDB, inprocess
from sandbox_ledger.local.persist import load_state, read_data, snapshot
from sandbox_ledger.resources import SyncResourceRecordStore
from verification import strategies
from verification.profiles import PROFILE

from .test_local_data import _newer_writers_item, _records

REGION = "us-east-1"


class Server:
    """One embedded server for the module, its writes logged as the local command logs them."""

    def __init__(self) -> None:
        self.server = LocalDynamoDB()
        self.endpoint = self.server.start()
        self.log = inprocess.WriteLog()
        self.server.observe(self.log.note)

    def table(self) -> tuple[SyncDynamoDBAdapter, SyncResourceRecordStore]:
        """A new table, made in process (not a served request), and its in-process clients."""
        name = f"j-{uuid.uuid4().hex[:12]}"
        ledger = inprocess.ledger(self.server, name, REGION)
        ledger.create_table(sweep=SweepSettings())
        return ledger, inprocess.resource_store(self.server, name, REGION)

    def clients(self, table: str) -> tuple[SyncDynamoDBAdapter, SyncResourceRecordStore]:
        """Clients of ``table`` over HTTP: what the server serves, and logs."""
        return (
            SyncDynamoDBAdapter(table, endpoint_url=self.endpoint, region_name=REGION),
            SyncResourceRecordStore(table, endpoint_url=self.endpoint, region_name=REGION),
        )


@pytest.fixture(scope="module")
def server() -> Iterator[Server]:
    made = Server()
    yield made
    made.server.stop()


Step = tuple[str, Any]

_steps: st.SearchStrategy[Step] = st.one_of(
    st.tuples(st.just("append"), strategies.entries()),
    st.tuples(st.just("append"), strategies.entries()),
    st.tuples(st.just("delete"), strategies.sessions),
    st.tuples(st.just("environment"), strategies.environments()),
    st.tuples(st.just("drop environment"), st.sampled_from(strategies.ENV_NAMES)),
    st.tuples(st.just("record"), _records()),
    st.tuples(st.just("drop record"), st.integers(0, 3)),
    st.tuples(st.just("unreadable"), st.integers(0, 3)),
    st.tuples(st.just("save"), st.none()),
)


def _apply(
    step: Step,
    ledger: SyncDynamoDBAdapter,
    store: SyncResourceRecordStore,
    client: Any,
    records: list[str],
) -> None:
    kind, value = step
    with contextlib.suppress(InvalidInputError):  # what a store refuses changes nothing
        if kind == "append":
            ledger.append(value)
        elif kind == "delete":
            ledger.delete_sandbox(*value)
        elif kind == "environment":
            ledger.save_environment(value)
        elif kind == "drop environment":
            ledger.delete_environment(value)
        elif kind == "record":
            store.put(value)
            records.append(value.id)
        elif kind == "drop record" and records:
            store.delete(records[value % len(records)])
        elif kind == "unreadable":
            _, item = _newer_writers_item({"gpu": "a100"})
            if records:  # a newer writer's version of a record this version wrote
                item[k.PARTITION_KEY] = {"S": k.resource_pk(records[value % len(records)])}
                body = json.loads(item[k.RECORD_BODY]["S"])
                item[k.RECORD_BODY] = {
                    "S": json.dumps({**body, "id": records[value % len(records)]})
                }
            client.put_item(TableName=ledger.table_name, Item=item)


def _loaded(server: Server, path: Path) -> tuple[str, ...]:
    ledger, store = server.table()
    load_state(read_data(path), ledger, store)
    return snapshot(ledger, store).lines


@settings(
    max_examples=6 if PROFILE == "fast" else 40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(steps=st.lists(_steps, max_size=25))
def test_the_file_holds_the_tables_as_the_last_save_found_them(
    server: Server, tmp_path_factory: pytest.TempPathFactory, steps: list[Step]
) -> None:
    """Appends, deletes of sessions (and sessions begun again), environments saved and
    dropped, records written, replaced by a newer writer and deleted, saves between any of
    them: after each save the file loads to the tables as they are (a save appends what
    changed), and so does the file the last save on exit writes whole."""
    path = tmp_path_factory.mktemp("journal") / "dev.jsonl"
    own_ledger, own_store = server.table()
    ledger, store = server.clients(own_ledger.table_name)
    client = ledger.client()
    server.log.take()
    saver = Saver(path, own_ledger, own_store, server.log)
    records: list[str] = []
    for step in [*steps, ("save", None)]:
        if step[0] != "save":
            _apply(step, ledger, store, client, records)
            continue
        saver.save()
        assert _loaded(server, path) == snapshot(own_ledger, own_store).lines
    saver.save(final=True)
    assert _loaded(server, path) == snapshot(own_ledger, own_store).lines
    written = read_data(path)
    assert not written.appended  # written whole on exit: the file is an export again
    assert path.read_text(encoding="utf-8") == "".join(written.lines())
    ledger.close()
    store.close()


def test_a_save_cut_short_anywhere_loses_that_save_never_the_file(
    server: Server, tmp_path: Path
) -> None:
    """The file cut at every byte of what the last save appended (``kill -9`` in the
    middle of its write) loads: to what the save before it held, or more of the last one,
    never refused."""
    own_ledger, own_store = server.table()
    ledger, _ = server.clients(own_ledger.table_name)
    server.log.take()
    path = tmp_path / "dev.jsonl"
    saver = Saver(path, own_ledger, own_store, server.log)
    entry = LedgerEntry(
        ts=1, name="build", sandbox_id="sb-1", step_index=-1, event="sandbox.created"
    )
    ledger.append(entry)
    ledger.save_environment(EnvironmentRecord(name="python", built_at=1))
    saver.save()
    before = path.read_bytes()
    ledger.append(entry.model_copy(update={"ts": 2, "event": "exec.started"}))
    ledger.delete_sandbox("build", "sb-1")  # then begun again: a replacement block
    ledger.append(entry.model_copy(update={"ts": 3}))
    ledger.save_environment(EnvironmentRecord(name="node", built_at=2))
    saver.save()
    after = path.read_bytes()
    assert after.startswith(before) and len(after) > len(before)
    cut = tmp_path / "cut.jsonl"
    for size in range(len(before), len(after) + 1):
        cut.write_bytes(after[:size])
        state = read_data(cut)  # never refused
        held = state.sessions.get(("build", "sb-1"), [])
        assert len(held) in (1, 2) if size < len(after) else len(held) == 1
    ledger.close()


def test_a_change_that_cannot_be_read_is_said_and_read_again_at_the_next_save(
    server: Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An entry whose head names a part that is not stored (damage) fails the read of its
    session: the save says so on stderr, the server keeps serving, and the next save that
    can read it saves it."""
    own_ledger, own_store = server.table()
    ledger, _ = server.clients(own_ledger.table_name)
    client = ledger.client()
    server.log.take()
    path = tmp_path / "dev.jsonl"
    saver = Saver(path, own_ledger, own_store, server.log)
    entry = LedgerEntry(
        ts=1, name="build", sandbox_id="sb-1", step_index=-1, event="sandbox.created"
    )
    ledger.append(entry)
    saver.save()
    pk = k.session_pk("build", "sb-1")
    [head] = [
        item
        for item in client.query(
            TableName=own_ledger.table_name,
            KeyConditionExpression="PK = :pk AND begins_with(SK, :e)",
            ExpressionAttributeValues={":pk": {"S": pk}, ":e": {"S": k.EVENT_PREFIX}},
        )["Items"]
    ]
    client.put_item(TableName=own_ledger.table_name, Item={**head, "np": {"N": "1"}})
    saver.save()
    assert "could not save" in capsys.readouterr().err and saver.failing is not None
    client.put_item(TableName=own_ledger.table_name, Item=head)  # repaired
    ledger.append(entry.model_copy(update={"ts": 2}))
    saver.save()
    assert saver.failing is None and read_data(path).entries == 2
    ledger.close()
