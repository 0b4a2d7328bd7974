"""The fleet's exporter: exports sessions, running ones too, while the fleet writes them, and
records what each export held, until its time is up or it is killed.

``python -m sandbox_ledger.soak.exporter --store URL --history FILE --name NAME --seed N
--seconds S``. Each export is one operation, ``export``: it picks up to four sessions (from
a listing of running sessions and, now and then, a scan of every session with entries, as
``sandbox-ledger export`` makes), exports them with :func:`~sandbox_ledger.transfer.
export_lines` and completes with the content digests of each session's lines in file order
(``got``). The checker holds each to what the store holds at the end (:mod:`.transfers`).
"""

from __future__ import annotations

import random
import time
from typing import Any

from sandbox_ledger.blocking import open_blocking_store
from sandbox_ledger.models import LedgerEntry, ListSandboxOptions, SandboxStatus
from sandbox_ledger.soak._stores import process_arguments
from sandbox_ledger.soak.history import History
from sandbox_ledger.soak.worker import LEDGER_NAME
from sandbox_ledger.transfer import content_digest, export_lines, parse_line

__all__ = ["export_sessions"]

SCAN_EVERY = 4
"""Every how many exports the exporter scans the store for its sessions again."""


def export_sessions(ledger: Any, sessions: list[str]) -> dict[str, list[str]]:
    """The content digests of each session's exported lines, in file order (a session with
    no line left out)."""
    got: dict[str, list[str]] = {}
    for line in export_lines(ledger, [(LEDGER_NAME, sid) for sid in sessions]):
        entry = parse_line(line.encode())
        if isinstance(entry, LedgerEntry):
            got.setdefault(entry.sandbox_id, []).append(content_digest(entry))
    return got


def run(ledger: Any, history: History, rng: random.Random, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    running = ListSandboxOptions(status=SandboxStatus.Running, limit=20)
    scanned: list[str] = []
    exports = 0
    while time.monotonic() < deadline:
        try:
            if exports % SCAN_EVERY == 0:
                scanned = [sid for n, sid in ledger.scan_sessions(LEDGER_NAME) if n == LEDGER_NAME]
            live = [d.sandbox_id for d in ledger.list_sandbox_details(LEDGER_NAME, running)]
        except Exception:  # a reset connection: listed again next time
            time.sleep(0.2)
            continue
        exports += 1
        pool = sorted(
            set(rng.sample(live, min(2, len(live))) + rng.sample(scanned, min(2, len(scanned))))
        )
        if not pool:
            time.sleep(0.2)
            continue
        number = history.invoke("export", sessions=pool)
        try:
            got = export_sessions(ledger, pool)
        except Exception as exc:  # recorded: what it would have held is unknown
            history.fail(number, exc)
            continue
        history.ok(number, got=got)
        time.sleep(rng.uniform(0, 0.3))


def main(argv: list[str] | None = None) -> None:
    parser = process_arguments("exporter")
    args = parser.parse_args(argv)
    history = History(args.history, args.name)
    ledger = open_blocking_store(args.store)
    try:
        run(ledger, history, random.Random(args.seed), args.seconds)
    finally:
        ledger.close()
        history.close()


if __name__ == "__main__":
    main()
