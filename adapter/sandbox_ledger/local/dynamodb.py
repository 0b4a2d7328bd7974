"""The embedded DynamoDB: a moto server on a loopback port, in a thread or a child process.

Besides moto's own DynamoDB, the server adds what an embedded server needs:

- **One request at a time.** moto's backends are not thread-safe: two concurrent
  ``UpdateItem ... ADD`` on one item can lose an update (seen here: 19 of 20 increments under
  concurrent transactions), where DynamoDB serializes writes to an item. The server handles
  one request at a time while still accepting many connections, so that what passes here
  does not pass by luck.
- **A connection serves many requests** (:mod:`.keepalive`): moto's server (werkzeug's
  development server) closes the connection after every response.
- **The adjustments of moto** (:mod:`.adjustments`), applied only to the requests this server
  serves; one that does not fit the installed moto is left off with a warning
  (:attr:`LocalDynamoDB.adjustments_off`).
- **The strict profile**, when asked for (:mod:`.strict`): DynamoDB's limits, throughput per
  partition key and table, transaction conflicts, idempotency tokens, global secondary
  indexes that lag behind their table, streams whose shards close, split, expire their
  iterators and trim their records, consumed capacity and 1 MB Query and Scan pages as
  DynamoDB computes them, where moto is lenient; and a meter of the units consumed
  (:meth:`LocalDynamoDB.meter`).
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import subprocess
import sys
import threading
import time
import warnings
from typing import TYPE_CHECKING, Any

from ..errors import InvalidInputError
from . import adjustments
from .keepalive import _end_connections, _keep_alive
from .strict import StrictProfile
from .strict.consumed import Meter
from .strict.front import StrictFront
from .strict.parse import profile_text

if TYPE_CHECKING:
    from collections.abc import Callable, Collection, Iterable, Iterator

    from .strict.consumed import MeterKey, Usage

DEFAULT_STREAM_RECORDS = 1000
"""Stream records kept per table unless :class:`LocalDynamoDB` is told otherwise."""


class LocalDynamoDB:
    """A moto server on a loopback port. ``start()`` returns its endpoint URL.

    Args:
        host, port: where to listen (port 0: a free port).
        stream_records: stream records kept per table (``None``: all, as stock moto; 0: none),
            for the writes this server serves; under the strict profile, the oldest beyond
            it are trimmed from its streams' shards too.
        leave_off: names of adjustments (:mod:`sandbox_ledger.local.adjustments`) to leave
            off, so that the server runs moto's own code there (to compare with it).
        strict: the strict profile (:mod:`sandbox_ledger.local.strict`): True for its
            defaults, or a :class:`~sandbox_ledger.local.strict.StrictProfile`.

    Raises:
        InvalidInputError: ``stream_records`` is negative or ``leave_off`` names no adjustment.
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        stream_records: int | None = DEFAULT_STREAM_RECORDS,
        leave_off: Collection[str] = (),
        strict: StrictProfile | bool = False,
    ) -> None:
        _check_stream_records(stream_records)
        self.strict = _profile(strict)
        """The strict profile this server applies (None: moto's own leniency)."""
        unknown = set(leave_off) - {a.name for a in adjustments.all_adjustments()}
        if unknown:
            raise InvalidInputError("leave_off", f"no such adjustment: {sorted(unknown)}")
        self._host, self._port = host, port
        self._stream_records = stream_records
        self._leave_off = frozenset(leave_off)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self.endpoint_url = ""
        self.adjustments_off: tuple[str, ...] = ()
        """The adjustments this server runs without (left off, or not fitting moto)."""
        self._left_off: dict[str, str] = {}
        self._lock = threading.Lock()
        self._settings: adjustments.Settings | None = None
        self._observers: list[Callable[[str, bytes], None]] = []
        self._front: StrictFront | None = None
        self._meter = Meter()
        self._open = threading.Event()
        self._open.set()
        self._refusing = threading.Event()

    def meter(self) -> dict[MeterKey, Usage]:
        """The read and write units the strict profile's requests consumed so far, as DynamoDB
        computes them, per (table, index name or ``""`` for the table, partition key value as
        compact JSON of its wire form, e.g. ``'{"S":"a"}'``), whether or not a request asked
        for ``ReturnConsumedCapacity`` (:mod:`.strict.consumed`).

        Raises:
            InvalidInputError: the server has no strict profile (moto's own numbers are not
                DynamoDB's).
        """
        if self.strict is None:
            raise InvalidInputError("strict", "the meter needs the strict profile")
        return self._meter.snapshot()

    def hold(self) -> None:
        """Hold the requests clients send (each waits, its connection open) until
        :meth:`release`: the server's own in-process work comes first (``local --data``
        loads its file before a client sees the table)."""
        self._open.clear()

    def release(self) -> None:
        """Serve the requests :meth:`hold` held, and every one after."""
        self._open.set()

    def refuse_clients(self) -> None:
        """From now on, answer every client's request ``503 Service Unavailable`` (which SDKs
        send again) without serving it, its connection closed: the server is stopping.
        Returns once the request being served, if any, is done, so what the server holds
        after this is everything it will have acknowledged (``local --data`` saves it)."""
        self._refusing.set()
        self._open.set()
        with self._lock:
            pass

    def refusals(self) -> dict[str, int]:
        """What the strict profile refused so far, by error code: throttles
        (``ProvisionedThroughputExceededException``; a transaction's ``ThrottlingError``),
        ``TransactionConflict``, the limits it holds (``ValidationException``...). Empty
        without the profile."""
        front = self._front
        if front is None:
            return {}
        return front.refused()

    def reset_meter(self) -> None:
        """Forget the units :meth:`meter` counted so far."""
        self._meter.reset()

    def start(self) -> str:
        """Start serving in a daemon thread; idempotent.

        Warns (:class:`~sandbox_ledger.local.adjustments.MotoAdjustmentWarning`) for each
        adjustment left off because the installed moto's code differs from its own.

        Raises:
            RuntimeError: moto is not installed.
        """
        if self._server is not None:
            return self.endpoint_url
        self._refusing.clear()
        try:
            from moto.moto_server import werkzeug_app
            from moto.moto_server.werkzeug_app import (
                DomainDispatcherApplication,
                create_backend_app,
            )
            from werkzeug.serving import WSGIRequestHandler, make_server
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise RuntimeError(
                "the embedded DynamoDB needs moto: pip install 'sandbox-ledger-dynamodb[cli]'"
            ) from exc
        on, off = adjustments.prepare(leave_off=self._leave_off)
        self.adjustments_off, self._left_off = tuple(off), off
        settings = adjustments.Settings(
            on=on, stream_records=self._stream_records, strict=self.strict is not None
        )
        self._settings = settings
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        _local_credentials()
        app: Any = DomainDispatcherApplication(create_backend_app)
        if adjustments.dispatch.NAME in on:
            app = adjustments.dispatch._DynamoDBFirst(app)
        self._front = (
            StrictFront(self.strict, self._stream_records, self._meter, self._ttl_removed)
            if self.strict is not None
            else None
        )
        self._server = make_server(
            self._host,
            self._port,
            _serialized(
                app,
                settings,
                self._lock,
                self._observers,
                self._front,
                (self._open, self._refusing),
            ),
            threaded=True,
            # moto before 5.2 has no handler of its own (it keeps underscored header names).
            request_handler=_keep_alive(
                getattr(werkzeug_app, "MotoRequestHandler", WSGIRequestHandler)
            ),
        )
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        host, port = self._server.server_address[:2]
        self.endpoint_url = f"http://{host}:{port}"
        return self.endpoint_url

    def observe(self, observer: Callable[[str, bytes], None]) -> None:
        """Call ``observer(target, body)`` after each request this server serves (the
        ``X-Amz-Target`` header and the request's body), while no other request runs, and
        after each item the strict profile's TTL service deletes (as a ``DeleteItem`` of its
        key): how the local server's saves learn what changed (:mod:`.inprocess`)."""
        self._observers.append(observer)

    @contextlib.contextmanager
    def exclusive(self) -> Iterator[None]:
        """Hold the server as one request does: no request is served meanwhile, and this
        server's adjustments of moto apply to what runs inside (its in-process calls)."""
        if self._settings is None:
            raise RuntimeError("the embedded DynamoDB is not started")
        with self._lock, adjustments.serving(self._settings):
            yield

    def wait_for_indexes(self, table: str | None = None, *, timeout: float = 60.0) -> None:
        """Return once every write this server has served has reached every global secondary
        index (of the table of that name only, if given): a Query of an index then sees what
        the table holds. The strict profile's indexes lag (:attr:`StrictProfile.index_delay`);
        this waits out the lag, it never shortens it. Without lag: at once.

        What a test of an eventually consistent listing waits for before it checks the
        listing's settled state (DynamoDB itself offers no such call: against it, such a test
        polls).

        Raises:
            RuntimeError: the server is not started.
            TimeoutError: writes are still behind after ``timeout`` seconds.
        """
        if self._settings is None:
            raise RuntimeError("the embedded DynamoDB is not started")
        front = self._front
        if front is None or not front.indexes.on:
            return
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                front.indexes.catch_up()
                behind = front.indexes.behind(table)
            if not behind:
                return
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"{behind} index entries still behind their table after {timeout} s"
                )
            time.sleep(0.005)

    def _ttl_removed(self, table: str, key: dict[str, Any]) -> None:
        """An item the strict profile's TTL service deleted (under the lock, while serving a
        request), told to the observers as the DeleteItem it is: a write no client sent,
        which ``local --data`` must save as it saves theirs."""
        body = json.dumps({"TableName": table, "Key": key}).encode()
        for observer in self._observers:
            observer("DynamoDB_20120810.DeleteItem", body)

    def stop(self) -> None:
        """Stop serving; the data is gone."""
        # A request held (while a load ran) or arriving now is answered 503, never served:
        # what the server holds may be half loaded, or already saved for the last time.
        self._refusing.set()
        self._open.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            _end_connections(self._server)
            if self._thread is not None:
                self._thread.join()
            self._server, self._thread = None, None


