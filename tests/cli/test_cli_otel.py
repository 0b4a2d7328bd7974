"""OpenTelemetry from the command line: the SDK's standard variables turn on export from any
command (console to stderr, OTLP over HTTP to a collector), a bad exporter name is a usage
error, a missing exporter is said and the command still runs; `demo --trace` prints the
span tree of one sandbox's life."""

from __future__ import annotations

import http.server
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from .processes import ROOT, run
from .test_cli_first_day import clean_env


def ledger(tmp_path: Path) -> str:
    """A SQLite store holding one session (imported from examples/ledger.jsonl)."""
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = run(
        ["--store", store, "import", str(ROOT / "examples" / "ledger.jsonl")], clean_env(tmp_path)
    )
    assert done.returncode == 0, done.stderr
    return store


def test_console_export_writes_the_commands_spans_to_stderr_and_keeps_stdout_its_own(
    tmp_path: Path,
) -> None:
    store = ledger(tmp_path)
    plain = run(["--store", store, "ls", "--json"], clean_env(tmp_path))
    env = clean_env(tmp_path, OTEL_TRACES_EXPORTER="console", OTEL_SERVICE_NAME="ops")
    traced = run(["--store", store, "ls", "--json"], env)
    assert traced.returncode == 0, traced.stderr
    assert traced.stdout == plain.stdout  # the data, unchanged
    assert '"name": "list_all_sandbox_page ledger_events"' in traced.stderr, traced.stderr
    assert '"db.system.name": "sqlite"' in traced.stderr
    assert '"service.name": "ops"' in traced.stderr


class _Collector(http.server.BaseHTTPRequestHandler):
    received: list[tuple[str, str, bytes]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.received.append((self.path, self.headers.get("Content-Type", ""), body))
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


@pytest.fixture
def collector() -> Iterator[tuple[str, list[tuple[str, str, bytes]]]]:
    """A stand-in OTLP/HTTP collector on a free port: what each POST carried."""
    received: list[tuple[str, str, bytes]] = []
    handler = type("Handler", (_Collector,), {"received": received})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}", received
    server.shutdown()
    server.server_close()


def test_an_otlp_endpoint_sends_the_spans_and_the_metrics_to_the_collector(
    tmp_path: Path, collector: tuple[str, list[tuple[str, str, bytes]]]
) -> None:
    endpoint, received = collector
    store = ledger(tmp_path)
    env = clean_env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    done = run(["--store", store, "show", "build", "sb-1", "--json"], env)
    assert done.returncode == 0, done.stderr
    paths = {path for path, _, _ in received}
    assert {"/v1/traces", "/v1/metrics"} <= paths, paths
    traces = b"".join(body for path, _, body in received if path == "/v1/traces")
    assert b"read_all ledger_events" in traces and b"sandbox-ledger-cli" in traces
    metrics = b"".join(body for path, _, body in received if path == "/v1/metrics")
    assert b"db.client.operation.duration" in metrics
    assert all(kind == "application/x-protobuf" for _, kind, _ in received)


def test_a_bad_exporter_name_is_a_usage_error(tmp_path: Path) -> None:
    env = clean_env(tmp_path, OTEL_TRACES_EXPORTER="jaeger")
    done = run(["--store", "memory://", "ls"], env)
    assert done.returncode == 2
    assert "OTEL_TRACES_EXPORTER: otlp, console or none, not 'jaeger'" in done.stderr


def test_without_the_otlp_exporter_the_command_says_so_and_runs(tmp_path: Path) -> None:
    """The otel extra not installed (its module hidden): one line on stderr, the command's
    own output and exit code as without telemetry."""
    code = (
        "import sys\n"
        "sys.modules['opentelemetry.exporter.otlp.proto.http.trace_exporter'] = None\n"
        "from sandbox_ledger.cli import main\n"
        "sys.argv = ['sandbox-ledger', '--store', 'memory://', 'ls', '--json']\n"
        "main()\n"
    )
    import subprocess

    def python(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
        )

    plain = python(clean_env(tmp_path))
    done = python(clean_env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT="http://127.0.0.1:9"))
    assert done.returncode == plain.returncode == 0, done.stderr
    assert done.stdout == plain.stdout == '{"sessions": [], "cursor": null}\n'
    assert "needs the otel extra (pip install 'sandbox-ledger-dynamodb[otel]')" in done.stderr


def test_sdk_disabled_or_none_turns_export_off(tmp_path: Path) -> None:
    from sandbox_ledger.cli.otel import exporters

    endpoint = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}
    assert exporters(endpoint) == ("otlp", "otlp")
    assert exporters({**endpoint, "OTEL_SDK_DISABLED": "true"}) == (None, None)
    assert exporters({**endpoint, "OTEL_METRICS_EXPORTER": "none"}) == ("otlp", None)
    assert exporters({"OTEL_TRACES_EXPORTER": "console"}) == ("console", None)
    assert exporters({}) == (None, None)


