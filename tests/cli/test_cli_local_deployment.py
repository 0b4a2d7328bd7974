"""``sandbox-ledger local --deployment``: the deployment's sweeper and TTL reporter run
beside the server on compressed clocks, their events on the local bus, each once."""

from __future__ import annotations

import json
import signal
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from .processes import free_port
from .test_cli_local import Local


def _events(path: Path, record_id: str) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [e for e in events if e["detail"]["record"]["id"] == record_id]


def _serve(tmp_path: Path, *argv: str) -> tuple[Local, str]:
    port = free_port()
    server = Local(
        *("--port", str(port), "--deployment", "--events", "events.jsonl", "--stale-after", "1"),
        *argv,
        cwd=tmp_path,
    )
    return server, f"http://127.0.0.1:{port}"


def _wait_for_one(path: Path, record_id: str) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while not _events(path, record_id):
        assert time.monotonic() < deadline, "no event for the record within 60 s"
        time.sleep(0.2)
    time.sleep(3)  # several sweeps, and polls of the stream, later: still once
    [event] = _events(path, record_id)
    return event


def test_a_record_whose_owner_stopped_heartbeating_expires_and_its_event_arrives_once(
    tmp_path: Path,
) -> None:
    from resources.resource_fixtures import record
    from sandbox_ledger.resources import SyncResourceRecordStore

    server, url = _serve(tmp_path, "--sweep-every", "0.5")
    try:
        dead = record()
        with SyncResourceRecordStore("sandbox-ledger", endpoint_url=url) as owner:
            owner.put(dead)  # and never again
        event = _wait_for_one(tmp_path / "events.jsonl", dead.id)
    finally:
        code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    assert (event["source"], event["detail-type"]) == (
        "sandbox-ledger.resources",
        "ResourceExpired",
    )
    assert event["detail"]["trigger"] == "sweeper"
    assert "deployment: sweeper: every 0.5 s (stale after 1 s), events to bus 'default'" in stderr
    assert "deployment: event bus: events.jsonl, one JSON line an event" in stderr
    assert "sweep: 1 expired, 0 failed, 0 lost" in stderr


def test_a_record_ttl_removes_is_reported_once(tmp_path: Path) -> None:
    """The sweeper off (a sweep an hour), the strict profile's TTL removes the record and the
    TTL reporter, reading the stream, publishes its expiry once."""
    from resources.resource_fixtures import record
    from sandbox_ledger.resources import SyncResourceRecordStore

    server, url = _serve(
        tmp_path, "--sweep-every", "3600", "--strict-option", "ttl_delay=0,ttl_every=0.1"
    )
    try:
        gone = record()
        with SyncResourceRecordStore(
            "sandbox-ledger", endpoint_url=url, ttl_horizon=timedelta(seconds=1)
        ) as owner:
            owner.put(gone)
        event = _wait_for_one(tmp_path / "events.jsonl", gone.id)
    finally:
        code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    assert event["detail"]["trigger"] == "ttl"


def test_the_reporter_reads_on_after_a_restart_and_reports_no_removal_twice(
    tmp_path: Path,
) -> None:
    """With ``--data``, the TTL reporter keeps its position beside FILE (as the mapping keeps
    its own): a restart serves the same stream, and the removal reported before it is not
    reported again after it; one made after it is."""
    from resources.resource_fixtures import record
    from sandbox_ledger.resources import SyncResourceRecordStore

    port = free_port()
    argv = (
        *("--port", str(port), "--deployment", "--events", "events.jsonl", "--stale-after", "1"),
        *("--data", "dev.jsonl", "--sweep-every", "3600"),
        *("--strict-option", "ttl_delay=0,ttl_every=0.1"),
    )
    url = f"http://127.0.0.1:{port}"
    first, second = record(), record()
    for made in (first, second):
        server = Local(*argv, cwd=tmp_path)
        try:
            with SyncResourceRecordStore(
                "sandbox-ledger", endpoint_url=url, ttl_horizon=timedelta(seconds=1)
            ) as owner:
                owner.put(made)
            _wait_for_one(tmp_path / "events.jsonl", made.id)
        finally:
            code, stderr = server.stop(signal.SIGTERM)
        assert code == 0, stderr
    assert len(_events(tmp_path / "events.jsonl", first.id)) == 1
    assert (tmp_path / ".dev.jsonl.ttl-position").exists()
