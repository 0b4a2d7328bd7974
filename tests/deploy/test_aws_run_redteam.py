"""Red-team checks of ``make test-aws`` (:mod:`sandbox_ledger.awstest`): what DynamoDB does that
the embedded server does not (a table CREATING or UPDATING refuses DeleteTable; a table listed
may be gone when it is described), and a second signal while a run stops."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sandbox_ledger.awstest import runtable
from sandbox_ledger.awstest.runtable import RUN_TAG, TABLE_PREFIX

from .test_aws_run import AWSTEST, running

pytestmark = pytest.mark.skipif(
    bool(os.environ.get("SANDBOX_LEDGER_TEST_TABLE")), reason="a run does not run itself"
)


@pytest.fixture
def no_run_table(moto_endpoint: str) -> Any:
    """No run's table before the test nor after it."""
    import boto3

    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)

    def tables() -> list[str]:
        pages = client.get_paginator("list_tables").paginate()
        return [n for p in pages for n in p["TableNames"] if n.startswith(TABLE_PREFIX)]

    for name in tables():
        runtable.delete_table(client, name)
    yield
    assert tables() == []


def _error(code: str, operation: str) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code}}, operation)


class _Busy:
    """A DynamoDB client as DynamoDB answers for a table still CREATING (or UPDATING) for its
    first ``busy`` calls: DeleteTable refuses it with ResourceInUseException
    (the DeleteTable reference: "If a table is in CREATING or UPDATING states, then DynamoDB
    returns a ResourceInUseException"), then deletes it."""

    def __init__(self, busy: int, status: str) -> None:
        self.busy = busy
        self.status = status
        self.deleted = False
        self.deletes = 0

    def describe_table(self, TableName: str) -> dict[str, Any]:
        if self.deleted:
            raise _error("ResourceNotFoundException", "DescribeTable")
        if self.busy > 0:
            self.busy -= 1
            return {"Table": {"TableName": TableName, "TableStatus": self.status}}
        return {"Table": {"TableName": TableName, "TableStatus": "ACTIVE"}}

    def delete_table(self, TableName: str) -> dict[str, Any]:
        self.deletes += 1
        if self.busy > 0:
            self.busy -= 1
            raise _error("ResourceInUseException", "DeleteTable")
        self.deleted = True
        return {"TableDescription": {"TableName": TableName, "TableStatus": "DELETING"}}


@pytest.mark.parametrize("status", ["CREATING", "UPDATING"])
def test_a_table_still_creating_or_updating_is_deleted_once_it_can_be(
    monkeypatch: pytest.MonkeyPatch, status: str
) -> None:
    """A signal during the creation (the table CREATING on AWS for seconds) or during a stream
    renewal (UPDATING): the run's deletion must wait for the table, not give up and leave it."""
    monkeypatch.setattr(runtable.time, "sleep", lambda seconds: None)
    client = _Busy(3, status)
    assert runtable.delete_table(client, TABLE_PREFIX + "x") is True
    assert client.deleted


def test_a_table_that_stays_busy_past_the_timeout_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = iter(range(0, 10_000, 10))
    monkeypatch.setattr(runtable.time, "sleep", lambda seconds: None)
    monkeypatch.setattr(runtable.time, "monotonic", lambda: float(next(clock)))
    with pytest.raises(ClientError):
        runtable.delete_table(_Busy(10_000, "CREATING"), TABLE_PREFIX + "x", timeout=100)


class _Vanishing:
    """Lists three run tables; one is gone by its DescribeTable, one by its
    ListTagsOfResource (another run's end, or a clean-up elsewhere, deleted them)."""

    def get_paginator(self, name: str) -> Any:
        assert name == "list_tables"
        names = [
            TABLE_PREFIX + "gone-at-describe",
            TABLE_PREFIX + "gone-at-tags",
            TABLE_PREFIX + "kept",
        ]

        class Pages:
            def paginate(self) -> list[dict[str, Any]]:
                return [{"TableNames": names}]

        return Pages()

    def describe_table(self, TableName: str) -> dict[str, Any]:
        if TableName.endswith("gone-at-describe"):
            raise _error("ResourceNotFoundException", "DescribeTable")
        return {"Table": {"TableArn": f"arn:aws:dynamodb:us-east-1:1:table/{TableName}"}}

    def list_tags_of_resource(self, ResourceArn: str) -> dict[str, Any]:
        if ResourceArn.endswith("gone-at-tags"):
            raise _error("ResourceNotFoundException", "ListTagsOfResource")
        return {"Tags": [{"Key": RUN_TAG, "Value": "r"}]}


