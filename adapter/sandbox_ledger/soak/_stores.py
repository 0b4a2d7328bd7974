"""What every process of a run does with its store, and the arguments each is started with."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


async def close_store(store: Any) -> None:
    """Release a store ``open_store`` made (DynamoDB's client, a SQL pool; memory has none)."""
    close = getattr(store, "close", None)
    if close is not None:
        await close()


def process_arguments(module: str, *, seeded: bool = True) -> argparse.ArgumentParser:
    """The parser of ``python -m sandbox_ledger.soak.<module>``, with the arguments every
    process of the fleet is started with (:meth:`Fleet._start`): ``--store URL --history FILE
    --name NAME --seconds S``, and ``--seed N`` where ``seeded``; a process adds its own."""
    parser = argparse.ArgumentParser(prog=f"python -m sandbox_ledger.soak.{module}")
    parser.add_argument("--store", required=True)
    parser.add_argument("--history", required=True, type=Path)
    parser.add_argument("--name", required=True)
    if seeded:
        parser.add_argument("--seed", required=True, type=int)
    parser.add_argument("--seconds", required=True, type=float)
    return parser
