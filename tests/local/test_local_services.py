"""The TTL reporter of ``local --deployment`` hands a batch again from its first failed
record, as the stack's event source mapping does (``retry_attempts`` 5,
``ReportBatchItemFailures``), then keeps where the batch was, as its on-failure destination
does, and reads on."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from resources.test_ttl_stream_records import removal
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.local.bus import LocalBus
from sandbox_ledger.local.services import RETRIES, DeploymentServices
from sandbox_ledger.resources.events import Expiry


class _Flaky:
    """A publisher whose first ``failures`` calls fail for the records named in ``ids``."""

    def __init__(self, ids: set[str], failures: int) -> None:
        self.ids, self.failures = ids, failures
        self.calls: list[list[str]] = []
        self.published: list[str] = []

    def publish(self, expiries: Sequence[Expiry]) -> set[str]:
        names = [e.record.id for e in expiries]
        self.calls.append(names)
        if len(self.calls) <= self.failures:
            failed = set(names) & self.ids
            self.published += [n for n in names if n not in failed]
            return failed
        self.published += names
        return set()


def _services(moto_endpoint: str, tmp_path: Path, said: list[str]) -> DeploymentServices:
    table = f"svc-{uuid.uuid4().hex[:10]}"
    with SyncDynamoDBAdapter(table, endpoint_url=moto_endpoint) as ledger:
        ledger.create_table()
    bus = LocalBus(str(tmp_path / "events.jsonl"))
    return DeploymentServices(
        moto_endpoint,
        table,
        bus,
        sweep_every=3600,
        say=said.append,
        failures=tmp_path / "failed.jsonl",
        retry_wait=0.001,
    )


def _batch(table: str) -> list[dict[str, Any]]:
    batch = [removal(str(100 + i)) for i in range(4)]
    for record in batch:
        record["eventSourceARN"] = record["eventSourceARN"].replace("/ledger/", f"/{table}/")
    return batch


def _id(stream_record: dict[str, Any]) -> str:
    return str(stream_record["dynamodb"]["OldImage"]["PK"]["S"]).split("#")[-1]


def _report(
    moto_endpoint: str, tmp_path: Path, failing: int, failures: int
) -> tuple[_Flaky, list[str], list[str], list[dict[str, Any]]]:
    """A batch of four TTL removals reported by a publisher failing the ``failing``-th one
    ``failures`` times; the publisher, the records' ids, what was said, the batch."""
    said: list[str] = []
    services = _services(moto_endpoint, tmp_path, said)
    batch = _batch(services.table)
    ids = [_id(r) for r in batch]
    flaky = _Flaky({ids[failing]}, failures)
    services.publisher = flaky  # type: ignore[assignment]
    services.report_batch(batch)
    services.stop()
    return flaky, ids, said, batch


def test_a_batch_is_handed_again_from_its_first_failed_record(
    moto_endpoint: str, tmp_path: Path
) -> None:
    flaky, ids, said, _ = _report(moto_endpoint, tmp_path, failing=2, failures=2)
    assert flaky.calls == [ids, ids[2:], ids[2:]]  # from the first failed record on
    assert sorted(flaky.published) == sorted([*ids, ids[3], ids[3]])  # at least once
    assert not (tmp_path / "failed.jsonl").exists() and said == []


def test_a_batch_failing_past_its_retries_is_kept_and_the_reader_goes_on(
    moto_endpoint: str, tmp_path: Path
) -> None:
    flaky, ids, said, batch = _report(moto_endpoint, tmp_path, failing=1, failures=10**6)
    assert len(flaky.calls) == RETRIES + 1 and flaky.calls[1:] == [ids[1:]] * RETRIES
    [kept] = [json.loads(line) for line in (tmp_path / "failed.jsonl").read_text().splitlines()]
    assert (kept["startSequenceNumber"], kept["endSequenceNumber"], kept["batchSize"]) == (
        "101",
        "103",
        3,
    )
    assert kept["stream"] == batch[0]["eventSourceARN"]
    assert said == [
        f"TTL reporter: gave up on 3 records after {RETRIES} retries (101 to 103); kept in "
        f"{tmp_path / 'failed.jsonl'}"
    ]