def test_demo_trace_prints_the_span_tree_of_one_sandboxs_life(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    done = run(["demo", "--sandboxes", "2", "--execs", "1", "--trace"], env, timeout=180)
    assert done.returncode == 0, done.stderr
    tree = done.stdout[done.stdout.index("the life of job-0/sb-00000, span by span:") :]
    lines = tree.splitlines()[1:]
    assert lines[0].startswith("sandbox job-0/sb-00000  ")
    assert any(line.startswith("├─ append sandbox-ledger event=sandbox.created") for line in lines)
    assert any(line.startswith("├─ get_environment sandbox-ledger") for line in lines)
    assert lines[-1].startswith("└─ ") and all(line.endswith(" ms") for line in lines)


def test_the_service_named_in_otel_resource_attributes_is_kept(tmp_path: Path) -> None:
    """The docstring and docs promise: the service is sandbox-ledger-cli unless
    OTEL_SERVICE_NAME or OTEL_RESOURCE_ATTRIBUTES names another (the red team saw the
    latter overwritten by sandbox-ledger-cli)."""
    env = clean_env(
        tmp_path,
        OTEL_TRACES_EXPORTER="console",
        OTEL_RESOURCE_ATTRIBUTES="deployment.environment=ci,service.name=fleet-ops",
    )
    done = run(["--store", "memory://", "ls", "--json"], env)
    assert done.returncode == 0, done.stderr
    assert '"service.name": "fleet-ops"' in done.stderr, done.stderr
    assert "sandbox-ledger-cli" not in done.stderr
    named = clean_env(
        tmp_path,
        OTEL_TRACES_EXPORTER="console",
        OTEL_SERVICE_NAME="ops",
        OTEL_RESOURCE_ATTRIBUTES="service.name=fleet-ops",
    )
    done = run(["--store", "memory://", "ls", "--json"], named)
    assert '"service.name": "ops"' in done.stderr, done.stderr  # the SDK's precedence


def test_one_signals_endpoint_turns_on_that_signal_alone() -> None:
    """A traces endpoint alone does not send the metrics to the default localhost:4318
    (where nothing may listen: errors on stderr and a wait at exit)."""
    from sandbox_ledger.cli.otel import exporters

    traces = {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/v1/traces"}
    assert exporters(traces) == ("otlp", None)
    only_metrics = {"OTEL_EXPORTER_OTLP_METRICS_ENDPOINT": "http://collector:4318/v1/metrics"}
    assert exporters(only_metrics) == (None, "otlp")
    both = {**traces, "OTEL_METRICS_EXPORTER": "otlp"}
    assert exporters(both) == ("otlp", "otlp")  # asked for by name: as the SDK does


@pytest.fixture
def silent_collector() -> Iterator[str]:
    """A collector that takes connections and never answers (a hung one, or a slow network)."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    taken: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        server.settimeout(0.2)
        while not stop.is_set():
            try:
                taken.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.getsockname()[1]}"
    stop.set()
    thread.join()
    for connection in taken:
        connection.close()
    server.close()


@pytest.mark.parametrize("state", ["down", "silent"])
def test_a_collector_down_or_silent_holds_a_command_a_few_seconds_at_exit(
    tmp_path: Path, state: str, request: pytest.FixtureRequest
) -> None:
    """ls --json of an empty store with OTLP export to a collector that refuses connections
    (down) or never answers: the command's output as without export, and its exit within
    seconds (on ba1d79d: 12 s down, 15 s silent, the exporter's 10 s per signal in turn)."""
    import time

    from .processes import free_port

    endpoint = (
        f"http://127.0.0.1:{free_port()}"
        if state == "down"
        else request.getfixturevalue("silent_collector")
    )
    env = clean_env(tmp_path, OTEL_EXPORTER_OTLP_ENDPOINT=endpoint)
    began = time.monotonic()
    done = run(["--store", "memory://", "ls", "--json"], env, timeout=60)
    took = time.monotonic() - began
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{"sessions": [], "cursor": null}\n'
    assert took < 7, f"{took:.1f} s"


def test_an_exporter_list_as_the_sdk_reads_it_exports_to_each(
    tmp_path: Path, collector: tuple[str, list[tuple[str, str, bytes]]]
) -> None:
    """OTEL_TRACES_EXPORTER is a comma-separated list in the SDK's specification
    (``otlp,console``): each exporter gets the spans (on ba1d79d: a usage error, exit 2);
    a bad name in the list is still one."""
    from sandbox_ledger.cli.otel import exporters

    assert exporters({"OTEL_TRACES_EXPORTER": " OTLP , console,otlp"}) == ("otlp,console", None)
    assert exporters({"OTEL_TRACES_EXPORTER": "none,console"}) == ("console", None)
    endpoint, received = collector
    env = clean_env(
        tmp_path, OTEL_TRACES_EXPORTER="otlp,console", OTEL_EXPORTER_OTLP_ENDPOINT=endpoint
    )
    done = run(["--store", "memory://", "ls", "--json"], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == '{"sessions": [], "cursor": null}\n'
    assert '"name": "list_all_sandbox_page"' in done.stderr, done.stderr  # console
    assert b"list_all_sandbox_page" in b"".join(
        body for path, _, body in received if path == "/v1/traces"
    )
    bad = run(
        ["--store", "memory://", "ls"], clean_env(tmp_path, OTEL_TRACES_EXPORTER="otlp,zipkin")
    )
    assert bad.returncode == 2
    assert "OTEL_TRACES_EXPORTER: otlp, console or none, not 'zipkin'" in bad.stderr