class LocalDynamoDBProcess:
    """:class:`LocalDynamoDB` in a child process: the server's CPU does not compete with the
    caller's for one interpreter lock, so a client and its server use two cores. The child
    ends when :meth:`stop` is called or the parent goes away (its stdin closes).

    Args: as :class:`LocalDynamoDB` (but ``leave_off``).
    """

    def __init__(
        self,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        stream_records: int | None = DEFAULT_STREAM_RECORDS,
        strict: StrictProfile | bool = False,
    ) -> None:
        _check_stream_records(stream_records)
        self.strict = _profile(strict)
        profile = [] if self.strict is None else ["--strict", _profile_text(self.strict)]
        self._args = [
            *profile,
            "--host",
            host,
            "--port",
            str(port),
            "--stream-records",
            "all" if stream_records is None else str(stream_records),
        ]
        self._child: subprocess.Popen[str] | None = None
        self.endpoint_url = ""
        self.adjustments_off: tuple[str, ...] = ()
        """The adjustments the child's server runs without."""

    def start(self) -> str:
        """Start the child and wait until it serves; idempotent.

        Warns as :meth:`LocalDynamoDB.start` does, for the child's server.

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
        # Then a line per adjustment left off ("name<TAB>its warning"), and a blank line.
        while (entry := child.stdout.readline().rstrip("\n")) != "":
            name, _, why = entry.partition("\t")
            self.adjustments_off += (name,)
            if why:
                warnings.warn(why, adjustments.MotoAdjustmentWarning, stacklevel=2)
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


def _profile(strict: StrictProfile | bool) -> StrictProfile | None:
    if isinstance(strict, StrictProfile):
        return strict
    if not isinstance(strict, bool):
        raise InvalidInputError("strict", "must be True, False or a StrictProfile")
    return StrictProfile() if strict else None


def _profile_text(profile: StrictProfile) -> str:
    """The profile as the child process's ``--strict`` argument (every field, as
    :meth:`StrictProfile.parse` reads it)."""
    return profile_text(profile, every=True)


def _profile_from_text(text: str) -> StrictProfile:
    return StrictProfile.parse(text)


def _check_stream_records(stream_records: int | None) -> None:
    if stream_records is not None and stream_records < 0:
        raise InvalidInputError("stream_records", "must be None or a count >= 0")


def _serve_until_stdin_closes(argv: list[str] | None = None) -> None:
    """``python -m sandbox_ledger.local``: serve, print the endpoint, then each adjustment
    left off and a blank line; stop at stdin's end."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m sandbox_ledger.local")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--stream-records", default=str(DEFAULT_STREAM_RECORDS))
    parser.add_argument("--strict", default=None)
    args = parser.parse_args(argv)
    records = None if args.stream_records == "all" else int(args.stream_records)
    strict = _profile_from_text(args.strict) if args.strict else False
    server = LocalDynamoDB(args.host, args.port, stream_records=records, strict=strict)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", adjustments.MotoAdjustmentWarning)  # told the parent
        endpoint = server.start()
    print(endpoint)
    for name, why in server._left_off.items():
        print(f"{name}\t{why}".replace("\n", " "))
    print(flush=True)
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


