"""OpenTelemetry traces and metrics of every store's operations, with nothing to configure.

The library writes through the OpenTelemetry API alone (``opentelemetry-api``): until the
application installs an SDK (a tracer and a meter provider), every call here is the API's
no-op. With one installed, each contract and extension operation of a store is one span
(kind CLIENT) named ``{operation} {collection}`` as the database conventions name them, with:

- ``db.system.name``: ``aws.dynamodb``, ``sqlite`` or ``postgresql`` (none for the memory
  store); ``db.collection.name``: the DynamoDB table, or the SQL stores' entries table;
  ``db.namespace``: the PostgreSQL schema or the SQLite file; ``db.operation.name``: the
  method (``append``, ``read_all``, ``list_all_sandbox_details``, ...);
- ``sandbox.name``, ``sandbox.id`` and ``sandbox.event`` where the operation has them (an
  environment's operations: its name as ``sandbox.name``); ``db.operation.batch.size`` for
  an operation over many entries or sessions;
- an error: the span's status ERROR, its exception recorded, and ``error.type`` the
  exception's qualified class name (the package's own: ``sandbox_ledger.errors.ThrottledError``);
- retries as span events (:func:`retried`): ``retry`` with ``sandbox_ledger.retry.reason``
  (``throttle``, ``conflict``, ``resend``, ``error``) and the attempt.

Metrics, on the meter ``sandbox_ledger``: ``db.client.operation.duration`` (histogram,
seconds, per operation and store, ``error.type`` on a failure) and
``sandbox_ledger.client.retries`` (counter, by reason).

The SDK's own requests (botocore, aiobotocore, sqlite3, psycopg) become child spans of an
operation's span when their OpenTelemetry instrumentations are installed: the operation's
span is the current one while it runs (also across :class:`~sandbox_ledger.BlockingAdapter`'s
thread, which carries the caller's context). docs/observability.md has the attribute table.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import os
import threading
import time
from contextlib import AbstractContextManager, contextmanager, nullcontext
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable, Iterator

    from opentelemetry.metrics import Counter, Histogram
    from opentelemetry.trace import Span, Tracer

C = TypeVar("C", bound=type)

NAME = "sandbox_ledger"
"""The instrumentation scope of the tracer and the meter."""

LEDGER_OPERATIONS = frozenset(
    {
        # the contract
        "append",
        "read_all",
        "last_checkpoint",
        "list_sandbox_details",
        "list_all_sandbox_details",
        "list_sandbox_page",
        "list_all_sandbox_page",
        "get_sandbox_details",
        "delete_sandbox",
        "list_checkpoints",
        "get_environment",
        "save_environment",
        "delete_environment",
        "list_environments",
        # its extensions: imports, exports, retention, tables
        "append_at",
        "append_once",
        "append_once_many",
        "read_stored",
        "read_stored_sessions",
        "read_in_append_order",
        "read_sessions_in_append_order",
        "scan_sessions",
        "purge_expired",
        "create_table",
    }
)
"""The ledger stores' methods :func:`instrumented` wraps where a class defines them."""

RESOURCE_OPERATIONS = frozenset(
    {
        "put",
        "put_stored",
        "get",
        "get_versioned",
        "get_many",
        "inspect",
        "list",
        "scan",
        "touch",
        "record_operation_start",
        "record_operation_finish",
        "delete",
        "candidates",
        "observe",
        "claim",
        "release",
        "delete_claimed",
        "create_table",
    }
)
"""The resource record stores' methods :func:`instrumented` wraps."""

Target = tuple[str | None, str | None, str | None]
"""What a store's ``telemetry_target()`` returns: ``db.system.name``, ``db.collection.name``
and ``db.namespace`` (None: not set)."""

RETRY_REASONS = frozenset({"throttle", "conflict", "resend", "error"})

_BATCHES = ("entries", "sessions", "records", "items")


