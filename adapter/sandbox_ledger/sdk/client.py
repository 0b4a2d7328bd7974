"""One lazily created, reused DynamoDB client per adapter or store, sync (boto3) or async."""

from __future__ import annotations

import copy
import importlib.util
import os
import threading
from contextlib import AsyncExitStack
from typing import TYPE_CHECKING, Any, Self, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError

from sandbox_ledger.errors import translate_client_error
from sandbox_ledger.sdk import wire
from sandbox_ledger.sdk.steps import Op, run_async, run_sync
from sandbox_ledger.telemetry import watch_capacity, watch_retries

if TYPE_CHECKING:
    import asyncio
    from types import TracebackType

T = TypeVar("T")
STREAMS = "dynamodbstreams"
"""The DynamoDB Streams service, whose client ``changes()`` reads the table's stream with."""

# Standard retry mode: exponential backoff with jitter on throttling, 5xx and connection errors.
DEFAULT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 10},
    connect_timeout=5,
    read_timeout=30,
    tcp_keepalive=True,
    # Shard queries run in parallel; keep their connections pooled.
    max_pool_connections=50,
    # The library builds every request's parameters itself, from values it has checked
    # (its own exceptions name the field), and DynamoDB checks them again: botocore's walk of
    # them against the input shape was a sixth of an append's client CPU. A caller's config
    # that sets parameter_validation wins, as any setting does.
    parameter_validation=False,
)


def client_config(config: Config | None) -> Config:
    """The default configuration with the caller's settings taking precedence."""
    return DEFAULT_CONFIG.merge(config) if config is not None else DEFAULT_CONFIG


def _sets_validation(config: Config | None) -> bool:
    return config is not None and "parameter_validation" in config._user_provided_options