def _serialized(
    app: Callable[..., Any],
    settings: adjustments.Settings,
    lock: threading.Lock,
    observers: list[Callable[[str, bytes], None]],
    front: StrictFront | None = None,
    gates: tuple[threading.Event, threading.Event] | None = None,
) -> Callable[..., Iterable[bytes]]:
    """``app`` serving one request at a time, with this server's adjustments applied; each
    observer told of it before the next one runs; with ``front``, through the strict
    profile's front (:mod:`.strict.front`). ``gates``: (open, refusing): a request waits
    until open is set, and one that finds refusing set is answered 503, not served."""
    open_, refusing = gates if gates is not None else (None, None)

    def handle(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if open_ is not None:
            open_.wait()
        if refusing is not None and refusing.is_set():
            # Without the lock: a stopping server's last save holds it request by request,
            # and a fleet's resends, each waiting its turn for it, starved the save (a
            # SIGTERM of `local --data` under 15 clients took over two minutes to exit).
            return _unavailable(start_response)
        if front is not None:
            return front.serve(environ, start_response, run, app)
        return run(app, environ, start_response)

    def run(
        served: Callable[..., Any], environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        with lock, adjustments.serving(settings):
            if refusing is not None and refusing.is_set():
                return _unavailable(start_response)
            # Drain the response inside the lock: werkzeug may produce it lazily.
            response = list(served(environ, start_response))
            if observers:
                target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
                source = environ.get("wsgi.input")
                body = source.getvalue() if isinstance(source, io.BytesIO) else b""
                for observer in observers:
                    observer(target, body)
            return response

    return handle


def _unavailable(start_response: Callable[..., Any]) -> list[bytes]:
    """The answer of a stopping server: 503, as DynamoDB's own ``ServiceUnavailable``."""
    body = json.dumps(
        {
            "__type": "com.amazonaws.dynamodb.v20120810#ServiceUnavailable",
            "message": "the local server is stopping",
        }
    ).encode()
    start_response(
        "503 Service Unavailable",
        [
            ("Content-Type", "application/x-amz-json-1.0"),
            ("Content-Length", str(len(body))),
            ("Connection", "close"),
        ],
    )
    return [body]