class _Instruments:
    """The tracer and the meter's instruments, made on first use (the API's proxies: an SDK
    installed later is used from then on)."""

    def __init__(self) -> None:
        from opentelemetry import metrics, trace

        from sandbox_ledger import __version__

        self.tracer: Tracer = trace.get_tracer(NAME, __version__)
        meter = metrics.get_meter(NAME, __version__)
        self.duration: Histogram = meter.create_histogram(
            "db.client.operation.duration",
            unit="s",
            description="Duration of a ledger store's operation.",
            explicit_bucket_boundaries_advisory=[
                0.001,
                0.005,
                0.01,
                0.05,
                0.1,
                0.5,
                1.0,
                5.0,
                10.0,
            ],
        )
        self.read_units: Counter = meter.create_counter(
            f"{CAPACITY}.read_units",
            unit="{unit}",
            description="Read request units DynamoDB reported for an operation's requests.",
        )
        self.write_units: Counter = meter.create_counter(
            f"{CAPACITY}.write_units",
            unit="{unit}",
            description="Write request units DynamoDB reported for an operation's requests.",
        )
        self.retries: Counter = meter.create_counter(
            "sandbox_ledger.client.retries",
            unit="{retry}",
            description="Requests sent again: throttled, conflicted, partly processed, failed.",
        )


@functools.cache
def _instruments() -> _Instruments:
    return _Instruments()


def instrumented(operations: frozenset[str] = LEDGER_OPERATIONS) -> Callable[[C], C]:
    """A class decorator: each method of ``operations`` the class itself defines (sync or
    async) runs in a span and is timed; one that yields pages (a generator: a resource
    store's ``scan``, the sync twin's ``candidates``) has a span for each page it reads,
    closed before the page is handed out. The store's system, collection and namespace are
    read from the instance's ``telemetry_target()`` (a :data:`Target`) if it has one."""

    def decorate(cls: C) -> C:
        for name in operations:
            method = cls.__dict__.get(name)
            if method is None or not inspect.isfunction(method):
                continue
            if inspect.isasyncgenfunction(method) or inspect.isgeneratorfunction(method):
                setattr(cls, name, _wrap_pages(name, method))
                continue
            setattr(cls, name, _wrap(name, method))
        return cls

    return decorate


@functools.cache
def _globals() -> tuple[Any, Any]:
    """The API's two global accessors (their answers are the API's proxies until an SDK sets
    its providers)."""
    from opentelemetry import metrics, trace

    return trace.get_tracer_provider, metrics.get_meter_provider


def _proxy(provider: object) -> bool:
    """Whether ``provider`` is the API's stand-in (``ProxyTracerProvider``; the meter's,
    ``_ProxyMeterProvider``, is private to the API: known by its name)."""
    return type(provider).__name__ in {"ProxyTracerProvider", "_ProxyMeterProvider"}


def sdk_installed() -> bool:
    """Whether the application installed a tracer or a meter provider (an SDK): until then
    an operation runs as if unwrapped (no span, no clock, no attribute built), the API's
    no-op being the proxies' and nothing else."""
    tracer_provider, meter_provider = _globals()
    return not (_proxy(tracer_provider()) and _proxy(meter_provider()))


_RUNNING: ContextVar[Any] = ContextVar("sandbox_ledger_operation", default=None)
"""The store whose wrapped operation is running (in this context): an operation of the same
store called inside it (a resource store's ``get`` reading through ``get_versioned``, the
memory store's ``list_checkpoints`` through ``read_all``) is part of it, not an operation
of its own: no second span, duration or consumed units counted under another name."""


@contextmanager
def _running(store: Any) -> Iterator[None]:
    token = _RUNNING.set(store)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def _untraced(store: Any) -> bool:
    """Whether a wrapped call on ``store`` runs as if unwrapped: no SDK, or inside an
    operation of the same store."""
    return not sdk_installed() or _RUNNING.get() is store


