"""``sandbox-ledger local --deployment``: the deployment's scheduled code beside the server
(:mod:`sandbox_ledger.local.services`), its events on a local bus
(:mod:`sandbox_ledger.local.bus`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sandbox_ledger.cli.output import say

if TYPE_CHECKING:
    from pathlib import Path

    from sandbox_ledger.local.services import DeploymentServices


@dataclass(frozen=True)
class Deployment:
    """What ``--deployment`` runs: events to ``events`` (stdout, a file, a URL), a sweep
    every ``sweep_every`` seconds."""

    events: str = "stdout"
    sweep_every: float = 300.0


def start(
    endpoint: str, table: str, data: Path | None, deployment: Deployment
) -> DeploymentServices:
    """Start the sweeper and the TTL reporter of ``table``; with ``data``, the reporter's
    position, a batch it gives up on and an event no try delivered are kept beside it
    (``.FILE.ttl-position``, ``.FILE.ttl-failures.jsonl``, ``.FILE.dead-letters.jsonl``)."""
    from sandbox_ledger.local.bus import LocalBus
    from sandbox_ledger.local.services import DeploymentServices

    beside = None if data is None else data.resolve()
    failures = None if beside is None else beside.with_name(f".{beside.name}.ttl-failures.jsonl")
    dead = None if beside is None else beside.with_name(f".{beside.name}.dead-letters.jsonl")
    position = None if beside is None else beside.with_name(f".{beside.name}.ttl-position")
    bus = LocalBus(deployment.events, dead_letters=dead)
    services = DeploymentServices(
        endpoint,
        table,
        bus,
        sweep_every=deployment.sweep_every,
        say=say,
        failures=failures,
        position=position,
    )
    services.start()
    for line in services.describe():
        say(f"deployment: {line}")
    return services
