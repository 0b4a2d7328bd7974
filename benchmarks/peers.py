"""The adapter beside its peers: the same ledger workload through this adapter (sync and
async), raw boto3 with TypeSerializer/TypeDeserializer, PynamoDB and aiodynamo, in client CPU
per operation with the network removed, and requests per operation.

Every side reads and writes the adapter's own items in one table (keys from
``sandbox_ledger.keys``): the peers are hand-written ledgers over their library, doing what
the adapter's requests do. Each side's every operation runs once live against the embedded
DynamoDB first, and its results are checked against the adapter's (an append read back by the
adapter); then the responses the adapter's sync client recorded for that operation are
replayed to every side, in order: through botocore's ``before-send`` hook (the adapter, raw
boto3, PynamoDB, which calls botocore's client), and through aiodynamo's pluggable HTTP
implementation (a callable from its ``Request`` to its ``Response``). No socket, no server:
what is left is each client's own CPU (building, serializing and signing the requests,
parsing the responses, decoding the items into the library's models).

The workload: appending a session of 10 entries (created, four exec started/complete pairs,
closed: the first append of a session reads its last sequence mark, then one
TransactWriteItems per entry), ``read_all`` of sessions of 10, 100 and 1,000 entries, one
list page of the 50 newest sessions (a Query per index shard, then one BatchGetItem of the
summaries), and a resource record's heartbeat (one conditional UpdateItem returning the
record). Every side hands back the library's models (``LedgerEntry``, ``SandboxDetails``,
``ResourceActivityRecord``), so the models' own validation is on every side alike. Every
side must make the adapter's requests, operation for operation (checked on the replay: the
run stops otherwise).

Many short rounds alternate between the sides, which side goes first turning round by round
(process CPU; each side's round runs the operation ``--runs`` times, divided by its size: a
session append by 10, a read of 1,000 entries by 50); each figure is a side's median over the
rounds and its ratio to raw boto3 in the same round (median, and the min-max over the
rounds).

    python benchmarks/peers.py                 # 15 rounds of 100 runs (fewer of the larger)
    python benchmarks/peers.py --runs 50       # quicker
    python benchmarks/peers.py --quick         # the smoke test's size
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import secrets
import statistics
import time
import zlib
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
import boto3
from aiobotocore.awsrequest import AioAWSResponse
from aiodynamo.client import Client as AiodynamoClient
from aiodynamo.credentials import Key, StaticCredentials
from aiodynamo.expressions import F, HashKey, RangeKey
from aiodynamo.http.aiohttp import AIOHTTP
from aiodynamo.http.types import Request as HttpRequest
from aiodynamo.http.types import Response as HttpResponse
from aiodynamo.models import BatchGetRequest, ReturnValues, Select
from aiodynamo.operations import ConditionCheck, Put, Update
from boto3.dynamodb.types import TypeDeserializer, TypeSerializer
from botocore.awsrequest import AWSResponse
from pynamodb.attributes import (
    BinaryAttribute,
    ListAttribute,
    MapAttribute,
    NumberAttribute,
    UnicodeAttribute,
)
from pynamodb.connection import Connection
from pynamodb.indexes import GlobalSecondaryIndex, KeysOnlyProjection
from pynamodb.models import Model
from pynamodb.transactions import TransactWrite
from yarl import URL

from replay import Tape, entry, on_local_server
from sandbox_ledger import LedgerEntry, LedgerEvent, ListSandboxOptions, SandboxDetails
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.keys import LedgerAttr as A
from sandbox_ledger.models import SandboxStatus
from sandbox_ledger.resources import (
    ResourceActivityRecord,
    ResourceRecordStore,
    SyncResourceRecordStore,
)
from sandbox_ledger.resources.phases import LIVE_PHASES

TABLE = "peers"
NAME = "bench"
SIZES = (10, 100, 1_000)
PAGE = 50
LISTED = 60
REGION = "us-east-1"
SIDES = ("adapter (sync)", "adapter (async)", "raw boto3", "PynamoDB", "aiodynamo")
BASELINE = "raw boto3"
RECORD = {
    "version": 1,
    "id": "0b8f5a8e-3c1e-4b8e-9f53-7b1c2d3e4f50",
    "pid": 41235,
    "identity": {
        "host": "builder-7",
        "bootId": "6f1c9a52-2b7e-4c1d-8a3f-0e9d8c7b6a54",
        "pidNamespace": 4026531836,
        "startTime": 123456789,
    },
    "sandboxProvider": "docker",
    "placement": "mounted",
    "workspace": "/home/dev/repo/.outpost/worktrees/feature-x",
    "createdAt": "2026-11-30T10:00:00.000Z",
    "updatedAt": "2026-11-30T10:05:12.345Z",
    "phase": "ready",
    "operations": [{"kind": "exec", "count": 2}],
    "lastOperation": {"kind": "sync", "outcome": "completed", "at": "2026-11-30T10:05:00.000Z"},
}


# ---------------------------------------------------------------------------------------
# The workload's entries, and what a hand-written ledger writes for them


def session_entries(sid: str) -> list[LedgerEntry]:
    """A session of 10 entries: created, four exec started/complete pairs, closed."""
    out = [entry(sid, LedgerEvent.SandboxCreated, 10)]
    for step in range(4):
        out.append(entry(sid, LedgerEvent.ExecStarted, 11 + 2 * step, step, {"cmd": "make"}))
        out.append(entry(sid, LedgerEvent.ExecComplete, 12 + 2 * step, step, {"exitCode": 0}))
    out.append(entry(sid, LedgerEvent.SandboxClosed, 20))
    return out


@dataclass
class Write:
    """One entry's transaction, in plain values: its head, its sequence mark (number ``n``,
    after mark ``n - 1`` of the same incarnation) and, for the events that change it, the
    session summary's change."""

    pk: str
    head_sk: str
    ts: int
    event: str
    data: bytes
    number: int
    incarnation: str
    shard: int
    created: bool = False
    closed: bool = False
    completed_exec: bool = False
    lifecycle: list[dict[str, Any]] = field(default_factory=list)

    @property
    def changes_summary(self) -> bool:
        return self.created or self.closed or self.completed_exec

    @property
    def head(self) -> dict[str, Any]:
        """The head item in plain values (as the adapter writes it)."""
        item: dict[str, Any] = {
            k.PARTITION_KEY: self.pk,
            k.SORT_KEY: self.head_sk,
            A.TS: self.ts,
            A.EVENT: self.event,
            A.DATA: self.data,
            A.SEQUENCE: self.number,
        }
        if self.created or self.closed:
            item[A.ON_SUMMARY] = 1
        return item

    @property
    def mark_sk(self) -> str:
        return k.sequence_sk(self.number)

    @property
    def before_sk(self) -> str:
        return k.sequence_sk(self.number - 1)


