"""Where the CLI's commands find their store: a store URL, a DynamoDB table from flags and
environment, or an embedded moto server."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox_ledger._redact import redact_url
from sandbox_ledger.cli.output import shell_word
from sandbox_ledger.errors import InvalidInputError

if TYPE_CHECKING:
    from collections.abc import Callable
    from datetime import timedelta

    from sandbox_ledger.blocking import BlockingAdapter

EMBEDDED_TABLE = "sandbox-ledger"
PG_CONNECT_TIMEOUT = 3.0
"""Seconds the CLI waits for a PostgreSQL connection (the library's default, 30, is for
servers): a dead server fails a command within seconds."""


@dataclass
class Target:
    """The table and connection settings every command uses."""

    table: str | None
    endpoint_url: str | None
    region: str | None
    profile: str | None
    shard_count: int | None = None
    """Given with --shard-count; None: the table's descriptor says (default 4 without one)."""
    retention: timedelta | None = None
    """A dynamodb:// URL's ``retention_days``; None: writes follow the table's descriptor."""
    debug: bool = False
    embedded: bool = False
    store: str | None = None
    """A store URL (--store / SANDBOX_LEDGER_STORE); see :func:`sandbox_ledger.open_store`."""
    table_from_env: bool = False
    """The table came from SANDBOX_LEDGER_TABLE, not --table (a later --store overrides it)."""
    store_from_env: bool = False
    """The store came from SANDBOX_LEDGER_STORE, not --store."""
    so_far: Callable[[], str] | None = None
    """How far the command got, for the line an interruption prints (None: its usual one)."""
    after_failure: Callable[[], str | None] | None = None
    """How far the command got, added to the line of a failure that stops it part way."""
    _stack: ExitStack = field(default_factory=ExitStack)

    def resolve(self) -> None:
        """Apply a dynamodb:// store URL, or start the embedded DynamoDB if no table or store
        is configured (only the demo allows it: see :func:`sandbox_ledger.cli.connect.target`;
        announced on stderr)."""
        if self.store:
            from sandbox_ledger.stores import parse_store_url

            if self.table:
                raise InvalidInputError(
                    "--store, --table",
                    "give one, not both (or SANDBOX_LEDGER_STORE and SANDBOX_LEDGER_TABLE)",
                )
            kind, kwargs = parse_store_url(self.store)
            if kind != "dynamodb":
                return
            self.table = kwargs["table_name"]
            self.region = kwargs.get("region_name", self.region)
            self.endpoint_url = kwargs.get("endpoint_url", self.endpoint_url)
            self.shard_count = kwargs.get("shard_count", self.shard_count)
            self.retention = kwargs.get("retention", self.retention)
        if self.table:
            return
        # In a child process: the server's CPU does not wait on this command's (the demo's
        # client and the server then run on two cores).
        from sandbox_ledger.local import LocalDynamoDBProcess

        server = LocalDynamoDBProcess()
        self.endpoint_url = server.start()
        self._stack.callback(server.stop)
        self.table = EMBEDDED_TABLE
        self.embedded = True
        self.region = self.region or "us-east-1"
        print(
            f"No table configured (--table or SANDBOX_LEDGER_TABLE): the demo runs on an "
            f"embedded DynamoDB (moto) at {self.endpoint_url}; its data lives only as long as "
            "this command.",
            file=sys.stderr,
        )

    def sql_or_memory_store(self, *, read_only: bool) -> BlockingAdapter | None:
        """The store the URL names, when it is not DynamoDB (whose commands use the table),
        driven synchronously; ``read_only``: a missing store is not found, never created."""
        if not self.store or self.table:
            return None
        from sandbox_ledger.blocking import BlockingAdapter
        from sandbox_ledger.stores import open_store

        opened = open_store(self.store, read_only=read_only, connect_timeout=PG_CONNECT_TIMEOUT)
        blocking = BlockingAdapter(opened)
        self._stack.callback(blocking.close)
        return blocking

    def require_dynamodb(self, what: str) -> None:
        """Refuse a command that only exists for DynamoDB when another store is named."""
        if self.store and not self.table:
            raise InvalidInputError("--store", f"{what} needs a DynamoDB store (dynamodb://TABLE)")

    def kwargs(self, *, interactive: bool = True) -> dict[str, Any]:
        """Constructor arguments for adapters and stores (see :func:`cli_config`)."""
        return {
            "endpoint_url": self.endpoint_url,
            "region_name": self.region,
            # None: each adapter or store reads the table's descriptor; a given value must agree.
            "shard_count": self.shard_count,
            "config": cli_config(interactive=interactive),
        }

    def where(self) -> str:
        """The endpoint and region this command talks to, for error messages."""
        region = self.region or "(no region set)"
        endpoint = self.endpoint_url or (
            f"https://dynamodb.{self.region}.amazonaws.com" if self.region else "AWS"
        )
        return f"{endpoint}, region {region}"

    def describe(self) -> str:
        """What this command works on, for messages: the table with its region and endpoint,
        or the store URL (without a password)."""
        if self.store and not self.table:
            return f"store {redact_url(self.store)}"
        return f"table {self.table} {self.place()}"

    def place(self) -> str:
        """``in region R at endpoint E``."""
        region = self.region or "(no region set)"
        endpoint = self.endpoint_url or (
            f"https://dynamodb.{self.region}.amazonaws.com" if self.region else "AWS"
        )
        return f"in region {region} at endpoint {endpoint}"

    def command(self, *words: str) -> str:
        """A command line that names this same store, for suggestions (quoted for a shell;
        ``words`` are given quoted where they need it)."""
        if self.store:
            naming = f" --store {shell_word(redact_url(self.store))}"
        elif self.table and not self.table_from_env:
            naming = f" --table {shell_word(self.table)}"
        else:
            naming = ""
        return " ".join(("sandbox-ledger" + naming, *words))

    def table_source(self) -> str:
        """Where the table name came from, to name it in an error about the name."""
        if self.store:
            return "SANDBOX_LEDGER_STORE" if self.store_from_env else "--store"
        return "SANDBOX_LEDGER_TABLE" if self.table_from_env else "--table"

    def boto3_session(self) -> Any:
        import boto3

        return boto3.session.Session(profile_name=self.profile) if self.profile else None

    def aioboto3_session(self) -> Any:
        import aioboto3

        return aioboto3.Session(profile_name=self.profile) if self.profile else None

    def close(self) -> None:
        self._stack.close()


