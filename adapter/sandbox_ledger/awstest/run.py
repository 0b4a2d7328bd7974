"""A ``make test-aws`` run: one table made for it, the suites through it, the bill, and the
table deleted whatever happens (a failure, Ctrl-C, SIGTERM, SIGHUP)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sandbox_ledger._json import loads_unique
from sandbox_ledger.awstest.account import Account, Refused, resolve
from sandbox_ledger.awstest.meter import ENV as METER_ENV
from sandbox_ledger.awstest.meter import dollars
from sandbox_ledger.awstest.runtable import (
    RUN_TAG,
    TABLE_PREFIX,
    RunTable,
    delete_table,
    leftovers,
    new_run_id,
)

if TYPE_CHECKING:
    from types import FrameType

    from sandbox_ledger.awstest.suites import Suite

ROOT = Path(__file__).resolve().parents[3]
"""The repository whose tests/ a run takes (the package installed in editable mode)."""

Say = Callable[[str], None]


class Stopped(Exception):
    """SIGINT, SIGTERM or SIGHUP came: the run stops, its table is deleted."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _say(text: str) -> None:
    """Say ``text`` on stderr; once it cannot be written (the terminal hung up: EIO, or a
    closed pipe: EPIPE) the run goes on saying nothing, its clean-up first of all."""
    try:
        print(text, file=sys.stderr, flush=True)
    except OSError:
        # What is buffered, and what comes, goes nowhere (and the exit's flush succeeds).
        with contextlib.suppress(OSError, ValueError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stderr.fileno())


def run(
    environ: Mapping[str, str],
    suites: tuple[Suite, ...],
    *,
    endpoint_url: str | None = None,
    pytest_args: tuple[str, ...] = (),
    say: Say = _say,
) -> int:
    """The run; its exit code (0: every suite passed; 1: one failed; 2: refused; 128 plus the
    signal's number: stopped by it)."""
    try:
        account = resolve(environ, endpoint_url)
        _repository()
    except Refused as exc:
        say(f"make test-aws: refused: {exc}")
        return 2
    run_id = new_run_id()
    table = RunTable(_client(account, "dynamodb"), TABLE_PREFIX + run_id)
    say(f"account {account.account_id} ({account.arn}), region {account.region}")
    say(_estimate(suites))
    stopped: list[int] = []
    child: list[subprocess.Popen[bytes]] = []

    def stop(signum: int, frame: FrameType | None) -> None:
        stopped.append(signum)
        for process in child:
            if process.poll() is None and signum != signal.SIGINT:  # a terminal's Ctrl-C
                process.send_signal(signum)  # reaches the whole group; SIGTERM only us
        if len(stopped) == 1:  # a second one (Ctrl-C twice) must not break off the stopping
            raise Stopped(signum)

    # SIGHUP: the terminal closed or the SSH session dropped (a run takes many minutes).
    watched = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {sig: signal.signal(sig, stop) for sig in watched}
    failed: list[str] = []
    totals: list[dict[str, Any]] = []
    made = False
    scratch: tempfile.TemporaryDirectory[str] | None = None
    metering: list[Path] = []  # the running suite's meter file: a stopped one's is billed too
    try:
        say(f"creating table {table.name} (on-demand, stream and TTL; tag {RUN_TAG}={run_id})")
        made = True  # from the request on: an answer lost to a signal still made it
        made_it = _create(table, run_id, say)
        if not made_it:
            failed.append("the table's creation")
        # Removed only once every suite's pytest has ended (a stopped one writes its meter).
        scratch = tempfile.TemporaryDirectory(prefix="sandbox-ledger-aws-")
        for number, suite in enumerate(suites if made_it else (), 1):
            meter = Path(scratch.name) / f"suite-{number}.json"
            say(f"[{number}/{len(suites)}] {suite.name}")
            began = time.monotonic()
            metering[:] = [meter]
            code = _pytest(suite, table.name, account, meter, pytest_args, child)
            metering.clear()
            took = time.monotonic() - began
            said = "passed" if code == 0 else f"FAILED (pytest exit {code})"
            used = ""
            if meter.exists():
                totals.append(loads_unique(meter.read_text()))
                used = f"; {_units(totals[-1])}"
            say(f"[{number}/{len(suites)}] {suite.name}: {said} in {took:.0f} s{used}")
            if code != 0:
                failed.append(suite.name)
    except Stopped as exc:
        say(f"{signal.Signals(exc.signum).name}: stopping the run")
    finally:
        for sig in before:
            signal.signal(sig, signal.SIG_IGN)  # the deletion goes on: a signal waits
        for process in child:
            _end(process)
        for meter in metering:  # the stopped suite's, if its pytest wrote it
            try:
                totals.append(loads_unique(meter.read_text()))
                say(f"the stopped suite consumed {_units(totals[-1])}")
            except (OSError, ValueError):
                say("the stopped suite's consumed units are unknown (its pytest wrote none)")
        if scratch is not None:
            scratch.cleanup()
        if totals:
            say(_bill(totals))
        if made:
            gone = _delete(table, say)
            if not gone:
                failed.append("the table's deletion")
        for sig, handler in before.items():
            signal.signal(sig, handler)
    if stopped:
        return 128 + stopped[0]
    if failed:
        say(f"make test-aws: failed: {', '.join(failed)}")
        return 1
    say("make test-aws: every suite passed")
    return 0