def plan(entries: list[LedgerEntry], number: int, incarnation: str, shards: int) -> list[Write]:
    """What a peer writes for ``entries`` (one session), its first mark ``number``."""
    writes = []
    for offset, e in enumerate(entries):
        pk = k.session_pk(e.name, e.sandbox_id)
        body = {key: v for key, v in e.wire().items() if key not in ("name", "sandboxId")}
        order = f"{time.time_ns():020d}{secrets.token_hex(4)}"
        created = e.event == LedgerEvent.SandboxCreated
        closed = e.event == LedgerEvent.SandboxClosed
        writes.append(
            Write(
                pk=pk,
                head_sk=k.event_sk(e.ts, order),
                ts=e.ts,
                event=e.event,
                data=json.dumps(body, separators=(",", ":")).encode(),
                number=number + offset,
                incarnation=incarnation,
                shard=k.shard_of(pk, shards),
                created=created,
                closed=closed,
                completed_exec=e.event == LedgerEvent.ExecComplete,
                lifecycle=[{A.EVENT: e.event, A.TS: e.ts}] if created or closed else [],
            )
        )
    return writes


def _if_absent(attribute: str, value: str) -> str:
    return f"{attribute} = if_not_exists({attribute}, {value})"


def summary_values(w: Write, sid: str, now_ms: int) -> tuple[str, dict[str, str], dict[str, Any]]:
    """The summary's UpdateExpression, names and plain values for ``w``, as the adapter
    writes them (raw boto3's; PynamoDB and aiodynamo build theirs with their own DSL)."""
    names = {
        "#nm": A.NAME,
        "#sq": A.SUMMARY_SEQUENCE,
        "#lq": A.LIFECYCLE_SEQUENCE,
        "#dl": A.DELETING,
    }
    values: dict[str, Any] = {":nm": NAME, ":sid": sid, ":ty": "session", ":now": now_ms}
    sets = ["#nm = :nm", f"{A.SANDBOX_ID} = :sid", f"{A.ITEM_TYPE} = :ty"]
    if w.created:
        values |= {
            ":ts": w.ts,
            ":g1": k.by_name_pk(NAME),
            ":g3": k.all_pk(w.shard),
            ":g2": k.by_name_status_pk(SandboxStatus.Running, NAME),
            ":g4": k.all_status_pk(SandboxStatus.Running, w.shard),
        }
        sets += [
            _if_absent(A.STARTED_AT, ":ts"),
            _if_absent(k.INDEX_SORT_KEY, ":ts"),
            f"{k.BY_NAME.partition_key} = :g1",
            f"{k.ALL.partition_key} = :g3",
            _if_absent(k.BY_NAME_STATUS.partition_key, ":g2"),
            _if_absent(k.ALL_STATUS.partition_key, ":g4"),
        ]
    if w.closed:
        values |= {
            ":ts": w.ts,
            ":g2": k.by_name_status_pk(SandboxStatus.Completed, NAME),
            ":g4": k.all_status_pk(SandboxStatus.Completed, w.shard),
        }
        sets += [
            _if_absent(A.COMPLETED_AT, ":ts"),
            f"{k.BY_NAME_STATUS.partition_key} = :g2",
            f"{k.ALL_STATUS.partition_key} = :g4",
        ]
    values |= {
        ":lc": w.lifecycle,
        ":lq": f"{w.incarnation}#{w.number}",
        ":sq": w.number,
    }
    sets += [f"{A.LIFECYCLE} = :lc", "#lq = :lq", "#sq = :sq"]
    expression = "SET " + ", ".join(sets)
    if w.completed_exec:
        values[":execs"] = 1
        expression += f" ADD {A.EXEC_COUNT} :execs"
    return expression, names, values


def next_mark(last: dict[str, Any] | None) -> tuple[int, str]:
    """Where a session's next mark goes, from its last one (plain values), if any."""
    if last is None:
        return 0, secrets.token_hex(6)
    return int(last[k.SORT_KEY][len(k.SEQUENCE_PREFIX) :]) + 1, last[A.INCARNATION]


def entry_of(sid: str, data: bytes, compressed: bool) -> LedgerEntry:
    body = json.loads(zlib.decompress(data) if compressed else data)
    return LedgerEntry.model_validate({**body, "name": NAME, "sandboxId": sid})


def details_of(item: dict[str, Any]) -> SandboxDetails:
    completed = item.get(A.COMPLETED_AT)
    return SandboxDetails(
        name=item[A.NAME],
        sandbox_id=item[A.SANDBOX_ID],
        status=SandboxStatus.Completed if completed is not None else SandboxStatus.Running,
        started_at=int(item[A.STARTED_AT]),
        completed_at=None if completed is None else int(completed),
        exec_count=int(item.get(A.EXEC_COUNT) or 0),
    )


def record_of(item: dict[str, Any]) -> tuple[ResourceActivityRecord, int]:
    wire = json.loads(item[k.RECORD_BODY])
    wire["updatedAt"] = item[k.RECORD_UPDATED_AT]
    record = ResourceActivityRecord.model_validate(wire, context={"stored": True})
    return record, int(item[k.REVISION])


