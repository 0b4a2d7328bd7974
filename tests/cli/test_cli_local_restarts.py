"""What a restart of ``local --data`` must not lose: the stream records of changes made
around it. Each test restarts a real server (SIGTERM, then a new one on the same port and
FILE) at the moment the fleet's soak found a record lost, and reads the stream after it.

- A resource record past its TTL that the TTL service had not deleted yet is still in the
  table: a save kept it out (as a read leaves it out), so the restart dropped it without
  the TTL removal the reporter reports.
- A delete of a session cut by the restart between its steps: the save left the session out
  (as an export leaves out a session a delete holds), so the restart dropped it without the
  removal of its summary, which the change feed reports as ``session.deleted``; a delete
  that went on after the restart found its lease gone and answered with the session still
  there.
"""

from __future__ import annotations

import json
import signal
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from .processes import free_port
from .test_cli_local import Local, _read_on, _stream_arn


def test_a_record_past_its_ttl_at_a_restart_is_removed_by_ttl_after_it(tmp_path: Path) -> None:
    """A record whose TTL passed a moment before SIGTERM, not yet deleted by the TTL service
    (it deletes up to ``ttl_delay`` late), is kept in FILE as stored; after the restart the
    TTL service deletes it, and the stream holds that removal (``userIdentity`` Service),
    once."""
    from resources.resource_fixtures import record
    from sandbox_ledger.local.persist import read_data
    from sandbox_ledger.resources import SyncResourceRecordStore

    port = free_port()
    argv = ["--data", "dev.jsonl", "--port", str(port), "--stale-after", "1"]
    server = Local(*argv, "--strict-option", "ttl_delay=600,ttl_every=0.1", cwd=tmp_path)
    kept = record()
    with SyncResourceRecordStore(
        "sandbox-ledger",
        endpoint_url=f"http://127.0.0.1:{port}",
        region_name="us-east-1",
        ttl_horizon=timedelta(seconds=1),
    ) as records:
        records.put(kept)
        stored = records.get_versioned(kept.id)
        assert stored is not None and stored.expires_at is not None
        while time.time() <= stored.expires_at + 1:  # past its TTL, which waits 600 s
            time.sleep(0.1)
        assert records.get_versioned(kept.id) is None  # reads hide it
    code, stderr = server.stop(signal.SIGTERM)
    assert code == 0, stderr
    assert kept.id in read_data(tmp_path / "dev.jsonl").records

    again = Local(*argv, "--strict-option", "ttl_delay=0,ttl_every=0.1", cwd=tmp_path)
    try:
        arn = _stream_arn(port)
        deadline = time.monotonic() + 30
        removals: list[dict[str, Any]] = []
        while not removals:
            assert time.monotonic() < deadline, "no TTL removal of the record after the restart"
            time.sleep(0.2)
            removals = [
                r
                for r in _read_on(port, arn, {}, set())
                if r["eventName"] == "REMOVE" and kept.id in json.dumps(r["dynamodb"]["Keys"])
            ]
        assert [(r.get("userIdentity") or {}).get("Type") for r in removals] == ["Service"]
    finally:
        code, stderr = again.stop(signal.SIGTERM)
    assert code == 0, stderr


def test_a_delete_that_a_restart_cuts_between_any_two_steps_ends_with_the_session_gone(
    tmp_path: Path,
) -> None:
    """The server restarts before each call of a delete in turn (the delete's client goes on
    after it, as the SDK does once the server answers again): every delete answers, leaves
    no entry, and the change feed reports each session's ``session.deleted`` once. Before,
    a restart after the delete's first step left the session in place though the delete
    answered (its lease gone), or gone with no ``session.deleted``."""
    from sandbox_ledger import LedgerEntry
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    argv = ["--data", "dev.jsonl", "--port", str(port), "--strict"]
    server = [Local(*argv, cwd=tmp_path)]

    def restart() -> None:
        code, stderr = server[0].stop(signal.SIGTERM)
        assert code == 0, stderr
        server[0] = Local(*argv, cwd=tmp_path)

    def session(sid: str) -> SyncDynamoDBAdapter:
        ledger = SyncDynamoDBAdapter("sandbox-ledger", endpoint_url=url, region_name="us-east-1")
        for step, event in enumerate(["sandbox.created", "exec.complete", "exec.complete"]):
            ledger.append(
                LedgerEntry(ts=10 + step, name="job", sandbox_id=sid, step_index=step, event=event)
            )
        return ledger

    try:
        probe, calls = session("probe"), []
        probe.client().meta.events.register(
            "before-call.dynamodb", lambda model, **_: calls.append(model.name)
        )
        probe.delete_sandbox("job", "probe")
        probe.close()
        assert calls[0] == "UpdateItem" and calls[-1] == "DeleteItem"
        for cut in range(1, len(calls)):
            ledger, made = session(f"s{cut}"), [0]

            def restart_before(
                model: Any, cut: int = cut, made: list[int] = made, **_: Any
            ) -> None:
                if made[0] == cut:
                    restart()
                made[0] += 1

            ledger.client().meta.events.register("before-call.dynamodb", restart_before)
            ledger.delete_sandbox("job", f"s{cut}")
            assert ledger.read_all("job", f"s{cut}") == [], calls[cut]
            ledger.close()
        reader = SyncDynamoDBAdapter("sandbox-ledger", endpoint_url=url, region_name="us-east-1")
        deleted: list[str] = []
        wanted = {"probe", *(f"s{cut}" for cut in range(1, len(calls)))}

        def read() -> None:
            for change in reader.changes():
                if change.kind.value == "session.deleted":
                    deleted.append(change.sandbox_id)
                if set(deleted) >= wanted:
                    return

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        thread.join(60)
        assert sorted(deleted) == sorted(wanted)
        reader.close()
    finally:
        code, stderr = server[0].stop(signal.SIGTERM)
    assert code == 0, stderr
