"""One lazily created, reused DynamoDB client per adapter or store, sync (boto3) or async."""

from __future__ import annotations

import asyncio
import threading
from contextlib import AsyncExitStack
from typing import Any

import boto3
from botocore.config import Config

# Standard retry mode: exponential backoff with jitter on throttling, 5xx and connection errors.
DEFAULT_CONFIG = Config(
    retries={"mode": "standard", "max_attempts": 10},
    connect_timeout=5,
    read_timeout=30,
    tcp_keepalive=True,
    # Shard queries run in parallel; keep their connections pooled.
    max_pool_connections=50,
)


def client_config(config: Config | None) -> Config:
    """The default configuration with the caller's settings taking precedence."""
    return DEFAULT_CONFIG.merge(config) if config is not None else DEFAULT_CONFIG


class SyncClient:
    """A boto3 DynamoDB client, created on first use and shared by every thread."""

    def __init__(
        self,
        *,
        endpoint_url: str | None,
        region_name: str | None,
        session: Any | None,
        config: Config | None,
    ) -> None:
        self._kwargs: dict[str, Any] = {"config": client_config(config)}
        if endpoint_url:
            self._kwargs["endpoint_url"] = endpoint_url
        if region_name:
            self._kwargs["region_name"] = region_name
        self._session = session
        self._client: Any | None = None
        self._lock = threading.Lock()

    def get(self) -> Any:
        """The client, created once."""
        client = self._client
        if client is None:
            with self._lock:
                if self._client is None:
                    session = self._session or boto3.session.Session()
                    self._client = session.client("dynamodb", **self._kwargs)
                client = self._client
        return client

    def close(self) -> None:
        """Release the connection pool; the next call creates a new client."""
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            client.close()


class AsyncClient:
    """An aioboto3 DynamoDB client, created on first use and shared by the loop's tasks."""

    def __init__(
        self,
        *,
        endpoint_url: str | None,
        region_name: str | None,
        session: Any | None,
        config: Config | None,
    ) -> None:
        self._kwargs: dict[str, Any] = {"config": client_config(config)}
        if endpoint_url:
            self._kwargs["endpoint_url"] = endpoint_url
        if region_name:
            self._kwargs["region_name"] = region_name
        self._session = session
        self._client: Any | None = None
        self._stack: AsyncExitStack | None = None
        self._lock: asyncio.Lock | None = None

    async def get(self) -> Any:
        """The client, created once (concurrent first calls wait for the same one)."""
        if self._client is not None:
            return self._client
        if self._lock is None:
            self._lock = asyncio.Lock()
        async with self._lock:
            if self._client is None:
                import aioboto3

                session = self._session or aioboto3.Session()
                stack = AsyncExitStack()
                self._client = await stack.enter_async_context(
                    session.client("dynamodb", **self._kwargs)
                )
                self._stack = stack
            return self._client

    async def close(self) -> None:
        """Release the connection pool; the next call creates a new client."""
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()