def newest(keys: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's keys, newest ``gsk`` first (distinct here), of every shard's Query."""
    return sorted(keys, key=lambda key: -int(key[k.INDEX_SORT_KEY]))[:PAGE]


def iso_now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Context:
    """What every side is given: the table's shard count (the adapter reads it from the
    table's descriptor once per client) and a heartbeat's TTL window in seconds."""

    shards: int
    ttl_window_s: int
    record_id: str


# ---------------------------------------------------------------------------------------
# Raw boto3: the low-level client, TypeSerializer for writes, TypeDeserializer for reads


class RawBoto3:
    def __init__(self, client: Any, ctx: Context) -> None:
        self.client = client
        self.ctx = ctx
        self.ser = TypeSerializer().serialize
        self.de = TypeDeserializer().deserialize

    def _plain(self, item: dict[str, Any]) -> dict[str, Any]:
        return {name: self.de(value) for name, value in item.items()}

    def _dy(self, values: dict[str, Any]) -> dict[str, Any]:
        return {name: self.ser(value) for name, value in values.items()}

    def append_session(self, entries: list[LedgerEntry]) -> None:
        pk = k.session_pk(NAME, entries[0].sandbox_id)
        page = self.client.query(
            TableName=TABLE,
            KeyConditionExpression="#pk = :pk AND begins_with(#sk, :q)",
            ExpressionAttributeNames={"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY},
            ExpressionAttributeValues=self._dy({":pk": pk, ":q": k.SEQUENCE_PREFIX}),
            ScanIndexForward=False,
            Limit=1,
            ConsistentRead=True,
        )
        last = self._plain(page["Items"][0]) if page["Items"] else None
        number, incarnation = next_mark(last)
        not_there = {
            "ConditionExpression": "attribute_not_exists(#pk)",
            "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY},
        }
        for w in plan(entries, number, incarnation, self.ctx.shards):
            head = w.head
            items: list[dict[str, Any]] = [
                {"Put": {"TableName": TABLE, "Item": self._dy(head), **not_there}}
            ]
            if w.changes_summary:
                now_ms = time.time_ns() // 1_000_000
                expression, names, values = summary_values(w, entries[0].sandbox_id, now_ms)
                items.append(
                    {
                        "Update": {
                            "TableName": TABLE,
                            "Key": self._dy({k.PARTITION_KEY: w.pk, k.SORT_KEY: k.SUMMARY_SK}),
                            "UpdateExpression": expression,
                            "ExpressionAttributeNames": names,
                            "ExpressionAttributeValues": self._dy(values),
                            "ConditionExpression": "(attribute_not_exists(#dl) OR #dl < :now)",
                            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                        }
                    }
                )
            if w.number:
                items.append(
                    {
                        "ConditionCheck": {
                            "TableName": TABLE,
                            "Key": self._dy({k.PARTITION_KEY: w.pk, k.SORT_KEY: w.before_sk}),
                            "ConditionExpression": "#inc = :inc",
                            "ExpressionAttributeNames": {"#inc": A.INCARNATION},
                            "ExpressionAttributeValues": self._dy({":inc": w.incarnation}),
                        }
                    }
                )
            mark = {
                k.PARTITION_KEY: w.pk,
                k.SORT_KEY: w.mark_sk,
                A.REF: w.head_sk,
                A.INCARNATION: w.incarnation,
            }
            items.append({"Put": {"TableName": TABLE, "Item": self._dy(mark), **not_there}})
            self.client.transact_write_items(TransactItems=items)

    def read_all(self, sid: str) -> list[LedgerEntry]:
        request: dict[str, Any] = {
            "TableName": TABLE,
            "KeyConditionExpression": "#pk = :pk AND begins_with(#sk, :prefix)",
            "ExpressionAttributeNames": {"#pk": k.PARTITION_KEY, "#sk": k.SORT_KEY},
            "ExpressionAttributeValues": self._dy(
                {":pk": k.session_pk(NAME, sid), ":prefix": k.EVENT_PREFIX}
            ),
            "ConsistentRead": True,
        }
        out = []
        while True:
            page = self.client.query(**request)
            for raw in page["Items"]:
                item = self._plain(raw)
                if A.TS in item:  # a head (no entry here is large enough to have parts)
                    out.append(entry_of(sid, bytes(item[A.DATA]), A.COMPRESSION in item))
            if "LastEvaluatedKey" not in page:
                return out
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def list_page(self) -> list[SandboxDetails]:
        keys = []
        for shard in range(self.ctx.shards):
            page = self.client.query(
                TableName=TABLE,
                IndexName=k.ALL.name,
                KeyConditionExpression="#ipk = :ipk",
                ExpressionAttributeNames={"#ipk": k.ALL.partition_key},
                ExpressionAttributeValues=self._dy({":ipk": k.all_pk(shard)}),
                ScanIndexForward=False,
                Limit=PAGE,
            )
            keys += [self._plain(item) for item in page["Items"]]
        wanted = newest(keys)
        request = {
            TABLE: {
                "Keys": [
                    self._dy({k.PARTITION_KEY: key[k.PARTITION_KEY], k.SORT_KEY: k.SUMMARY_SK})
                    for key in wanted
                ],
                "ConsistentRead": True,
            }
        }
        found: dict[str, dict[str, Any]] = {}
        while request:
            response = self.client.batch_get_item(RequestItems=request)
            for raw in response["Responses"].get(TABLE, []):
                item = self._plain(raw)
                found[item[k.PARTITION_KEY]] = item
            request = response.get("UnprocessedKeys") or {}
        return [details_of(found[key[k.PARTITION_KEY]]) for key in wanted]

    def heartbeat(self) -> tuple[ResourceActivityRecord, int]:
        now_ms = time.time_ns() // 1_000_000
        phases = {f":p{i}": phase for i, phase in enumerate(LIVE_PHASES)}
        response = self.client.update_item(
            TableName=TABLE,
            Key=self._dy(
                {k.PARTITION_KEY: k.resource_pk(self.ctx.record_id), k.SORT_KEY: k.RESOURCE_SK}
            ),
            UpdateExpression="SET #u = :u, #gsk = :ms, #rev = #rev + :one, "
            "#inc = if_not_exists(#inc, :newinc), #ttl = :ttl",
            ConditionExpression="attribute_exists(#rev) AND attribute_not_exists(#exp) AND "
            f"#ph IN ({', '.join(phases)})",
            ExpressionAttributeNames={
                "#u": k.RECORD_UPDATED_AT,
                "#gsk": k.INDEX_SORT_KEY,
                "#ttl": k.TTL_ATTRIBUTE,
                "#rev": k.REVISION,
                "#exp": k.CLAIM,
                "#ph": k.RECORD_PHASE,
                "#inc": k.INCARNATION,
            },
            ExpressionAttributeValues=self._dy(
                {
                    ":u": iso_now(),
                    ":ms": now_ms,
                    ":one": 1,
                    ":newinc": secrets.token_hex(16),
                    ":ttl": now_ms // 1000 + self.ctx.ttl_window_s,
                    **phases,
                }
            ),
            ReturnValues="ALL_NEW",
            ReturnValuesOnConditionCheckFailure="ALL_OLD",
        )
        return record_of(self._plain(response["Attributes"]))


# ---------------------------------------------------------------------------------------
# PynamoDB: models of the table's items, its TransactWrite, query, batch_get and update


def pynamodb_models(endpoint: str) -> Any:
    """PynamoDB's models of the table's items (host set per run: the models are made here)."""

    class Settings:
        table_name = TABLE
        host = endpoint
        region = REGION
        aws_access_key_id = "local"
        aws_secret_access_key = "local"
        max_retry_attempts = 3

    class Head(Model):
        Meta = Settings
        pk = UnicodeAttribute(hash_key=True, attr_name=k.PARTITION_KEY)
        sk = UnicodeAttribute(range_key=True, attr_name=k.SORT_KEY)
        ts = NumberAttribute(null=True, attr_name=A.TS)
        ev = UnicodeAttribute(null=True, attr_name=A.EVENT)
        d = BinaryAttribute(null=True, legacy_encoding=False, attr_name=A.DATA)
        z = UnicodeAttribute(null=True, attr_name=A.COMPRESSION)
        cs = NumberAttribute(null=True, attr_name=A.ON_SUMMARY)
        q = NumberAttribute(null=True, attr_name=A.SEQUENCE)

    class Mark(Model):
        Meta = Settings
        pk = UnicodeAttribute(hash_key=True, attr_name=k.PARTITION_KEY)
        sk = UnicodeAttribute(range_key=True, attr_name=k.SORT_KEY)
        ref = UnicodeAttribute(null=True, attr_name=A.REF)
        inc = UnicodeAttribute(null=True, attr_name=A.INCARNATION)

    class Lifecycle(MapAttribute[str, Any]):
        ev = UnicodeAttribute(attr_name=A.EVENT)
        ts = NumberAttribute(attr_name=A.TS)

    class AllIndex(GlobalSecondaryIndex["Summary"]):
        class Meta:
            index_name = k.ALL.name
            projection = KeysOnlyProjection()

        g3pk = UnicodeAttribute(hash_key=True, attr_name=k.ALL.partition_key)
        gsk = NumberAttribute(range_key=True, attr_name=k.INDEX_SORT_KEY)

    class Summary(Model):
        Meta = Settings
        pk = UnicodeAttribute(hash_key=True, attr_name=k.PARTITION_KEY)
        sk = UnicodeAttribute(range_key=True, attr_name=k.SORT_KEY)
        name = UnicodeAttribute(null=True, attr_name=A.NAME)
        sandbox_id = UnicodeAttribute(null=True, attr_name=A.SANDBOX_ID)
        item_type = UnicodeAttribute(null=True, attr_name=A.ITEM_TYPE)
        started_at = NumberAttribute(null=True, attr_name=A.STARTED_AT)
        completed_at = NumberAttribute(null=True, attr_name=A.COMPLETED_AT)
        exec_count = NumberAttribute(null=True, attr_name=A.EXEC_COUNT)
        gsk = NumberAttribute(null=True, attr_name=k.INDEX_SORT_KEY)
        g1pk = UnicodeAttribute(null=True, attr_name=k.BY_NAME.partition_key)
        g2pk = UnicodeAttribute(null=True, attr_name=k.BY_NAME_STATUS.partition_key)
        g3pk = UnicodeAttribute(null=True, attr_name=k.ALL.partition_key)
        g4pk = UnicodeAttribute(null=True, attr_name=k.ALL_STATUS.partition_key)
        lc = ListAttribute(of=Lifecycle, null=True, attr_name=A.LIFECYCLE)
        lq = UnicodeAttribute(null=True, attr_name=A.LIFECYCLE_SEQUENCE)
        sq = NumberAttribute(null=True, attr_name=A.SUMMARY_SEQUENCE)
        deleting = NumberAttribute(null=True, attr_name=A.DELETING)
        all_index = AllIndex()

    class Resource(Model):
        Meta = Settings
        pk = UnicodeAttribute(hash_key=True, attr_name=k.PARTITION_KEY)
        sk = UnicodeAttribute(range_key=True, attr_name=k.SORT_KEY)
        rec = UnicodeAttribute(null=True, attr_name=k.RECORD_BODY)
        phase = UnicodeAttribute(null=True, attr_name=k.RECORD_PHASE)
        updated_at = UnicodeAttribute(null=True, attr_name=k.RECORD_UPDATED_AT)
        gsk = NumberAttribute(null=True, attr_name=k.INDEX_SORT_KEY)
        expires_at = NumberAttribute(null=True, attr_name=k.TTL_ATTRIBUTE)
        rev = NumberAttribute(null=True, attr_name=k.REVISION)
        inc = UnicodeAttribute(null=True, attr_name=k.INCARNATION)
        expiring = UnicodeAttribute(null=True, attr_name=k.CLAIM)

    class Models:
        pass

    for model in (Head, Mark, Summary, Resource):
        setattr(Models, model.__name__, model)
    Models.Lifecycle = Lifecycle  # type: ignore[attr-defined]
    return Models


class PynamoDBSide:
    def __init__(self, models: Any, ctx: Context) -> None:
        self.m = models
        self.ctx = ctx
        self.connection = Connection(host=models.Head.Meta.host, region=REGION)

    def clients(self) -> list[Any]:
        """The botocore clients the calls go through (the transactions' and each model's)."""
        models = [self.m.Head, self.m.Mark, self.m.Summary, self.m.Resource]
        return [self.connection.client] + [m._get_connection().connection.client for m in models]

    def append_session(self, entries: list[LedgerEntry]) -> None:
        m = self.m
        sid = entries[0].sandbox_id
        pk = k.session_pk(NAME, sid)
        marks = m.Mark.query(
            pk,
            m.Mark.sk.startswith(k.SEQUENCE_PREFIX),
            scan_index_forward=False,
            limit=1,
            consistent_read=True,
        )
        last = next(iter(marks), None)
        number, incarnation = next_mark(
            None if last is None else {k.SORT_KEY: last.sk, A.INCARNATION: last.inc}
        )
        for w in plan(entries, number, incarnation, self.ctx.shards):
            with TransactWrite(connection=self.connection) as transaction:
                head = m.Head(
                    w.pk, w.head_sk, ts=w.ts, ev=w.event, d=w.data, q=w.number,
                    cs=1 if w.created or w.closed else None,
                )  # fmt: skip
                transaction.save(head, condition=m.Head.pk.does_not_exist())
                if w.changes_summary:
                    transaction.update(
                        m.Summary(w.pk, k.SUMMARY_SK),
                        actions=self._summary_actions(w, sid),
                        condition=m.Summary.deleting.does_not_exist()
                        | (m.Summary.deleting < time.time_ns() // 1_000_000),
                        return_values="ALL_OLD",
                    )
                if w.number:
                    transaction.condition_check(
                        m.Mark, w.pk, w.before_sk, condition=m.Mark.inc == w.incarnation
                    )
                mark = m.Mark(w.pk, w.mark_sk, ref=w.head_sk, inc=w.incarnation)
                transaction.save(mark, condition=m.Mark.pk.does_not_exist())

    def _summary_actions(self, w: Write, sid: str) -> list[Any]:
        s = self.m.Summary
        actions = [s.name.set(NAME), s.sandbox_id.set(sid), s.item_type.set("session")]
        if w.created:
            actions += [
                s.started_at.set(s.started_at | w.ts),
                s.gsk.set(s.gsk | w.ts),
                s.g1pk.set(k.by_name_pk(NAME)),
                s.g3pk.set(k.all_pk(w.shard)),
                s.g2pk.set(s.g2pk | k.by_name_status_pk(SandboxStatus.Running, NAME)),
                s.g4pk.set(s.g4pk | k.all_status_pk(SandboxStatus.Running, w.shard)),
            ]
        if w.closed:
            actions += [
                s.completed_at.set(s.completed_at | w.ts),
                s.g2pk.set(k.by_name_status_pk(SandboxStatus.Completed, NAME)),
                s.g4pk.set(k.all_status_pk(SandboxStatus.Completed, w.shard)),
            ]
        lifecycle = [self.m.Lifecycle(ev=c[A.EVENT], ts=c[A.TS]) for c in w.lifecycle]
        actions += [
            s.lc.set(lifecycle),
            s.lq.set(f"{w.incarnation}#{w.number}"),
            s.sq.set(w.number),
        ]
        if w.completed_exec:
            actions.append(s.exec_count.add(1))
        return actions

    def read_all(self, sid: str) -> list[LedgerEntry]:
        h = self.m.Head
        items = h.query(
            k.session_pk(NAME, sid), h.sk.startswith(k.EVENT_PREFIX), consistent_read=True
        )
        return [entry_of(sid, i.d, i.z is not None) for i in items if i.ts is not None]

    def list_page(self) -> list[SandboxDetails]:
        s = self.m.Summary
        keys = []
        for shard in range(self.ctx.shards):
            found = s.all_index.query(k.all_pk(shard), scan_index_forward=False, limit=PAGE)
            keys += [{k.PARTITION_KEY: i.pk, k.INDEX_SORT_KEY: i.gsk} for i in found]
        wanted = newest(keys)
        got = {
            i.pk: i
            for i in s.batch_get(
                [(key[k.PARTITION_KEY], k.SUMMARY_SK) for key in wanted], consistent_read=True
            )
        }
        return [self._details(got[key[k.PARTITION_KEY]]) for key in wanted]

    @staticmethod
    def _details(i: Any) -> SandboxDetails:
        return details_of(
            {
                A.NAME: i.name,
                A.SANDBOX_ID: i.sandbox_id,
                A.STARTED_AT: i.started_at,
                A.COMPLETED_AT: i.completed_at,
                A.EXEC_COUNT: i.exec_count,
            }
        )

    def heartbeat(self) -> tuple[ResourceActivityRecord, int]:
        r = self.m.Resource
        now_ms = time.time_ns() // 1_000_000
        record = r(k.resource_pk(self.ctx.record_id), k.RESOURCE_SK)
        record.update(
            actions=[
                r.updated_at.set(iso_now()),
                r.gsk.set(now_ms),
                r.rev.set(r.rev + 1),
                r.inc.set(r.inc | secrets.token_hex(16)),
                r.expires_at.set(now_ms // 1000 + self.ctx.ttl_window_s),
            ],
            condition=r.rev.exists() & r.expiring.does_not_exist() & r.phase.is_in(*LIVE_PHASES),
        )
        return record_of(
            {
                k.RECORD_BODY: record.rec,
                k.RECORD_UPDATED_AT: record.updated_at,
                k.REVISION: record.rev,
            }
        )


# ---------------------------------------------------------------------------------------
# aiodynamo: its client over a pluggable HTTP implementation


@dataclass
class AiodynamoHttp:
    """aiodynamo's HTTP implementation: live (aiohttp) until a player is set, then replayed."""

    live: Callable[[HttpRequest], Awaitable[HttpResponse]]
    player: Player | None = None

    async def __call__(self, request: HttpRequest) -> HttpResponse:
        if self.player is None:
            return await self.live(request)
        status, body = self.player.next(_target(request.headers or {}))
        return HttpResponse(status, body)


class Aiodynamo:
    def __init__(self, client: AiodynamoClient, ctx: Context) -> None:
        self.client = client
        self.ctx = ctx

    async def append_session(self, entries: list[LedgerEntry]) -> None:
        sid = entries[0].sandbox_id
        pk = k.session_pk(NAME, sid)
        page = await self.client.query_single_page(
            TABLE,
            HashKey(k.PARTITION_KEY, pk) & RangeKey(k.SORT_KEY).begins_with(k.SEQUENCE_PREFIX),
            scan_forward=False,
            limit=1,
            consistent_read=True,
        )
        number, incarnation = next_mark(page.items[0] if page.items else None)
        not_there = F(k.PARTITION_KEY).does_not_exist()
        for w in plan(entries, number, incarnation, self.ctx.shards):
            head = w.head
            operations: list[Any] = [Put(TABLE, head, not_there)]
            if w.changes_summary:
                operations.append(
                    Update(
                        TABLE,
                        {k.PARTITION_KEY: w.pk, k.SORT_KEY: k.SUMMARY_SK},
                        self._summary_update(w, sid),
                        F(A.DELETING).does_not_exist()
                        | F(A.DELETING).lt(time.time_ns() // 1_000_000),
                    )
                )
            if w.number:
                operations.append(
                    ConditionCheck(
                        TABLE,
                        {k.PARTITION_KEY: w.pk, k.SORT_KEY: w.before_sk},
                        F(A.INCARNATION).equals(w.incarnation),
                    )
                )
            mark = {
                k.PARTITION_KEY: w.pk,
                k.SORT_KEY: w.mark_sk,
                A.REF: w.head_sk,
                A.INCARNATION: w.incarnation,
            }
            operations.append(Put(TABLE, mark, not_there))
            await self.client.transact_write_items(operations)

    @staticmethod
    def _summary_update(w: Write, sid: str) -> Any:
        update = F(A.NAME).set(NAME) & F(A.SANDBOX_ID).set(sid) & F(A.ITEM_TYPE).set("session")
        if w.created:
            update = (
                update
                & F(A.STARTED_AT).set_if_not_exists(w.ts)
                & F(k.INDEX_SORT_KEY).set_if_not_exists(w.ts)
                & F(k.BY_NAME.partition_key).set(k.by_name_pk(NAME))
                & F(k.ALL.partition_key).set(k.all_pk(w.shard))
                & F(k.BY_NAME_STATUS.partition_key).set_if_not_exists(
                    k.by_name_status_pk(SandboxStatus.Running, NAME)
                )
                & F(k.ALL_STATUS.partition_key).set_if_not_exists(
                    k.all_status_pk(SandboxStatus.Running, w.shard)
                )
            )
        if w.closed:
            update = (
                update
                & F(A.COMPLETED_AT).set_if_not_exists(w.ts)
                & F(k.BY_NAME_STATUS.partition_key).set(
                    k.by_name_status_pk(SandboxStatus.Completed, NAME)
                )
                & F(k.ALL_STATUS.partition_key).set(
                    k.all_status_pk(SandboxStatus.Completed, w.shard)
                )
            )
        update = (
            update
            & F(A.LIFECYCLE).set(w.lifecycle)
            & F(A.LIFECYCLE_SEQUENCE).set(f"{w.incarnation}#{w.number}")
            & F(A.SUMMARY_SEQUENCE).set(w.number)
        )
        if w.completed_exec:
            update = update & F(A.EXEC_COUNT).add(1)
        return update

    async def read_all(self, sid: str) -> list[LedgerEntry]:
        condition = HashKey(k.PARTITION_KEY, k.session_pk(NAME, sid)) & RangeKey(
            k.SORT_KEY
        ).begins_with(k.EVENT_PREFIX)
        return [
            entry_of(sid, item[A.DATA], A.COMPRESSION in item)
            async for item in self.client.query(TABLE, condition, consistent_read=True)
            if A.TS in item
        ]

    async def list_page(self) -> list[SandboxDetails]:
        keys = []
        for shard in range(self.ctx.shards):
            page = await self.client.query_single_page(
                TABLE,
                HashKey(k.ALL.partition_key, k.all_pk(shard)),
                index=k.ALL.name,
                scan_forward=False,
                limit=PAGE,
                select=Select.all_projected_attributes,
            )
            keys += page.items
        wanted = newest(keys)
        request = [
            {k.PARTITION_KEY: key[k.PARTITION_KEY], k.SORT_KEY: k.SUMMARY_SK} for key in wanted
        ]
        found: dict[str, dict[str, Any]] = {}
        while request:
            response = await self.client.batch_get(
                {TABLE: BatchGetRequest(keys=request, consistent_read=True)}
            )
            found |= {item[k.PARTITION_KEY]: item for item in response.items.get(TABLE, [])}
            request = response.unprocessed_keys.get(TABLE, [])
        return [details_of(found[key[k.PARTITION_KEY]]) for key in wanted]

    async def heartbeat(self) -> tuple[ResourceActivityRecord, int]:
        now_ms = time.time_ns() // 1_000_000
        update = (
            F(k.RECORD_UPDATED_AT).set(iso_now())
            & F(k.INDEX_SORT_KEY).set(now_ms)
            & F(k.REVISION).change(1)
            & F(k.INCARNATION).set_if_not_exists(secrets.token_hex(16))
            & F(k.TTL_ATTRIBUTE).set(now_ms // 1000 + self.ctx.ttl_window_s)
        )
        attributes = await self.client.update_item(
            TABLE,
            {k.PARTITION_KEY: k.resource_pk(self.ctx.record_id), k.SORT_KEY: k.RESOURCE_SK},
            update,
            return_values=ReturnValues.all_new,
            condition=F(k.REVISION).exists()
            & F(k.CLAIM).does_not_exist()
            & F(k.RECORD_PHASE).is_in(list(LIVE_PHASES)),
        )
        assert attributes is not None
        return record_of(attributes)


# ---------------------------------------------------------------------------------------
# Replay


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_: Any) -> Any:
        yield self._body

    async def read(self) -> bytes:
        return self._body


def _target(headers: Any) -> str:
    target = headers.get("X-Amz-Target", b"")
    return (target.decode() if isinstance(target, bytes) else target).rsplit(".", 1)[-1]


class Player:
    """Answers every request with the recorded responses, in order, cycling; counts them."""

    def __init__(self) -> None:
        self.responses: list[tuple[int, dict[str, str], bytes]] = []
        self.position = 0
        self.seen: list[str] = []

    def load(self, calls: list[tuple[str, dict[str, Any], int, dict[str, str], bytes]]) -> None:
        self.responses = [(status, headers, body) for _, _, status, headers, body in calls]
        self.position = 0

    def next(self, operation: str) -> tuple[int, bytes]:
        status, _, body = self.responses[self.position % len(self.responses)]
        self.position += 1
        self.seen.append(operation)
        return status, body

    def attach(self, client: Any, *, aio: bool = False) -> None:
        def answer(request: Any, **_: Any) -> AWSResponse:
            status, headers, body = self.responses[self.position % len(self.responses)]
            self.position += 1
            self.seen.append(_target(request.headers))
            kind = AioAWSResponse if aio else AWSResponse
            return kind(request.url, status, headers, _Raw(body))

        client.meta.events.register_first("before-send.dynamodb", answer)


# ---------------------------------------------------------------------------------------
# The adapter's sides: its ledger and its resource record store, sync and async


class AdapterSync:
    def __init__(self, ledger: SyncDynamoDBAdapter, store: SyncResourceRecordStore, ctx: Context):
        self.ledger, self.store, self.ctx = ledger, store, ctx

    def clients(self) -> list[Any]:
        return [self.ledger.client(), self.store.client()]

    def append_session(self, entries: list[LedgerEntry]) -> None:
        for e in entries:
            self.ledger.append(e)

    def read_all(self, sid: str) -> list[LedgerEntry]:
        return self.ledger.read_all(NAME, sid)

    def list_page(self) -> list[SandboxDetails]:
        return self.ledger.list_all_sandbox_page(ListSandboxOptions(limit=PAGE)).sessions

    def heartbeat(self) -> tuple[ResourceActivityRecord, int]:
        touched = self.store.touch(self.ctx.record_id)
        return touched.record, touched.revision


class AdapterAsync:
    def __init__(self, ledger: DynamoDBAdapter, store: ResourceRecordStore, ctx: Context):
        self.ledger, self.store, self.ctx = ledger, store, ctx

    async def clients(self) -> list[Any]:
        return [await self.ledger.client(), await self.store.client()]

    async def append_session(self, entries: list[LedgerEntry]) -> None:
        for e in entries:
            await self.ledger.append(e)

    async def read_all(self, sid: str) -> list[LedgerEntry]:
        return await self.ledger.read_all(NAME, sid)

    async def list_page(self) -> list[SandboxDetails]:
        page = await self.ledger.list_all_sandbox_page(ListSandboxOptions(limit=PAGE))
        return page.sessions

    async def heartbeat(self) -> tuple[ResourceActivityRecord, int]:
        touched = await self.store.touch(self.ctx.record_id)
        return touched.record, touched.revision


# ---------------------------------------------------------------------------------------
# The run


Calls = list[tuple[str, dict[str, Any], int, dict[str, str], bytes]]


@dataclass
class Case:
    label: str
    method: str
    args: Callable[[str], tuple[Any, ...]]  # the arguments of a side's next operation
    weight: int  # the operation's size in reads of 10 entries: divides its runs per round
    calls: Calls = field(default_factory=list)  # the adapter's recorded requests and responses


def runner(
    side: Any, case: Case, name: str, loop: asyncio.AbstractEventLoop
) -> Callable[[int], Any]:
    """Run ``case`` on ``side`` n times (in the event loop for an async side), the last result
    back."""
    method = getattr(side, case.method)
    if not asyncio.iscoroutinefunction(method):

        def n_times(n: int) -> Any:
            result = None
            for _ in range(n):
                result = method(*case.args(name))
            return result

        return n_times

    async def many(n: int) -> Any:
        result = None
        for _ in range(n):
            result = await method(*case.args(name))
        return result

    return lambda n: loop.run_until_complete(many(n))


def _check(label: str, side: str, got: Any, expected: Any) -> None:
    if got != expected:
        raise SystemExit(f"{label}: {side} did not return what the adapter returns")


async def _session() -> aiohttp.ClientSession:
    return aiohttp.ClientSession()


def _sessions(prefix: str) -> Iterator[list[LedgerEntry]]:
    return (session_entries(f"{prefix}{i}") for i in itertools.count())


def _seed(ledger: SyncDynamoDBAdapter) -> None:
    """The sessions read (one of each size) and the sessions listed (newer than any other)."""
    for size in SIZES:
        ledger.append(entry(f"r{size}", LedgerEvent.SandboxCreated, 1))
        for i in range(size - 1):
            payload = {"cmd": "make test", "i": i, "env": {"CI": "1"}}
            ledger.append(entry(f"r{size}", LedgerEvent.ExecStarted, 2 + i, i, payload))
    for i in range(LISTED):
        ledger.append(entry(f"l{i}", LedgerEvent.SandboxCreated, 1_000 + i))


def measure(endpoint: str, runs: int, rounds: int) -> list[tuple[Case, dict[str, list[float]]]]:
    loop = asyncio.new_event_loop()
    run = loop.run_until_complete
    sync = SyncDynamoDBAdapter(TABLE, endpoint_url=endpoint)
    sync.create_table()
    store = SyncResourceRecordStore(TABLE, endpoint_url=endpoint)
    record = ResourceActivityRecord.model_validate({**RECORD, "updatedAt": iso_now()})
    store.put(record)
    assert store.policy is not None
    window = store.policy.latest_expiry(record.phase)
    assert window is not None
    ctx = Context(
        sync.table_shard_count(), int((window + store.ttl_horizon).total_seconds()), record.id
    )
    _seed(sync)
    aio = AdapterAsync(
        DynamoDBAdapter(TABLE, endpoint_url=endpoint),
        ResourceRecordStore(TABLE, endpoint_url=endpoint),
        ctx,
    )
    raw_client = boto3.session.Session().client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name=REGION,
        aws_access_key_id="local",
        aws_secret_access_key="local",
    )
    session = run(_session())
    http = AiodynamoHttp(AIOHTTP(session))
    aiodynamo = AiodynamoClient(
        http, StaticCredentials(Key("local", "local")), REGION, URL(endpoint), numeric_type=int
    )
    sides: dict[str, Any] = {
        "adapter (sync)": AdapterSync(sync, store, ctx),
        "adapter (async)": aio,
        "raw boto3": RawBoto3(raw_client, ctx),
        "PynamoDB": PynamoDBSide(pynamodb_models(endpoint), ctx),
        "aiodynamo": Aiodynamo(aiodynamo, ctx),
    }
    ours = sides["adapter (sync)"]

    # Every append a new session (a session's first append reads its last mark), the same
    # entries for every side but its own sandbox ids.
    fresh = {name: _sessions(f"{number}-") for number, name in enumerate(SIDES)}
    cases = [
        Case("append a session of 10", "append_session", lambda n: (next(fresh[n]),), 10),
        *(
            Case(f"read_all of {size:,}", "read_all", lambda _, s=size: (f"r{s}",), size // 20 or 1)
            for size in SIZES
        ),
        Case(f"list page of {PAGE}", "list_page", lambda _: (), 4),
        Case("resource heartbeat", "heartbeat", lambda _: (), 1),
    ]

    # Live, once each: the descriptor read (before any recording), then every side's result
    # checked against the adapter's; an append read back by the adapter.
    store.touch(record.id)
    run(aio.heartbeat())
    for case in cases:
        expected = None
        for name, side in sides.items():
            got = runner(side, case, name, loop)(1)
            if case.method == "append_session":
                sid = f"{SIDES.index(name)}-0"
                details = sync.get_sandbox_details(NAME, sid)
                assert details is not None
                got = [
                    [e.model_dump(exclude={"sandbox_id"}) for e in sync.read_all(NAME, sid)],
                    details.model_dump(exclude={"sandbox_id"}),
                ]
            elif case.method == "heartbeat":  # the record; its revision and time move on
                got = got[0].model_dump(exclude={"updated_at"})
            expected = got if expected is None else expected
            _check(case.label, name, got, expected)
        # The tape: this operation's requests and responses on the adapter's sync client.
        tapes = [Tape(client) for client in ours.clients()]
        runner(ours, case, "adapter (sync)", loop)(1)
        for tape in tapes:
            tape.stop_recording()
            case.calls += tape.calls

    # From here on every side is answered from the tapes.
    players = {name: Player() for name in SIDES}
    for client in ours.clients():
        players["adapter (sync)"].attach(client)
    for client in run(aio.clients()):
        players["adapter (async)"].attach(client, aio=True)
    players["raw boto3"].attach(raw_client)
    for client in sides["PynamoDB"].clients():
        players["PynamoDB"].attach(client)
    http.player = players["aiodynamo"]

    rows = []
    for case in cases:
        operations = [operation for operation, *_ in case.calls]
        runners = {name: runner(side, case, name, loop) for name, side in sides.items()}
        results = {}
        for name, once in runners.items():
            players[name].load(case.calls)
            players[name].seen.clear()
            results[name] = once(1)  # warm, and the requests of one operation
            if players[name].seen != operations:
                raise SystemExit(
                    f"{case.label}: {name} made {players[name].seen}, the adapter {operations}"
                )
            _check(f"{case.label} (replayed)", name, results[name], results["adapter (sync)"])
        per_round = max(1, runs // case.weight)
        cpu: dict[str, list[float]] = {name: [] for name in SIDES}
        order = list(runners.items())
        for number in range(rounds):
            # Many short rounds, each side's turn moving round by round: a burst of the
            # machine's other work falls on every side alike, and the medians pass it by.
            for name, n_times in order[number % len(order) :] + order[: number % len(order)]:
                players[name].load(case.calls)
                gc.collect()  # each side's collections are its own garbage's
                start = time.process_time()
                n_times(per_round)
                cpu[name].append((time.process_time() - start) / per_round * 1e6)
        rows.append((case, cpu))

    sync.close()
    store.close()
    run(aio.ledger.close())
    run(aio.store.close())
    run(session.close())
    run(loop.shutdown_asyncgens())
    loop.close()
    return rows


def report(rows: list[tuple[Case, dict[str, list[float]]]], runs: int, rounds: int) -> None:
    print(
        f"Client CPU per operation, responses replayed ({rounds} rounds, {runs} runs per "
        "round for the smallest; µs, median of the rounds; ratio to raw boto3 in the same "
        "round: median [min-max])\n"
    )
    print("| operation | requests | " + " | ".join(SIDES) + " |")
    print("|---|---:|" + "---:|" * len(SIDES))
    for case, cpu in rows:
        cells = []
        for side in SIDES:
            median = statistics.median(cpu[side])
            if side == BASELINE:
                cells.append(f"{median:,.0f}")
                continue
            ratios = [a / b for a, b in zip(cpu[side], cpu[BASELINE], strict=True)]
            cells.append(
                f"{median:,.0f} ({statistics.median(ratios):.2f} "
                f"[{min(ratios):.2f}-{max(ratios):.2f}])"
            )
        print(f"| {case.label} | {len(case.calls)} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=100, help="runs per round, smallest case")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--quick", action="store_true", help="2 rounds of 10 runs")
    args = parser.parse_args()
    runs, rounds = (10, 2) if args.quick else (args.runs, args.rounds)
    rows = on_local_server(lambda endpoint, _: measure(endpoint, runs, rounds), runs)
    report(rows, runs, rounds)


if __name__ == "__main__":
    main()
