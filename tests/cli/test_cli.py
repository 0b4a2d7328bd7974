"""Every CLI command through typer's runner, against the test moto server."""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
from typer.testing import CliRunner

from resources.resource_fixtures import observed_earlier, record
from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger.cli import app
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.resources import SyncResourceRecordStore


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("SANDBOX_LEDGER_TABLE", raising=False)
    return CliRunner()


@pytest.fixture
def args(moto_endpoint: str, sync_table: str) -> list[str]:
    return ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]


@pytest.fixture
def ledger(
    moto_endpoint: str, sync_table: str, wait_for_indexes: Callable[[], None]
) -> SyncDynamoDBAdapter:
    """The ledger the tests read, settled: its listings show every session (index lag waited
    out)."""
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    for sid, closed in [("sb-1", True), ("sb-2", False)]:
        adapter.append(
            LedgerEntry(
                ts=1000 if sid == "sb-1" else 2000,
                name="job",
                sandbox_id=sid,
                step_index=-1,
                event=LedgerEvent.SandboxCreated,
            )
        )
        adapter.append(
            LedgerEntry(
                ts=3000,
                name="job",
                sandbox_id=sid,
                step_index=0,
                event=LedgerEvent.ExecComplete,
                branch=1,
                payload={"stdout": "x" * 500},
            )
        )
        adapter.append(
            LedgerEntry(
                ts=3500,
                name="job",
                sandbox_id=sid,
                step_index=-1,
                event=LedgerEvent.CheckpointCreated,
                payload={"snapshotId": f"snap-{sid}", "name": "first"},
            )
        )
        if closed:
            adapter.append(
                LedgerEntry(
                    ts=4000,
                    name="job",
                    sandbox_id=sid,
                    step_index=-1,
                    event=LedgerEvent.SandboxClosed,
                )
            )
    wait_for_indexes()
    return adapter