def _repository() -> None:
    if not (ROOT / "tests" / "conftest.py").is_file():
        raise Refused(
            f"the run takes this repository's tests, and {ROOT} has none: run it from a clone "
            "(pip install -e .)"
        )


def _client(account: Account, service: str) -> Any:
    return account.session.client(
        service, endpoint_url=account.endpoint_url, region_name=account.region
    )


def _pytest(
    suite: Suite,
    table: str,
    account: Account,
    meter: Path,
    extra: tuple[str, ...],
    child: list[subprocess.Popen[bytes]],
) -> int:
    env = {
        **os.environ,
        "SANDBOX_LEDGER_TEST_TABLE": table,
        "AWS_REGION": account.region,
        "AWS_DEFAULT_REGION": account.region,
        METER_ENV: str(meter),
        "SANDBOX_LEDGER_VERIFY": "fast",
    }
    env.pop("SANDBOX_LEDGER_TEST_ENDPOINT", None)
    if account.endpoint_url is not None:
        env["SANDBOX_LEDGER_TEST_ENDPOINT"] = account.endpoint_url
    argv = [
        sys.executable,
        "-m",
        "pytest",
        "-q",
        "-p",
        "sandbox_ledger.awstest.meter",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:xdist",
        *suite.args,
        *extra,
    ]
    process = subprocess.Popen(argv, cwd=ROOT, env=env)
    child.append(process)
    code = process.wait()
    child.remove(process)
    return code


def _end(process: subprocess.Popen[bytes]) -> None:
    """Let a stopped suite's pytest end (it got the terminal's SIGINT or our SIGTERM), else
    end it: SIGTERM, then SIGKILL."""
    try:
        process.wait(timeout=5)
        return
    except subprocess.TimeoutExpired:
        process.terminate()  # a SIGINT sent to us alone never reached it
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _create(table: RunTable, run_id: str, say: Say) -> bool:
    """Create the run's table; False, saying why, if AWS refuses it (a permission, a quota)."""
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        table.create(run_id)
    except (BotoCoreError, ClientError) as exc:
        say(f"could not create table {table.name}: {exc}")
        return False
    return True


def _delete(table: RunTable, say: Say) -> bool:
    say(f"deleting table {table.name} (a signal now waits for it)")
    try:
        gone = table.delete()
    except Exception as exc:
        say(
            f"could not delete table {table.name}: {exc}; `make test-aws-clean` deletes "
            "what a run left"
        )
        return False
    say(f"deleted table {table.name}" if gone else f"table {table.name} was never made")
    return True


def _estimate(suites: tuple[Suite, ...]) -> str:
    reads = sum(suite.read_units for suite in suites)
    writes = sum(suite.write_units for suite in suites)
    streams = sum(suite.stream_reads for suite in suites)
    price = dollars(reads, writes, streams)
    return (
        f"estimate: about {reads:,.0f} read and {writes:,.0f} write request units and "
        f"{streams:,} stream reads, ${price:.4f} at us-east-1 on-demand prices (what the "
        "embedded server's run metered; AWS's retries and other regions' prices differ)"
    )


def _units(part: dict[str, Any]) -> str:
    return (
        f"{float(part['readUnits']):,.1f} read and {float(part['writeUnits']):,.1f} write "
        f"request units, {int(part['streamReads']):,} stream reads"
    )


def _bill(totals: list[dict[str, Any]]) -> str:
    reads = sum(float(part["readUnits"]) for part in totals)
    writes = sum(float(part["writeUnits"]) for part in totals)
    streams = sum(int(part["streamReads"]) for part in totals)
    calls = sum(sum(part["calls"].values()) for part in totals)
    failed = sum(sum(part["failed"].values()) for part in totals)
    return (
        f"consumed: {reads:,.1f} read and {writes:,.1f} write request units, {streams:,} "
        f"stream reads, in {calls:,} DynamoDB requests ({failed:,} failed, their units not "
        f"reported): ${dollars(reads, writes, streams):.4f} at us-east-1 on-demand prices"
    )


def clean(
    environ: Mapping[str, str],
    *,
    min_age: timedelta,
    endpoint_url: str | None = None,
    say: Say = _say,
) -> int:
    """Delete the tables earlier runs left (tagged :data:`RUN_TAG`), those younger than
    ``min_age`` spared (a run going on elsewhere in the account). Exit code: 0 every one
    found deleted, 1 a deletion failed, 2 refused."""
    try:
        account = resolve(environ, endpoint_url)
    except Refused as exc:
        say(f"make test-aws-clean: refused: {exc}")
        return 2
    client = _client(account, "dynamodb")
    say(f"account {account.account_id}, region {account.region}")
    now = datetime.now(UTC)
    found = leftovers(client)
    code = 0
    for table in found:
        age = now - table.created if table.created is not None else None
        if age is not None and age < min_age:
            say(f"kept {table.name} (run {table.run_id}): made {_ago(age)} ago")
            continue
        try:
            gone = delete_table(client, table.name)
        except Exception as exc:
            say(f"could not delete {table.name}: {exc}")
            code = 1
            continue
        say(f"deleted {table.name} (run {table.run_id})" if gone else f"{table.name}: gone")
    if not found:
        say("no table of a test run found")
    return code


def _ago(age: timedelta) -> str:
    minutes = int(age.total_seconds() // 60)
    return f"{minutes // 60} h {minutes % 60} min"