def test_the_leftovers_pass_by_a_table_deleted_while_they_are_listed() -> None:
    found = runtable.leftovers(_Vanishing())
    assert [table.name for table in found] == [TABLE_PREFIX + "kept"]


def test_a_second_signal_while_the_run_stops_still_ends_it_as_the_first_said(
    moto_endpoint: str, no_run_table: None
) -> None:
    """Ctrl-C pressed twice (or SIGTERM then Ctrl-C): the second comes while the run reports
    the first; the table is deleted and the run ends with 128 + the first signal, not with a
    traceback of an exception raised out of its handler."""
    from sandbox_ledger.awstest import run as running
    from sandbox_ledger.awstest.suites import Suite

    said: list[str] = []

    def say(text: str) -> None:
        said.append(text)
        if text == "[1/1] nothing":  # the table made, the suite about to start
            os.kill(os.getpid(), signal.SIGTERM)
        elif text.startswith("SIGTERM: stopping"):
            os.kill(os.getpid(), signal.SIGINT)

    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    nothing = Suite("nothing", ("tests/deploy/test_aws_run.py", "-k", "no_such_test"))
    code = running.run(
        {**os.environ, "SANDBOX_LEDGER_AWS_TESTS": "1"},
        (nothing,),
        endpoint_url=moto_endpoint,
        say=say,
    )
    assert code == 128 + signal.SIGTERM, said
    assert any(line.startswith("deleted table ") for line in said), said
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before


def test_a_stopped_suite_s_units_are_billed_and_its_pytest_can_write_them(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, no_run_table: None
) -> None:
    """Ctrl-C during a suite: its pytest ends (KeyboardInterrupt) and writes its meter at its
    session's end. The run must let it (the scratch directory still there: it was removed
    before the pytest was waited for, which then failed with FileNotFoundError) and bill what
    the stopped suite consumed (AWS charges it)."""
    import threading

    from sandbox_ledger.awstest import run as running
    from sandbox_ledger.awstest.suites import SUITES

    ending = running._end

    def end(process: Any) -> None:  # the terminal's Ctrl-C reaching the suite's pytest
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        ending(process)

    monkeypatch.setattr(running, "_end", end)
    said: list[str] = []

    def say(text: str) -> None:
        said.append(text)
        if text.startswith("[1/1] ") and " in " not in text:  # the suite starts: stop it
            threading.Timer(8.0, os.kill, (os.getpid(), signal.SIGINT)).start()

    follow = next(suite for suite in SUITES if suite.name == "follow and changes")
    code = running.run(
        {**os.environ, "SANDBOX_LEDGER_AWS_TESTS": "1"},
        (follow,),
        endpoint_url=moto_endpoint,
        say=say,
    )
    assert code == 128 + signal.SIGINT, said
    assert any(line.startswith("deleted table ") for line in said), said
    billed = [line for line in said if line.startswith("consumed: ")]
    assert billed and not billed[0].startswith("consumed: 0.0 read and 0.0 write"), said