def test_table_create_is_idempotent(runner: CliRunner, moto_endpoint: str) -> None:
    base = ["--table", "cli-made", "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    first = runner.invoke(app, [*base, "table", "create"])
    second = runner.invoke(app, [*base, "table", "create"])
    assert first.exit_code == 0 and "created" in first.output
    assert second.exit_code == 0 and "already exists" in second.output


def test_ls_with_filters(runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter) -> None:
    result = runner.invoke(app, [*args, "ls", "--output", "table"])
    assert result.exit_code == 0, result.output
    assert result.output.index("sb-2") < result.output.index("sb-1")  # newest first
    assert "2 session(s)" in result.output
    running = runner.invoke(app, [*args, "ls", "--status", "running"])
    assert "sb-2" in running.output and "sb-1" not in running.output
    before = runner.invoke(app, [*args, "ls", "--name", "job", "--before", "2000", "--limit", "5"])
    assert "sb-1" in before.output and "sb-2" not in before.output
    other = runner.invoke(app, [*args, "ls", "--name", "other", "--output", "table"])
    assert "0 session(s)" in other.output


def test_show_checkpoints_envs(
    runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter
) -> None:
    shown = runner.invoke(app, [*args, "show", "job", "sb-1", "--output", "table"])
    assert shown.exit_code == 0
    assert "exec.complete" in shown.output and "…" in shown.output  # payload truncated
    lines = runner.invoke(app, [*args, "show", "job", "sb-1", "--json"]).output.splitlines()
    assert [json.loads(x)["event"] for x in lines] == [
        "sandbox.created",
        "exec.complete",
        "sandbox.checkpoint_created",
        "sandbox.closed",
    ]
    assert json.loads(lines[1]) == ledger.read_all("job", "sb-1")[1].wire()
    ck = runner.invoke(app, [*args, "checkpoints", "job", "sb-1", "--output", "table"])
    assert "snap-sb-1" in ck.output and "1 checkpoint(s)" in ck.output
    from sandbox_ledger import EnvironmentRecord

    ledger.save_environment(
        EnvironmentRecord.model_validate({"name": "py", "builtAt": 5, "snapshotId": "s-py"})
    )
    envs = runner.invoke(app, [*args, "envs"])
    assert "py" in envs.output and "s-py" in envs.output


def test_rm_asks_first(runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter) -> None:
    declined = runner.invoke(app, [*args, "rm", "job", "sb-1"], input="n\n")
    assert declined.exit_code != 0 and ledger.get_sandbox_details("job", "sb-1") is not None
    accepted = runner.invoke(app, [*args, "rm", "job", "sb-1"], input="y\n")
    assert accepted.exit_code == 0 and ledger.read_all("job", "sb-1") == []
    forced = runner.invoke(app, [*args, "rm", "job", "sb-2", "--yes"])
    assert forced.exit_code == 0 and ledger.read_all("job", "sb-2") == []


def test_export_import_round_trip_is_idempotent(
    runner: CliRunner,
    args: list[str],
    ledger: SyncDynamoDBAdapter,
    moto_endpoint: str,
    tmp_path: Path,
) -> None:
    dump = tmp_path / "all.jsonl"
    exported = runner.invoke(app, [*args, "export", "-o", str(dump)])
    assert exported.exit_code == 0, exported.output
    lines = dump.read_text().splitlines()
    assert len(lines) == 7
    one = runner.invoke(app, [*args, "export", "--name", "job", "--sandbox-id", "sb-2"])
    assert len([x for x in one.stdout.splitlines() if x.startswith("{")]) == 3
    target = ["--table", "cli-import", "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    assert runner.invoke(app, [*target, "table", "create"]).exit_code == 0
    for _ in range(2):
        imported = runner.invoke(app, [*target, "import", str(dump)])
        assert imported.exit_code == 0, imported.output
    copy = SyncDynamoDBAdapter("cli-import", endpoint_url=moto_endpoint)
    for sid in ("sb-1", "sb-2"):
        assert copy.read_all("job", sid) == ledger.read_all("job", sid)
        assert copy.get_sandbox_details("job", sid) == ledger.get_sandbox_details("job", sid)


def test_import_reports_malformed_lines(
    runner: CliRunner, args: list[str], ledger: SyncDynamoDBAdapter, tmp_path: Path
) -> None:
    good = {
        "ts": 9000,
        "name": "imp",
        "sandboxId": "x",
        "stepIndex": -1,
        "event": "sandbox.created",
    }
    path = tmp_path / "mixed.jsonl"
    path.write_text(
        "\n".join(
            [
                json.dumps(good),
                "{not json",
                json.dumps({**good, "ts": -5, "event": "exec.started"}),
                json.dumps({**good, "ts": 9001, "event": "exec.complete"}),
            ]
        )
        + "\n"
    )
    result = runner.invoke(app, [*args, "import", str(path)])
    assert result.exit_code == 4  # partly failed: the valid lines are kept
    assert f"{path}:2:" in result.output and f"{path}:3:" in result.output
    assert "ts" in result.output
    stored = ledger.read_all("imp", "x")
    assert [e.event for e in stored] == ["sandbox.created", "exec.complete"]


def test_resources_ls_and_sweep(
    runner: CliRunner,
    args: list[str],
    moto_endpoint: str,
    sync_table: str,
    event_bus: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    stored = store.put(record(age=timedelta(hours=1)))
    stale = stored.record
    observed_earlier(store, stored, timedelta(minutes=16))  # by an earlier sweep
    fresh = store.put(record(provider="vercel")).record
    wait_for_indexes()  # settled listings (index lag waited out)
    listed = runner.invoke(app, [*args, "resources", "ls"])
    assert stale.id in listed.output and fresh.id in listed.output
    only = runner.invoke(app, [*args, "resources", "ls", "--provider", "vercel"])
    assert fresh.id in only.output and stale.id not in only.output
    # A table made by create_table() describes no deployment: the operator must say where
    # the notices go and which windows apply, or the sweep refuses.
    refused = runner.invoke(app, [*args, "resources", "sweep", "--dry-run"])
    assert refused.exit_code == 2 and "--event-bus" in refused.output, refused.output
    explicit = ["--event-bus", event_bus, "--stale-after", "900", "--retain-failed", "604800"]
    dry = runner.invoke(app, [*args, "resources", "sweep", "--dry-run", *explicit])
    assert dry.exit_code == 0 and f"would expire {stale.id}" in dry.output
    assert store.get(stale.id) is not None
    real = runner.invoke(app, [*args, "resources", "sweep", *explicit])
    assert real.exit_code == 0 and f"expired {stale.id}" in real.output, real.output
    assert store.get(stale.id) is None and store.get(fresh.id) is not None


def test_resources_sweep_uses_the_deployments_bus_and_windows(
    runner: CliRunner,
    args: list[str],
    moto_endpoint: str,
    sync_table: str,
    wait_for_indexes: Callable[[], None],
) -> None:
    """A deployed table's descriptor names its bus and windows: the CLI's sweep publishes
    there (never to the account's default bus) and refuses flags that disagree."""
    import boto3

    from sandbox_ledger.deployment import TableDescriptor, descriptor_item
    from sandbox_ledger.resources import DETAIL_TYPE, SOURCE

    dynamodb = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    bus = f"deployed-{sync_table}"
    deployed = TableDescriptor(
        shard_count=4, event_bus_name=bus, stale_after_seconds=1800, retain_failed_seconds=0
    )
    dynamodb.put_item(TableName=sync_table, Item=descriptor_item(deployed))
    events = boto3.client("events", endpoint_url=moto_endpoint)
    sqs = boto3.client("sqs", endpoint_url=moto_endpoint)
    events.create_event_bus(Name=bus)
    queues = {}
    for name in (bus, "default"):
        url = sqs.create_queue(QueueName=f"q-{name}")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        pattern = json.dumps({"source": [SOURCE], "detail-type": [DETAIL_TYPE]})
        events.put_rule(Name=f"r-{sync_table}", EventBusName=name, EventPattern=pattern)
        events.put_targets(
            Rule=f"r-{sync_table}", EventBusName=name, Targets=[{"Id": "q", "Arn": arn}]
        )
        queues[name] = url
    store = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    stored = store.put(record(age=timedelta(hours=1)))
    stale = stored.record
    observed_earlier(store, stored, timedelta(minutes=31))  # unchanged for more than 1800 s
    inside = store.put(record(age=timedelta(hours=1)))
    inside_window = inside.record
    observed_earlier(store, inside, timedelta(minutes=20))  # unchanged for less than 1800 s
    # Past the default 7-day retention, but this deployment keeps failed records forever.
    kept = store.put(record(age=timedelta(days=10), phase="cleanup-failed")).record
    wait_for_indexes()  # about what a sweep of settled indexes does

    mismatch = runner.invoke(app, [*args, "resources", "sweep", "--event-bus", "default"])
    assert mismatch.exit_code == 2 and "'default'" in mismatch.output and bus in mismatch.output
    assert store.get(stale.id) is not None

    result = runner.invoke(app, [*args, "resources", "sweep"])
    assert result.exit_code == 0 and f"expired {stale.id}" in result.output, result.output
    assert {store.get(i) is not None for i in (inside_window.id, kept.id)} == {True}
    got = sqs.receive_message(QueueUrl=queues[bus], MaxNumberOfMessages=10).get("Messages", [])
    assert [json.loads(m["Body"])["detail"]["record"]["id"] for m in got] == [stale.id]
    assert sqs.receive_message(QueueUrl=queues["default"]).get("Messages", []) == []
    wrong_shards = runner.invoke(app, [*args, "--shard-count", "8", "resources", "ls"])
    assert wrong_shards.exit_code == 2 and "shard_count" in wrong_shards.output


def test_errors_are_one_line_without_traceback(runner: CliRunner, moto_endpoint: str) -> None:
    base = ["--table", "does-not-exist", "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    result = runner.invoke(app, [*base, "ls"])
    assert result.exit_code == 3  # not found
    assert result.stderr.strip().startswith("error:") and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert result.stderr.strip() == (
        f"error: table does-not-exist not found in region us-east-1 at endpoint {moto_endpoint}; "
        "create it with `sandbox-ledger --table does-not-exist table create` (or deploy the stack)"
    )
    debug = runner.invoke(app, [*base, "--debug", "ls"])
    assert debug.exit_code == 1 and debug.exception is not None
    bad_status = runner.invoke(app, [*base, "ls", "--status", "paused"])
    assert bad_status.exit_code == 2 and "paused" in bad_status.output
    empty = runner.invoke(app, [*base, "show", "", "x"])
    assert empty.exit_code == 2 and "name" in empty.output
    missing = runner.invoke(app, [*base, "import", "/no/such/file.jsonl"])
    assert missing.exit_code == 2


def test_no_table_configured_is_a_usage_error(runner: CliRunner) -> None:
    """No throwaway database passed off as the user's: only the demo runs on one."""
    result = runner.invoke(app, ["ls"])
    assert result.exit_code == 2, result.output
    [line] = result.output.strip().splitlines()
    assert "no table or store configured" in line and "sandbox-ledger local" in line


def test_demo_runs_end_to_end(runner: CliRunner) -> None:
    result = runner.invoke(app, ["demo", "--sandboxes", "6", "--execs", "3", "--concurrency", "6"])
    assert result.exit_code == 0, result.output
    for part in (
        "Operations",
        "Sessions",
        "Expired resource records",
        "append",
        "sandbox_ledger.handlers.expire_stale_resources",
    ):
        assert part in result.output
    assert "records expired" in result.output
    # It explains itself: what skipped means, that the sweeper's clock is simulated and by
    # how much, and each expired record's provider and phase.
    assert "(owners still heartbeating, or failed cleanups kept for attention)" in result.output
    assert "The sweeper's clock is simulated" in result.output
    assert "clock 15 minutes later (one window)" in result.output
    assert "docker" in result.output or "vercel" in result.output
    # Three images among six sandboxes: each built once, then reused.
    assert "environments built 3, reused 3" in result.output


def test_a_table_made_by_table_create_can_be_swept_without_flags(
    runner: CliRunner, moto_endpoint: str, table_name: str, wait_for_indexes: Callable[[], None]
) -> None:
    """`table create` records the sweep's bus and windows (flags to choose them); a dry run
    observes as a real run would, so a later dry run reports what a real run then expires;
    a sweep says when the records it watches expire."""
    import boto3

    from sandbox_ledger import keys as k
    from sandbox_ledger.resources import _items as ri

    args = ["--table", table_name, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    made = runner.invoke(app, [*args, "table", "create", "--stale-after", "60"])
    assert made.exit_code == 0, made.output
    assert "resource sweep: bus default, live records expire 60 s without heartbeat" in made.output
    store = SyncResourceRecordStore(table_name, endpoint_url=moto_endpoint)
    stale = store.put(record(age=timedelta(hours=1))).record
    wait_for_indexes()  # the sweep's index has the record (index lag waited out)
    first = json.loads(
        runner.invoke(app, [*args, "resources", "sweep", "--dry-run", "--json"]).stdout
    )
    assert first["expired"] == [] and first["observed"] == [stale.id], first
    assert list(first["due"]) == [stale.id]
    shown = runner.invoke(app, [*args, "resources", "sweep", "--dry-run"])
    assert "0 would expire" in shown.output and "1 record(s) unchanged since" in shown.output
    # The window passes with the record unchanged: its observation is a minute older.
    observed = store.get_versioned(stale.id)
    assert observed is not None and observed.observed_at_ms is not None
    boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1").update_item(
        TableName=table_name,
        Key=ri.record_key(stale.id),
        UpdateExpression="SET #oat = :at",
        ExpressionAttributeNames={"#oat": k.OBSERVED_AT},
        ExpressionAttributeValues={":at": {"N": str(observed.observed_at_ms - 61_000)}},
    )
    second = runner.invoke(app, [*args, "resources", "sweep", "--dry-run", "--json"])
    assert json.loads(second.stdout)["expired"] == [stale.id], second.output
    assert store.get(stale.id) is not None  # a dry run changes nothing the owner relies on
    store.touch(stale.id)  # the owner writes: the observation is void, as in a real run
    third = runner.invoke(app, [*args, "resources", "sweep", "--json"])
    assert json.loads(third.stdout)["expired"] == [], third.output
    assert store.get(stale.id) is not None
    again = runner.invoke(app, [*args, "table", "create", "--stale-after", "30"])
    assert again.exit_code == 2 and "--stale-after: 30 was given" in again.output, again.output


def test_a_table_without_sweep_settings_is_refused_naming_every_flag_then_completed(
    runner: CliRunner, args: list[str], moto_endpoint: str, sync_table: str
) -> None:
    """A table made by the library's create_table() records no sweep settings: the sweep
    names the three flags in one line; `table create` adds them and keeps the rest."""
    refused = runner.invoke(app, [*args, "resources", "sweep"])
    assert refused.exit_code == 2
    assert "give --event-bus and --stale-after and --retain-failed" in refused.stderr
    assert "event_bus_name" not in refused.output
    made = runner.invoke(app, [*args, "table", "create", "--retain-failed", "0"])
    assert made.exit_code == 0 and "already exists" in made.output, made.output
    assert "failed ones never" in made.output
    swept = runner.invoke(app, [*args, "resources", "sweep"])
    assert swept.exit_code == 0 and "0 expired" in swept.output, swept.output