def _with_profile_validation(session: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` whose config takes the profile's ``parameter_validation`` (the AWS config
    file's), if it sets one: botocore lets any client config that turns validation off beat
    the profile, so the library's default would otherwise silence it (a caller's own config
    that sets it is left as it is)."""
    botocore_session = getattr(session, "_session", None)
    if botocore_session is None:
        return kwargs
    raw = botocore_session.get_scoped_config().get("parameter_validation")
    if raw is None:
        return kwargs
    from botocore.utils import ensure_boolean

    config = kwargs["config"].merge(Config(parameter_validation=ensure_boolean(raw)))
    return {**kwargs, "config": config}


def resolve_region(region_name: str | None) -> str | None:
    """The region as the AWS tools find it: the argument, then ``AWS_REGION``, then (left to
    botocore) ``AWS_DEFAULT_REGION`` and the profile's region."""
    return region_name or os.environ.get("AWS_REGION") or None


def _client_kwargs(
    endpoint_url: str | None, region_name: str | None, config: Config | None
) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"config": client_config(config)}
    if endpoint_url:
        kwargs["endpoint_url"] = endpoint_url
    region = resolve_region(region_name)
    if region:
        kwargs["region_name"] = region
    return kwargs


# A new session loads and parses the service model again: about 50-100 ms of CPU per client
# (each command of the CLI, each adapter of a test suite). Sessions made here stay one per
# client (credentials, region and profile are resolved per client, as the AWS tools do) but
# read service models through one shared loader, which parses each model once, and start from
# a copy of botocore's built-in event handlers instead of registering each of them again
# (about 5 ms of CPU per session, a tenth of that copied).
_shared_loader: Any = None
_loader_lock = threading.Lock()
_templates: dict[type, Any] = {}  # session class -> an event emitter holding the built-ins


def _new_botocore_session(cls: type) -> Any:
    """A new botocore session of ``cls`` (botocore's or aiobotocore's) as ``cls()`` makes it:
    botocore's built-in handlers (copied from a template emitter of that class, in the same
    order), then what the initializers registered with ``botocore.register_initializer``
    add (as for any session), in an event emitter of its own (handlers registered on one
    session are never seen by another)."""
    with _loader_lock:
        if cls not in _templates:  # once per class, a None (no template) included
            _templates[cls] = _builtins_only(cls)
        template = _templates[cls]
    if template is None:  # a botocore that keeps its handlers elsewhere: register them anew
        return cls()
    own = copy.copy(template)
    own._lookup_cache = {}  # botocore's copy shares the template's cache of lookups
    return cls(event_hooks=own, include_builtin_handlers=False)


def _builtins_only(cls: type) -> Any:
    """An event emitter of ``cls``'s kind holding botocore's built-in handlers and nothing
    else (None if this botocore does not build sessions as this expects)."""
    from botocore.hooks import EventAliaser

    try:
        registrar = cls(include_builtin_handlers=False)
        emitter = type(registrar._original_handler)()
        if not isinstance(getattr(emitter, "_lookup_cache", None), dict):
            return None
        registrar._events = EventAliaser(emitter)
        registrar._register_builtin_handlers(registrar._events)
    except (AttributeError, TypeError):
        return None
    return emitter


def _with_shared_loader(botocore_session: Any) -> Any:
    global _shared_loader
    with _loader_lock:
        if _shared_loader is None:
            _shared_loader = botocore_session.get_component("data_loader")
    botocore_session.register_component("data_loader", _shared_loader)
    return botocore_session


def _deduplicated(session: Any) -> Any:
    """boto3 appends its own data path to the loader's search paths on every new session:
    keep each path once on the shared loader."""
    with _loader_lock:
        paths = _shared_loader.search_paths
        paths[:] = list(dict.fromkeys(paths))
    return session


def sync_session() -> Any:
    """A new boto3 session reading service models through the shared loader (for every
    sync client the library and its CLI make)."""
    import botocore.session

    botocore_session = _with_shared_loader(_new_botocore_session(botocore.session.Session))
    return _deduplicated(boto3.session.Session(botocore_session=botocore_session))


ASYNC_EXTRA = ("aioboto3", "aiobotocore", "aiohttp")
"""What the async adapter and store import: the ``async`` extra (a sync worker needs none)."""


def require_async_extra() -> None:
    """Raise one line naming the ``async`` extra if a module of it is not installed."""
    for name in ASYNC_EXTRA:
        if importlib.util.find_spec(name) is None:
            raise ModuleNotFoundError(
                "the async adapter and store need the 'async' extra: "
                f"pip install 'sandbox-ledger-dynamodb[async]' (missing module: {name})",
                name=name,
            )


def _async_session() -> Any:
    """A new aioboto3 session reading service models through the shared loader."""
    import aioboto3
    from aiobotocore.session import AioSession

    botocore_session = _with_shared_loader(_new_botocore_session(AioSession))
    return _deduplicated(aioboto3.Session(botocore_session=botocore_session))


def _async_config(merged: Config, given: Config | None) -> Config:
    """``merged`` as an aiobotocore config whose HTTP session shares one TLS context per CA
    bundle (:mod:`.tls`), unless the caller's own config chose its HTTP session class or its
    connector arguments (``AioConfig.merge`` keeps neither, so they are carried over here)."""
    from aiobotocore.config import AioConfig
    from aiobotocore.endpoint import DEFAULT_HTTP_SESSION_CLS

    from sandbox_ledger.sdk.tls import SharedTLSSession

    session_cls, connector_args = SharedTLSSession, None
    if isinstance(given, AioConfig):
        connector_args = given.connector_args
        if given.http_session_cls is not DEFAULT_HTTP_SESSION_CLS:
            session_cls = given.http_session_cls
    options = merged._user_provided_options  # what Config.merge itself combines
    return AioConfig(connector_args, http_session_cls=session_cls, **options)


class SyncClient:
    """A boto3 DynamoDB client (or ``service``'s), created on first use and shared by every
    thread."""

    def __init__(
        self,
        *,
        endpoint_url: str | None,
        region_name: str | None,
        session: Any | None,
        config: Config | None,
        service: str = "dynamodb",
    ) -> None:
        self._service = service
        self._kwargs = _client_kwargs(endpoint_url, region_name, config)
        self._validation_given = _sets_validation(config)
        self._session = session
        self._client: Any | None = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        """The client, created once."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    try:
                        session = self._session or sync_session()
                        kwargs = self._kwargs
                        if not self._validation_given:
                            kwargs = _with_profile_validation(session, kwargs)
                        self._client = session.client(self._service, **kwargs)
                        wire.install(self._client)
                        watch_retries(self._client)
                        watch_capacity(self._client)
                    except BotoCoreError as exc:
                        raise translate_client_error(exc) from exc
                client = self._client
        return client

    def close(self) -> None:
        """Release the connection pool; the next call creates a new client."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


class AsyncClient:
    """An aioboto3 DynamoDB client (or ``service``'s), created on first use and shared by
    the loop's tasks."""

    def __init__(
        self,
        *,
        endpoint_url: str | None,
        region_name: str | None,
        session: Any | None,
        config: Config | None,
        service: str = "dynamodb",
    ) -> None:
        require_async_extra()
        self._service = service
        self._kwargs = _client_kwargs(endpoint_url, region_name, config)
        self._given_config = config
        self._session = session
        self._client: Any | None = None
        self._stack: AsyncExitStack | None = None
        self._lock: asyncio.Lock | None = None

    async def get(self) -> Any:
        """The client, created once (concurrent first calls wait for the same one)."""
        if self._client is not None:
            return self._client
        if self._lock is None:
            import asyncio  # here: a sync caller (a Lambda handler) never imports asyncio

            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None:
                stack = AsyncExitStack()
                try:
                    session = self._session or _async_session()
                    kwargs = self._kwargs
                    if not _sets_validation(self._given_config):
                        kwargs = _with_profile_validation(session, kwargs)
                    config = _async_config(kwargs["config"], self._given_config)
                    self._client = await stack.enter_async_context(
                        session.client(self._service, **{**self._kwargs, "config": config})
                    )
                    wire.install(self._client, aio=True)
                    watch_retries(self._client)
                    watch_capacity(self._client)
                except BotoCoreError as exc:
                    raise translate_client_error(exc) from exc
                self._stack = stack
            return self._client

    async def close(self) -> None:
        """Release the connection pool; the next call creates a new client."""
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()


C = TypeVar("C", SyncClient, AsyncClient)


def _pair(
    kind: type[C], endpoint_url: str | None, region_name: str | None, **more: Any
) -> tuple[C, C]:
    """A DynamoDB client and a DynamoDB Streams client (what ``changes`` reads the table's
    stream with), both made on first use."""
    where = {"endpoint_url": endpoint_url, "region_name": region_name, **more}
    return kind(**where), kind(**where, service=STREAMS)


class SyncClientOwner:
    """Client plumbing of the sync adapter and store: one client, created on first use and
    shared by every thread, released by ``close()``, and a context manager."""

    _client: SyncClient
    _streams: SyncClient

    def _open(
        self,
        *,
        endpoint_url: str | None,
        region_name: str | None,
        session: Any | None,
        config: Config | None,
    ) -> None:
        self._client, self._streams = _pair(
            SyncClient, endpoint_url, region_name, session=session, config=config
        )

    def run_streams(self, op: Op[T]) -> T:
        """Run an operation of DynamoDB Streams calls on this owner's streams client."""
        return run_sync(self._streams.get(), op)

    def client(self) -> Any:
        """The underlying botocore client (created on first use), e.g. to add event hooks."""
        return self._client.get()

    def run(self, op: Op[T]) -> T:
        """Run one of the package's operations on this client."""
        return run_sync(self._client.get(), op)

    def connect(self) -> None:
        """Create the client now instead of on first use; idempotent."""
        self._client.get()

    def close(self) -> None:
        """Release the client; idempotent. It is created again if used after."""
        self._client.close()
        self._streams.close()

    def __enter__(self) -> Self:
        self.connect()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClientOwner:
    """Client plumbing of the async adapter and store: one aioboto3 client, created on first
    use and shared by the event loop's tasks, released by ``close()``."""

    _client: AsyncClient
    _streams: AsyncClient

    def _open(
        self,
        *,
        endpoint_url: str | None,
        region_name: str | None,
        session: Any | None,
        config: Config | None,
    ) -> None:
        self._client, self._streams = _pair(
            AsyncClient, endpoint_url, region_name, session=session, config=config
        )

    async def run_streams(self, op: Op[T]) -> T:
        """Run an operation of DynamoDB Streams calls on this owner's streams client."""
        return await run_async(await self._streams.get(), op)

    async def client(self) -> Any:
        """The underlying aiobotocore client (created on first use), e.g. to add event hooks."""
        return await self._client.get()

    async def run(self, op: Op[T]) -> T:
        """Run one of the package's operations on this client."""
        return await run_async(await self._client.get(), op)

    async def connect(self) -> None:
        """Create the client now instead of on first use; idempotent."""
        await self._client.get()

    async def close(self) -> None:
        """Release the client; idempotent. It is created again if used after."""
        await self._client.close()
        await self._streams.close()

    async def __aenter__(self) -> Self:
        await self.connect()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()