@pytest.mark.parametrize(("group", "gone"), [(True, False), (False, False), (True, True)])
def test_a_run_whose_terminal_hangs_up_deletes_its_table(
    moto_endpoint: str, tmp_path: Path, no_run_table: None, group: bool, gone: bool
) -> None:
    """SIGHUP (the terminal closed, an SSH session dropped: a run takes many minutes on AWS)
    to the group or the run alone: the run stops, deletes its table and exits 128 + 1; it
    died at once and left the table. With ``gone`` the terminal is gone too: what the run
    says can no longer be written (EPIPE here, EIO on a hung-up tty), and must not stop the
    deletion."""
    (tmp_path / "aws-config").write_text("")
    env = {
        "HOME": str(tmp_path),
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
        "AWS_CONFIG_FILE": str(tmp_path / "aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "aws-config"),
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "SANDBOX_LEDGER_AWS_TESTS": "1",
    }
    process, seen = running(
        [*AWSTEST, "--endpoint-url", moto_endpoint, "run", "--suite", "follow"],
        {name: value for name, value in env.items() if value},
        "[1/1] follow",
    )
    time.sleep(5)  # pytest collects, then runs the suite's first tests
    if group:
        os.killpg(process.pid, signal.SIGHUP)
    else:
        process.send_signal(signal.SIGHUP)
    if gone:
        process.stderr.close()
        assert process.stdout is not None
        process.stdout.close()
        assert process.wait(timeout=120) == 128 + signal.SIGHUP
        return  # no_run_table: the table was deleted
    _, rest = process.communicate(timeout=120)
    said = seen + rest
    assert process.returncode == 128 + signal.SIGHUP, said
    assert "SIGHUP: stopping the run" in said, said
    assert "deleted table " + TABLE_PREFIX in said, said


def test_a_table_aws_refuses_to_create_fails_the_run_saying_why(
    moto_endpoint: str, monkeypatch: pytest.MonkeyPatch, no_run_table: None
) -> None:
    """CreateTable refused (on an account: no dynamodb:CreateTable, or no dynamodb:TagResource
    for its tags, or the account's table quota): the run says why and exits 1, runs no suite
    and makes nothing - not a traceback out of the run."""
    from sandbox_ledger.awstest import run as running
    from sandbox_ledger.awstest.runtable import RunTable
    from sandbox_ledger.awstest.suites import Suite

    def create(self: RunTable, run_id: str) -> None:
        raise _error("AccessDeniedException", "CreateTable")

    monkeypatch.setattr(RunTable, "create", create)
    said: list[str] = []
    nothing = Suite("nothing", ("tests/deploy/test_aws_run.py", "-k", "no_such_test"))
    code = running.run(
        {**os.environ, "SANDBOX_LEDGER_AWS_TESTS": "1"},
        (nothing,),
        endpoint_url=moto_endpoint,
        say=said.append,
    )
    assert code == 1, said
    assert any("could not create table" in line and "AccessDenied" in line for line in said)
    assert not any(line.startswith("[1/1]") for line in said), said
    assert said[-1] == "make test-aws: failed: the table's creation", said


def test_the_embedded_server_answers_a_stream_switched_to_what_it_is_as_dynamodb_does(
    moto_endpoint: str, no_run_table: None
) -> None:
    """UpdateTable's StreamSpecification (DynamoDB API reference): "You receive a
    ValidationException if you try to enable a stream on a table that already has a stream,
    or if you try to disable a stream on a table that doesn't have a stream." The server
    took a second disable silently (a renewal that only works here) and refused a second
    enable with ResourceInUseException."""
    import boto3

    client = boto3.client("dynamodb", endpoint_url=moto_endpoint)
    table = runtable.RunTable(client, TABLE_PREFIX + runtable.new_run_id())
    client.create_table(**runtable.k.table_definition(table.name))
    try:
        on = {"StreamEnabled": True, "StreamViewType": "NEW_AND_OLD_IMAGES"}
        with pytest.raises(ClientError, match=r"ValidationException.*already has an enabled"):
            client.update_table(TableName=table.name, StreamSpecification=on)
        client.update_table(TableName=table.name, StreamSpecification={"StreamEnabled": False})
        with pytest.raises(ClientError, match="ValidationException"):
            client.update_table(TableName=table.name, StreamSpecification={"StreamEnabled": False})
        # A run's renewal of a stream found off (a test stopped between the two switches)
        # turns it on, as it would on DynamoDB, rather than failing on the disable.
        first = table.renew_stream()
        assert table.renew_stream() != first
    finally:
        runtable.delete_table(client, table.name)