def _wrap(operation: str, method: Any) -> Any:
    describe = _describer(method)
    stamps = operation == "append"
    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def traced_async(self: Any, *args: Any, **kwargs: Any) -> Any:
            if _untraced(self):
                return await method(self, *args, **kwargs)
            with operation_span(self, operation, describe(args, kwargs)) as span, _running(self):
                if stamps and records_trace_ids(self):
                    args, kwargs = _stamped(span, args, kwargs)
                return await method(self, *args, **kwargs)

        return traced_async

    @functools.wraps(method)
    def traced(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _untraced(self):
            return method(self, *args, **kwargs)
        with operation_span(self, operation, describe(args, kwargs)) as span, _running(self):
            if stamps and records_trace_ids(self):
                args, kwargs = _stamped(span, args, kwargs)
            return method(self, *args, **kwargs)

    return traced


def _wrap_pages(operation: str, method: Any) -> Any:
    """:func:`_wrap` for a generator (sync or async): the very generator the method makes
    (made at the call, as before: a bad argument raises there), and with an SDK a generator
    over it that reads each page in a span of its own, closed before the page is handed out
    (closing it closes the method's)."""
    describe = _describer(method)
    if inspect.isasyncgenfunction(method):

        async def traced_async_pages(
            self: Any, pages: Any, attributes: dict[str, Any]
        ) -> AsyncIterator[Any]:
            try:
                while True:
                    with operation_span(self, operation, attributes), _running(self):
                        try:
                            page = await pages.__anext__()
                        except StopAsyncIteration:
                            return
                    yield page
            finally:
                await pages.aclose()

        @functools.wraps(method)
        def async_pages(self: Any, *args: Any, **kwargs: Any) -> Any:
            pages = method(self, *args, **kwargs)
            if _untraced(self):
                return pages
            return traced_async_pages(self, pages, describe(args, kwargs))

        return async_pages

    def traced_pages(self: Any, pages: Any, attributes: dict[str, Any]) -> Iterator[Any]:
        with contextlib.closing(pages):
            while True:
                with operation_span(self, operation, attributes), _running(self):
                    try:
                        page = next(pages)
                    except StopIteration:
                        return
                yield page

    @functools.wraps(method)
    def sync_pages(self: Any, *args: Any, **kwargs: Any) -> Any:
        pages = method(self, *args, **kwargs)
        if _untraced(self):
            return pages
        return traced_pages(self, pages, describe(args, kwargs))

    return sync_pages


TRACE_ID_FIELD = "traceId"
SPAN_ID_FIELD = "spanId"
RECORD_TRACE_IDS = "SANDBOX_LEDGER_RECORD_TRACE_IDS"
"""The environment variable that turns :func:`records_trace_ids` on for every store of the
process (``1``); a store's own ``record_trace_ids`` attribute wins."""


def records_trace_ids(store: Any) -> bool:
    """Whether ``append`` on ``store`` records the trace and span ids of its span into the
    entry (``traceId``, ``spanId``: W3C hex, kept as every other extra field is): the store's
    ``record_trace_ids`` attribute if set, else :data:`RECORD_TRACE_IDS` in the environment.
    Off by default."""
    own = getattr(store, "record_trace_ids", None)
    if own is not None:
        return bool(own)
    return os.environ.get(RECORD_TRACE_IDS) == "1"


def _stamped(
    span: Span, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """The call's entry with the span's ids as extra fields; unchanged without a recording
    span, when the entry names a trace id already (the caller's own wins), or when it is not
    a LedgerEntry (the store refuses it as it would without telemetry). The entry is copied
    with the two fields added, not validated again: one the store would refuse (built by
    ``model_construct``) is refused by the store, with its own error."""
    from sandbox_ledger.models import LedgerEntry

    context = span.get_span_context()
    entry = args[0] if args else kwargs.get("entry")
    if (
        not isinstance(entry, LedgerEntry)
        or not context.is_valid
        or TRACE_ID_FIELD in (entry.model_extra or {})
    ):
        return args, kwargs
    stamped = entry.model_copy(
        update={
            TRACE_ID_FIELD: format(context.trace_id, "032x"),
            SPAN_ID_FIELD: format(context.span_id, "016x"),
        }
    )
    if args:
        return (stamped, *args[1:]), kwargs
    return args, {**kwargs, "entry": stamped}


def _describer(method: Any) -> Callable[[tuple[Any, ...], dict[str, Any]], dict[str, Any]]:
    """What a call's arguments say of the session it touches, by the method's parameter
    names (worked out once per method)."""
    names = list(inspect.signature(method).parameters)[1:]

    def describe(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        given = dict(zip(names, args, strict=False))
        given.update(kwargs)
        out: dict[str, Any] = {}
        entry = given.get("entry")
        if entry is not None:
            out["sandbox.name"] = getattr(entry, "name", None)
            out["sandbox.id"] = getattr(entry, "sandbox_id", None)
            event = getattr(entry, "event", None)
            out["sandbox.event"] = None if event is None else str(getattr(event, "value", event))
        record = given.get("record")
        if record is not None and hasattr(record, "name"):
            out["sandbox.name"] = record.name
        for key, attribute in (
            ("name", "sandbox.name"),
            ("sandbox_id", "sandbox.id"),
            ("record_id", "resource.id"),
        ):
            value = given.get(key)
            if isinstance(value, str):
                out[attribute] = value
        for key in _BATCHES:
            many = given.get(key)
            if many is not None and hasattr(many, "__len__"):
                out["db.operation.batch.size"] = len(many)
        return {key: value for key, value in out.items() if value is not None}

    return describe


@contextmanager
def operation_span(store: Any, operation: str, attributes: dict[str, Any]) -> Iterator[Span]:
    """The span of one operation of ``store`` (current while it runs), timed into the
    duration histogram; an exception is recorded and raised."""
    instruments = _instruments()
    target = getattr(store, "telemetry_target", None)
    system, collection, namespace = target() if target is not None else (None, None, None)
    common: dict[str, Any] = {"db.operation.name": operation}
    if system is not None:
        common["db.system.name"] = system
    if collection:
        common["db.collection.name"] = collection
    if namespace:
        common["db.namespace"] = namespace
    from opentelemetry.trace import SpanKind, Status, StatusCode

    began = time.perf_counter()
    consumed = _Consumed(common)
    token = _CONSUMED.set(consumed)
    with instruments.tracer.start_as_current_span(
        f"{operation} {collection}" if collection else operation,
        kind=SpanKind.CLIENT,
        attributes={**common, **attributes},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
            common["error.type"] = kind
            if isinstance(exc, Exception):
                span.record_exception(exc)
                span.set_attribute("error.type", kind)
                span.set_status(Status(StatusCode.ERROR, str(exc)[:500]))
            raise
        finally:
            _CONSUMED.reset(token)
            instruments.duration.record(time.perf_counter() - began, common)
            if consumed.counted:
                span.set_attribute(f"{CAPACITY}.read_units", consumed.read)
                span.set_attribute(f"{CAPACITY}.write_units", consumed.write)


CAPACITY = "sandbox_ledger.dynamodb.consumed"
"""The prefix of the consumed-capacity span attributes and counters (``.read_units``,
``.write_units``)."""
CONSUMED_CAPACITY = "SANDBOX_LEDGER_CONSUMED_CAPACITY"
"""The environment variable (``1``) that has every DynamoDB client the library makes ask for
its requests' consumed capacity (``ReturnConsumedCapacity=TOTAL``), counted per operation."""

_READS = frozenset({"GetItem", "Query", "Scan", "BatchGetItem", "TransactGetItems"})
_WRITES = frozenset({"PutItem", "UpdateItem", "DeleteItem", "BatchWriteItem", "TransactWriteItems"})


class _Consumed:
    """The units an operation's requests consumed so far (the current operation's, through
    a context variable: the requests' hooks add to it)."""

    def __init__(self, attributes: dict[str, Any]) -> None:
        self.attributes = attributes
        self.read = 0.0
        self.write = 0.0
        self.counted = False
        self.lock = threading.Lock()  # a step's parallel calls add from pool threads


_CONSUMED: ContextVar[_Consumed | None] = ContextVar("sandbox_ledger_consumed", default=None)


def watch_capacity(client: Any) -> None:
    """With :data:`CONSUMED_CAPACITY` set and an SDK installed, have ``client`` (DynamoDB)
    ask for each request's consumed capacity and count it: the read and write units of each
    operation as span attributes and as the counters ``sandbox_ledger.dynamodb.consumed.
    read_units`` and ``.write_units`` (by ``db.operation.name``, ``db.collection.name``), so
    that a team can price a session or a name. Off by default: the answers grow a little."""
    if os.environ.get(CONSUMED_CAPACITY) != "1" or not sdk_installed():
        return
    if client.meta.service_model.service_id.hyphenize() != "dynamodb":
        return
    events = client.meta.events
    events.register("provide-client-params.dynamodb", _ask_capacity)
    events.register("after-call.dynamodb", _count_capacity)


def _ask_capacity(params: dict[str, Any], model: Any, **_: Any) -> None:
    if model.name in _READS or model.name in _WRITES:
        params.setdefault("ReturnConsumedCapacity", "TOTAL")


def _count_capacity(parsed: Any = None, model: Any = None, **_: Any) -> None:
    consumed = _CONSUMED.get()
    answer = (parsed or {}).get("ConsumedCapacity")
    if consumed is None or not answer or model is None:
        return
    parts = answer if isinstance(answer, list) else [answer]
    units = sum(float(part.get("CapacityUnits", 0) or 0) for part in parts)
    kind = "read" if model.name in _READS else "write" if model.name in _WRITES else None
    if kind is None:
        return
    with consumed.lock:
        consumed.counted = True
        if kind == "read":
            consumed.read += units
        else:
            consumed.write += units
    instruments = _instruments()
    counter = instruments.read_units if kind == "read" else instruments.write_units
    counter.add(units, {k: v for k, v in consumed.attributes.items() if k != "error.type"})


def retried(reason: str, *, attempt: int, operation: str | None = None, **detail: Any) -> None:
    """Note a request sent again on the current span (an event) and in the retries counter.

    Raises:
        ValueError: ``reason`` is not one of :data:`RETRY_REASONS`.
    """
    if reason not in RETRY_REASONS:
        raise ValueError(f"reason: one of {sorted(RETRY_REASONS)}, not {reason!r}")
    if not sdk_installed():
        return
    from opentelemetry import trace

    attributes: dict[str, Any] = {"sandbox_ledger.retry.reason": reason, "attempt": attempt}
    if operation:
        attributes["sandbox_ledger.request"] = operation
    attributes.update({key: value for key, value in detail.items() if value is not None})
    trace.get_current_span().add_event("retry", attributes)
    _instruments().retries.add(1, {"sandbox_ledger.retry.reason": reason})


_FAILED = "sandbox_ledger_failed_attempts"


def watch_retries(client: Any) -> None:
    """Note the retries botocore (or aiobotocore) makes on ``client``'s requests, each as a
    :func:`retried` event of the current span with the code its attempt failed with
    (``throttle`` for DynamoDB's throttling codes, ``error`` for the others): every failed
    attempt's code is kept in the request's context, and once the request ends the first
    ``RetryAttempts`` of them are the ones that were sent again.

    Registered only when an SDK is installed as the client is made (a store makes its client
    at its first operation): without one the client's requests pay no hook."""
    if sdk_installed():
        register_retry_hooks(client)


def register_retry_hooks(client: Any) -> None:
    """:func:`watch_retries`' hooks on ``client``, whether or not an SDK is installed."""
    events = client.meta.events
    service = client.meta.service_model.service_id.hyphenize()
    events.register_first(f"needs-retry.{service}", _failed_attempt)
    events.register(f"after-call.{service}", _retries_made)


def _failed_attempt(
    response: Any = None, caught_exception: Any = None, request_dict: Any = None, **_: Any
) -> None:
    if request_dict is None:
        return None
    code = None
    if response is not None:
        code = (response[1] or {}).get("Error", {}).get("Code")
    elif caught_exception is not None:
        code = type(caught_exception).__name__
    if code is not None:
        request_dict.setdefault("context", {}).setdefault(_FAILED, []).append(code)
    return None


def _retries_made(parsed: Any = None, model: Any = None, context: Any = None, **_: Any) -> None:
    made = int((parsed or {}).get("ResponseMetadata", {}).get("RetryAttempts", 0) or 0)
    if not made or not sdk_installed():
        return
    from sandbox_ledger.errors import THROTTLE_CODES

    failed = (context or {}).get(_FAILED, [])
    for attempt in range(1, made + 1):
        code = failed[attempt - 1] if attempt <= len(failed) else None
        reason = "throttle" if code in THROTTLE_CODES else "error"
        retried(reason, attempt=attempt, operation=getattr(model, "name", None), code=code)


P = ParamSpec("P")
R = TypeVar("R")


def traced_run(
    name: str, describe: Callable[[R], tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]]
) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """A decorator for a run of the deployment's work (a sweep, a batch of TTL removals):
    one span ``name`` (kind INTERNAL, current while it runs: the stores' spans are its
    children) whose attributes and events ``describe(result)`` gives (the counts; an event
    per record expired). A run that raises records the exception and ERROR."""

    def decorate(run: Callable[P, R]) -> Callable[P, R]:
        @functools.wraps(run)
        def traced(*args: P.args, **kwargs: P.kwargs) -> R:
            from opentelemetry.trace import SpanKind

            with _instruments().tracer.start_as_current_span(name, kind=SpanKind.INTERNAL) as span:
                result = run(*args, **kwargs)
                if span.is_recording():
                    attributes, events = describe(result)
                    span.set_attributes(attributes)
                    for event, detail in events:
                        span.add_event(event, detail)
                return result

        return traced

    return decorate


Traced = tuple[Any, str, dict[str, Any]]
"""What a follow or changes loop names its polls' spans by: the store, the operation
(``follow``, ``changes``) and the attributes (the session followed)."""


def poll_span(traced: Traced | None) -> AbstractContextManager[Any]:
    """The span of one poll of a follow or changes loop (:func:`operation_span`), or nothing
    without ``traced`` or an SDK."""
    if traced is None or not sdk_installed():
        return nullcontext()
    store, operation, attributes = traced
    return operation_span(store, operation, attributes)
