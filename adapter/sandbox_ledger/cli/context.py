"""Where the CLI's commands find DynamoDB: flags and environment, or an embedded moto server."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any

from sandbox_ledger import keys as k
from sandbox_ledger.local import LocalDynamoDB

EMBEDDED_TABLE = "sandbox-ledger"


@dataclass
class Target:
    """The table and connection settings every command uses."""

    table: str | None
    endpoint_url: str | None
    region: str | None
    profile: str | None
    shard_count: int = k.DEFAULT_SHARD_COUNT
    debug: bool = False
    embedded: bool = False
    _stack: ExitStack = field(default_factory=ExitStack)

    def resolve(self) -> None:
        """Start the embedded DynamoDB if no table is configured (announced on stderr)."""
        if self.table:
            return
        server = LocalDynamoDB()
        self.endpoint_url = server.start()
        self._stack.callback(server.stop)
        self.table = EMBEDDED_TABLE
        self.embedded = True
        self.region = self.region or "us-east-1"
        print(
            f"No table configured (--table or SANDBOX_LEDGER_TABLE): using an embedded "
            f"DynamoDB (moto) at {self.endpoint_url}; its data lives only as long as this "
            "command.",
            file=sys.stderr,
        )

    def kwargs(self) -> dict[str, Any]:
        """Constructor arguments for adapters and stores."""
        return {
            "endpoint_url": self.endpoint_url,
            "region_name": self.region,
            "shard_count": self.shard_count,
        }

    def boto3_session(self) -> Any:
        import boto3

        return boto3.session.Session(profile_name=self.profile) if self.profile else None

    def aioboto3_session(self) -> Any:
        import aioboto3

        return aioboto3.Session(profile_name=self.profile) if self.profile else None

    def close(self) -> None:
        self._stack.close()


def from_environment(
    table: str | None,
    endpoint_url: str | None,
    region: str | None,
    profile: str | None,
    shard_count: int,
    debug: bool,
) -> Target:
    """Flags first, then SANDBOX_LEDGER_TABLE, AWS_ENDPOINT_URL, AWS_REGION, AWS_PROFILE."""
    return Target(
        table=table or os.environ.get("SANDBOX_LEDGER_TABLE") or None,
        endpoint_url=endpoint_url or os.environ.get("AWS_ENDPOINT_URL") or None,
        region=region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
        profile=profile or os.environ.get("AWS_PROFILE") or None,
        shard_count=shard_count,
        debug=debug,
    )
