"""The CLI fails fast and in one line when DynamoDB cannot be reached or does not answer as
DynamoDB; the library's own defaults (servers, Lambda) stay patient."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from sandbox_ledger.cli import app
from sandbox_ledger.cli.context import cli_config
from sandbox_ledger.sdk.client import DEFAULT_CONFIG, client_config


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.delenv("SANDBOX_LEDGER_TABLE", raising=False)
    return CliRunner()


class HangUp:
    """A TCP server that accepts every connection and closes it at once, counting them."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            self._accepted(conn)

    def _accepted(self, conn: socket.socket) -> None:
        conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def hang_up() -> Iterator[HangUp]:
    server = HangUp()
    yield server
    server.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def one_error_line(output: str) -> str:
    lines = output.strip().splitlines()
    assert len(lines) == 1, output
    assert lines[0].startswith("error: ") and "Traceback" not in output
    return lines[0]


def test_unreachable_endpoint_is_one_line_naming_endpoint_and_region(runner: CliRunner) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    args = ["--table", "ledger", "--endpoint-url", endpoint, "--region", "eu-west-3", "ls"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1
    line = one_error_line(result.output)
    assert endpoint in line and "eu-west-3" in line and "cannot reach" in line


def test_the_interactive_budget_is_two_attempts_per_call(
    runner: CliRunner, hang_up: HangUp
) -> None:
    endpoint = f"http://127.0.0.1:{hang_up.port}"
    result = runner.invoke(
        app, ["--table", "ledger", "--endpoint-url", endpoint, "--region", "us-east-1", "envs"]
    )
    assert result.exit_code == 1
    assert endpoint in one_error_line(result.output)
    # One query, each attempt a new connection: two attempts, where the library makes eleven.
    assert hang_up.connections == 2


def test_listing_stops_at_the_first_failed_shard(runner: CliRunner, hang_up: HangUp) -> None:
    endpoint = f"http://127.0.0.1:{hang_up.port}"
    result = runner.invoke(
        app,
        ["--table", "ledger", "--endpoint-url", endpoint, "--shard-count", "64", "ls"],
    )
    assert result.exit_code == 1
    one_error_line(result.output)
    # 64 shard queries on a pool of 16 threads, two attempts each: 128 connections if every
    # query ran out its attempts; queries not yet started when the first one failed are
    # cancelled instead (at most the 16 running and 16 more started meanwhile).
    assert hang_up.connections < 100


def test_wrong_region_on_moto_is_one_line_not_a_page(
    runner: CliRunner, moto_endpoint: str, sync_table: str
) -> None:
    args = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "xx-wrong-1"]
    result = runner.invoke(app, [*args, "ls"])
    assert result.exit_code == 1
    line = one_error_line(result.output)
    assert moto_endpoint in line and "xx-wrong-1" in line
    assert "<" not in line and "html" not in line.lower()


def attempts(config: object) -> int:
    """Total attempts a config allows (botocore rewrites ``max_attempts``, the retries after
    the first, into ``total_max_attempts`` in place once a client is made with it)."""
    retries = dict(getattr(config, "retries", None) or {})
    return int(retries.get("total_max_attempts", retries.get("max_attempts", 0) + 1))


def test_library_defaults_stay_patient() -> None:
    assert client_config(None) is DEFAULT_CONFIG
    assert attempts(DEFAULT_CONFIG) == 11 and DEFAULT_CONFIG.connect_timeout == 5
    interactive = client_config(cli_config())
    assert attempts(interactive) == 2 and interactive.connect_timeout == 2
    # Bulk commands (import) connect quickly but keep the library's retries for throttling.
    bulk = client_config(cli_config(interactive=False))
    assert attempts(bulk) == 11 and bulk.connect_timeout == 2


class Silent(HangUp):
    """A TCP server that accepts every connection, reads the request and never answers."""

    def __init__(self) -> None:
        self.held: list[socket.socket] = []
        super().__init__()

    def _accepted(self, conn: socket.socket) -> None:
        self.held.append(conn)

    def close(self) -> None:
        super().close()
        for conn in self.held:
            conn.close()


def test_a_server_that_takes_the_request_and_never_answers_is_slow_not_unreachable(
    runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A busy server (the local one saving, a throttled endpoint) is never reported as
    unreachable: the line says it took the request and did not answer in time."""
    from botocore.config import Config

    from sandbox_ledger.cli import context

    quick = Config(connect_timeout=2, read_timeout=0.3, retries={"total_max_attempts": 2})
    monkeypatch.setattr(context, "cli_config", lambda **_: quick)
    server = Silent()
    try:
        endpoint = f"http://127.0.0.1:{server.port}"
        args = ["--table", "ledger", "--endpoint-url", endpoint, "--region", "eu-west-3", "ls"]
        result = runner.invoke(app, args)
    finally:
        server.close()
    assert result.exit_code == 1
    line = one_error_line(result.output)
    assert endpoint in line and "did not answer in time" in line, line
    assert "cannot reach" not in line
