"""``make test-aws`` and ``make test-aws-clean`` (:mod:`sandbox_ledger.awstest`), their code
path run here against the session's embedded server (strict) in place of AWS: the refusals,
a run that passes, one that fails, one stopped by Ctrl-C or SIGTERM, each leaving no table;
the clean-up by tag; the meter, the stream renewal and the wait for the indexes."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import boto3
import pytest

from sandbox_ledger import keys as k
from sandbox_ledger.awstest import meter, runtable
from sandbox_ledger.awstest.runtable import RUN_TAG, TABLE_PREFIX, RunTable

ROOT = Path(__file__).resolve().parents[2]
AWSTEST = (sys.executable, "-m", "sandbox_ledger.awstest")
# A conformance test that reads the table's stream (a new stream each time) and its entries.
ONE_TEST = ("--suite", "conformance", "--", "-k", "Sync and changes_created_closed_and_deleted")

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("SANDBOX_LEDGER_TEST_TABLE")), reason="a run does not run itself"
)


def shell(tmp_path: Path, **extra: str) -> dict[str, str]:
    """A plain shell with the embedded server's credentials and a region, and no AWS file of
    the machine's (an empty config and credentials file, no instance metadata)."""
    (tmp_path / "aws-config").write_text("")
    env = {
        "HOME": str(tmp_path),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "AWS_CONFIG_FILE": str(tmp_path / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-config"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "SANDBOX_LEDGER_AWS_TESTS": "1",
        **extra,
    }
    return {name: value for name, value in env.items() if value}


def awstest(
    endpoint: str, env: dict[str, str], *args: str, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*AWSTEST, "--endpoint-url", endpoint, *args],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def run_tables(endpoint: str) -> list[str]:
    client = boto3.client("dynamodb", endpoint_url=endpoint)
    names = [n for p in client.get_paginator("list_tables").paginate() for n in p["TableNames"]]
    return [name for name in names if name.startswith(TABLE_PREFIX)]


def made_and_deleted(said: str) -> str:
    """The run's table name, checked to be said created and then deleted."""
    made = re.search(rf"creating table ({TABLE_PREFIX}[0-9a-f-]+) \(", said)
    assert made is not None, said
    assert f"deleted table {made.group(1)}" in said, said
    return made.group(1)


def running(argv: list[str], env: dict[str, str], said: str) -> tuple[subprocess.Popen[str], str]:
    """A run started in a session of its own (a terminal's Ctrl-C is sent to its group),
    and what it said on stderr up to the line holding ``said`` (within 120 s)."""
    process = subprocess.Popen(
        argv,
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stderr is not None
    seen = ""
    deadline = time.monotonic() + 120
    while said not in seen:
        line = process.stderr.readline()
        assert line and time.monotonic() < deadline, seen
        seen += line
    return process, seen


@pytest.fixture
def no_run_table(moto_endpoint: str) -> Any:
    """No run's table before the test (an earlier test's leftover would be counted) nor
    after it."""
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    for name in run_tables(moto_endpoint):
        runtable.delete_table(client, name)
    yield
    assert run_tables(moto_endpoint) == []


# -- refusals -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "reason"),
    [
        ({"SANDBOX_LEDGER_AWS_TESTS": ""}, "set SANDBOX_LEDGER_AWS_TESTS=1 to run it"),
        ({"SANDBOX_LEDGER_AWS_TESTS": "yes"}, "set SANDBOX_LEDGER_AWS_TESTS=1 to run it"),
        ({"AWS_ACCESS_KEY_ID": "", "AWS_SECRET_ACCESS_KEY": ""}, "no AWS credentials resolve"),
        ({"AWS_DEFAULT_REGION": ""}, "no AWS region: set AWS_DEFAULT_REGION"),
    ],
    ids=["no opt-in", "opt-in not 1", "no credentials", "no region"],
)
@pytest.mark.parametrize("command", ["run", "clean"])
def test_a_run_or_clean_up_without_opt_in_credentials_or_region_refuses_and_makes_nothing(
    moto_endpoint: str,
    tmp_path: Path,
    no_run_table: None,
    command: str,
    extra: dict[str, str],
    reason: str,
) -> None:
    done = awstest(moto_endpoint, shell(tmp_path, **extra), command, timeout=60)
    assert done.returncode == 2, done.stderr
    assert reason in done.stderr and "refused" in done.stderr, done.stderr
    assert "account 1" not in done.stderr and "creating" not in done.stderr, done.stderr


def test_a_run_whose_credentials_sts_refuses_says_so(moto_endpoint: str, tmp_path: Path) -> None:
    """Credentials that resolve but do not work: STS's answer, before anything is made (here
    an endpoint where nothing listens)."""
    done = awstest("http://127.0.0.1:9", shell(tmp_path), "run", timeout=120)
    assert done.returncode == 2 and "STS refuses the credentials" in done.stderr, done.stderr


def test_an_unknown_suite_is_refused_naming_the_suites(moto_endpoint: str, tmp_path: Path) -> None:
    done = awstest(moto_endpoint, shell(tmp_path), "run", "--suite", "nope", timeout=60)
    assert done.returncode == 2, done.stderr
    assert "--suite 'nope': no suite of that name" in done.stderr and "'conformance'" in done.stderr


# -- runs ---------------------------------------------------------------------------------------


def test_a_run_says_where_and_what_it_costs_runs_the_suite_and_deletes_its_table(
    moto_endpoint: str, tmp_path: Path, no_run_table: None
) -> None:
    done = awstest(moto_endpoint, shell(tmp_path), "run", *ONE_TEST)
    assert done.returncode == 0, done.stderr + done.stdout
    said = done.stderr
    assert "account 123456789012 (arn:aws:sts::123456789012:" in said and "region us-east-1" in said
    assert re.search(r"estimate: about [\d,]+ read and [\d,]+ write request units", said), said
    assert re.search(r"\[1/1\] conformance: passed in \d+ s; [\d,.]+ read", said), said
    bill = re.search(
        r"consumed: ([\d,.]+) read and ([\d,.]+) write request units, (\d+) stream", said
    )
    assert bill is not None, said
    reads, writes, streams = (float(x.replace(",", "")) for x in bill.groups())
    assert reads > 0 and writes > 0 and streams > 0, said  # the test read the new stream
    assert " passed" in done.stdout and "failed" not in done.stdout, done.stdout
    made_and_deleted(said)
    assert said.rstrip().endswith("make test-aws: every suite passed")


def test_a_run_whose_suite_fails_exits_1_and_still_deletes_its_table(
    moto_endpoint: str, tmp_path: Path, no_run_table: None
) -> None:
    """A selection that runs nothing fails its suite (pytest's exit 5), as a failed test
    does: the run says which suite failed, exits 1, and the table is gone all the same."""
    done = awstest(
        moto_endpoint, shell(tmp_path), "run", "--suite", "follow", "--", "-k", "no_such_test"
    )
    assert done.returncode == 1, done.stderr
    assert "[1/1] follow and changes: FAILED (pytest exit 5)" in done.stderr, done.stderr
    made_and_deleted(done.stderr)
    assert done.stderr.rstrip().endswith("make test-aws: failed: follow and changes")


@pytest.mark.parametrize(
    ("signum", "group"), [(signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGINT, False)]
)
def test_a_run_stopped_while_a_suite_runs_deletes_its_table(
    moto_endpoint: str, tmp_path: Path, no_run_table: None, signum: int, group: bool
) -> None:
    """Ctrl-C (SIGINT to the whole process group, as a terminal sends it), SIGTERM to the run
    alone, or SIGINT to it alone, while a suite's pytest runs: the run stops that pytest,
    deletes the table and exits with 128 plus the signal."""
    process, seen = running(
        [*AWSTEST, "--endpoint-url", moto_endpoint, "run", *ONE_TEST[:2], "--", "-k", "Sync"],
        shell(tmp_path),
        "[1/1] conformance",
    )
    time.sleep(8)  # pytest collects, then runs the suite's first tests
    if group:
        os.killpg(process.pid, signum)
    else:
        process.send_signal(signum)
    _, rest = process.communicate(timeout=120)
    said = seen + rest
    assert process.returncode == 128 + signum, said
    assert f"{signal.Signals(signum).name}: stopping the run" in said, said
    made_and_deleted(said)
    # The stop came while the suite's pytest ran: the run never said how it ended.
    assert "conformance: passed" not in said and "conformance: FAILED" not in said, said


def test_the_clean_up_deletes_the_tables_runs_left_by_tag_sparing_young_ones(
    moto_endpoint: str, tmp_path: Path, no_run_table: None
) -> None:
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    old = datetime.now(UTC) - timedelta(hours=5)
    tables = {
        "old": (TABLE_PREFIX + "old", runtable.run_tags("old", old)),
        "young": (TABLE_PREFIX + "young", runtable.run_tags("young")),
        "untagged": (TABLE_PREFIX + "untagged", []),
        "other": (f"not-a-run-{uuid.uuid4().hex[:6]}", runtable.run_tags("other", old)),
    }
    for name, tags in tables.values():
        client.create_table(**k.table_definition(name), **({"Tags": tags} if tags else {}))
    try:
        done = awstest(moto_endpoint, shell(tmp_path), "clean", timeout=120)
        assert done.returncode == 0, done.stderr
        assert f"deleted {TABLE_PREFIX}old (run old)" in done.stderr, done.stderr
        assert re.search(
            rf"kept {TABLE_PREFIX}young \(run young\): made 0 h \d+ min ago", done.stderr
        )
        left = set(run_tables(moto_endpoint))
        assert left == {TABLE_PREFIX + "young", TABLE_PREFIX + "untagged"}
        done = awstest(moto_endpoint, shell(tmp_path), "clean", "--min-age", "0", timeout=120)
        assert done.returncode == 0 and f"deleted {TABLE_PREFIX}young" in done.stderr
        assert set(run_tables(moto_endpoint)) == {TABLE_PREFIX + "untagged"}  # not a run's
        done = awstest(moto_endpoint, shell(tmp_path), "clean", timeout=120)
        assert done.returncode == 0 and "no table of a test run found" in done.stderr
        bad = awstest(moto_endpoint, shell(tmp_path), "clean", "--min-age", "-1", timeout=60)
        assert bad.returncode == 2 and "--min-age: a number of hours" in bad.stderr
    finally:
        for name, _ in tables.values():
            runtable.delete_table(client, name)


# -- the parts ----------------------------------------------------------------------------------


def test_the_meter_sums_consumed_units_of_each_client_and_prices_them(
    moto_endpoint: str, sync_table: str
) -> None:
    watched = meter.Meter()
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    watched.watch(client)
    item = {k.PARTITION_KEY: {"S": "meter"}, k.SORT_KEY: {"S": "1"}, "x": {"S": "y" * 3500}}
    client.put_item(TableName=sync_table, Item=item)  # 3,511 bytes: 4 write units
    client.get_item(TableName=sync_table, Key={n: item[n] for n in (k.PARTITION_KEY, k.SORT_KEY)})
    with pytest.raises(client.exceptions.ConditionalCheckFailedException):
        client.put_item(
            TableName=sync_table, Item=item, ConditionExpression="attribute_not_exists(PK)"
        )
    totals = watched.totals()
    assert totals["calls"] == {"PutItem": 2, "GetItem": 1} and totals["failed"] == {"PutItem": 1}
    # The failed write's unit is charged but not reported; an eventually consistent read of
    # up to 4 KB is half a unit.
    assert totals["writeUnits"] == 4 and totals["readUnits"] == 0.5, totals
    assert meter.dollars(1e6, 1e6, 1e6) == pytest.approx(0.125 + 0.625 + 0.2)


def test_a_renewed_stream_is_new_and_empty_and_the_wait_for_indexes_sees_writes(
    moto_endpoint: str, sync_table: str
) -> None:
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    table = RunTable(client, sync_table)
    entry = {k.PARTITION_KEY: {"S": "s"}, k.SORT_KEY: {"S": "1"}}
    client.put_item(TableName=sync_table, Item=entry)
    before = client.describe_table(TableName=sync_table)["Table"]["LatestStreamArn"]
    after = table.renew_stream()
    assert after != before
    streams = boto3.client("dynamodbstreams", endpoint_url=moto_endpoint)
    shards = streams.describe_stream(StreamArn=after)["StreamDescription"]["Shards"]
    for shard in shards:
        iterator = streams.get_shard_iterator(
            StreamArn=after, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        assert streams.get_records(ShardIterator=iterator)["Records"] == []
    # An item with the list-all index's keys: the wait returns once the index shows it.
    index = k.INDEXES[0]
    kinds = k.KEY_ATTRIBUTE_TYPES
    listed = {
        **entry,
        index.partition_key: {kinds[index.partition_key]: "wait-shard"},
        index.sort_key: {kinds[index.sort_key]: "9"},
    }
    client.put_item(TableName=sync_table, Item=listed)
    table.wait_for_indexes(timeout=30)
    shown = client.query(
        TableName=sync_table,
        IndexName=index.name,
        KeyConditionExpression="#p = :p",
        ExpressionAttributeNames={"#p": index.partition_key},
        ExpressionAttributeValues={":p": {"S": "wait-shard"}},
    )["Items"]
    assert len(shown) == 1


@pytest.mark.parametrize("target", ["test-aws", "test-aws-clean"])
def test_the_make_targets_refuse_in_a_plain_shell(tmp_path: Path, target: str) -> None:
    """`make test-aws` and `make test-aws-clean` in a shell where nothing is set: refused,
    exit 2 (make says its recipe failed), nothing reached (this venv's python; no
    reinstall: the venv's stamp is left out)."""
    env = shell(tmp_path, SANDBOX_LEDGER_AWS_TESTS="")
    bin_dir = str(Path(sys.executable).parent)
    done = subprocess.run(
        ["make", "-s", target, "STAMP=", f"BIN={bin_dir}"],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "refused" in done.stderr and "set SANDBOX_LEDGER_AWS_TESTS=1" in done.stderr


def test_a_signal_during_the_deletion_waits_for_it(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, no_run_table: None
) -> None:
    """SIGTERM and SIGINT sent while the table is being deleted are ignored until it is gone
    (a second Ctrl-C must not leave the table behind); the run's own handlers come back."""
    from sandbox_ledger.awstest import run as running
    from sandbox_ledger.awstest.suites import Suite

    deleting = RunTable.delete
    said: list[str] = []

    def delete(self: RunTable, **kwargs: Any) -> bool:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        return deleting(self, **kwargs)

    monkeypatch.setattr(RunTable, "delete", delete)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    nothing = Suite("nothing", ("tests/deploy/test_aws_run.py", "-k", "no_such_test"))
    code = running.run(
        {**os.environ, "SANDBOX_LEDGER_AWS_TESTS": "1"},
        (nothing,),
        endpoint_url=moto_endpoint,
        say=said.append,
    )
    assert code == 1, said  # the suite ran nothing; the signals changed nothing
    made_and_deleted("\n".join(said))
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_run_table_is_made_as_the_construct_makes_its_table_and_reset_as_a_fresh_one(
    moto_endpoint: str, no_run_table: None
) -> None:
    from sandbox_ledger import LedgerEntry, LedgerEvent
    from sandbox_ledger.deployment import read_descriptor
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    table = RunTable(client, TABLE_PREFIX + runtable.new_run_id())
    table.create("the-run")
    try:
        info = client.describe_table(TableName=table.name)["Table"]
        assert info["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
        assert info["StreamSpecification"] == {
            "StreamEnabled": True,
            "StreamViewType": "NEW_AND_OLD_IMAGES",
        }
        ttl = client.describe_time_to_live(TableName=table.name)["TimeToLiveDescription"]
        assert ttl["TimeToLiveStatus"] == "ENABLED" and ttl["AttributeName"] == k.TTL_ATTRIBUTE
        tags = client.list_tags_of_resource(ResourceArn=info["TableArn"])["Tags"]
        assert {tag["Key"]: tag["Value"] for tag in tags}[RUN_TAG] == "the-run"
        first = read_descriptor(client, table.name)
        assert first is not None and first.shard_count == k.DEFAULT_SHARD_COUNT
        with SyncDynamoDBAdapter(table.name, endpoint_url=moto_endpoint) as adapter:
            adapter.append(
                LedgerEntry(
                    ts=1, name="n", sandbox_id="s", step_index=-1, event=LedgerEvent.SandboxCreated
                )
            )
        table.reset(new_stream=False)
        again = read_descriptor(client, table.name)
        assert again is not None and again.store_id != first.store_id  # a fresh identity
        items = client.scan(TableName=table.name, ConsistentRead=True)["Items"]
        assert [item[k.PARTITION_KEY]["S"] for item in items] == [k.DESCRIPTOR_PK]
        table.reset(new_stream=False, descriptor=False)
        assert client.scan(TableName=table.name, ConsistentRead=True)["Items"] == []
    finally:
        table.delete()