def cli_config(*, interactive: bool = True) -> Any:
    """The CLI's budget over the library's defaults (which suit servers and Lambda).

    Someone is waiting on an interactive command: connect within 2 s and try twice at most,
    so an unreachable endpoint or a wrong region fails in seconds rather than after minutes
    of retries. Bulk commands (import) keep the library's retries for throttling, after a
    first request with the interactive budget (:func:`sandbox_ledger.cli.connect.ledger`).
    """
    from botocore.config import Config

    if not interactive:
        return Config(connect_timeout=2)
    return Config(
        connect_timeout=2, read_timeout=15, retries={"mode": "standard", "total_max_attempts": 2}
    )


def from_environment(
    table: str | None,
    endpoint_url: str | None,
    region: str | None,
    profile: str | None,
    shard_count: int | None,
    debug: bool,
    store: str | None = None,
) -> Target:
    """Flags first, then SANDBOX_LEDGER_STORE, SANDBOX_LEDGER_TABLE, AWS_ENDPOINT_URL,
    AWS_REGION, AWS_PROFILE."""
    # An explicit flag wins over the environment variable of the other kind, so an exported
    # SANDBOX_LEDGER_TABLE never breaks a `--store ...` given on the command line.
    env_store = None if table else os.environ.get("SANDBOX_LEDGER_STORE") or None
    env_table = None if store else os.environ.get("SANDBOX_LEDGER_TABLE") or None
    return Target(
        store=store or env_store,
        store_from_env=not store and env_store is not None,
        table=table or env_table,
        table_from_env=not table and env_table is not None,
        endpoint_url=endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None,
        region=region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        profile=profile or os.environ.get("AWS_PROFILE") or None,
        shard_count=shard_count,
        debug=debug,
    )
