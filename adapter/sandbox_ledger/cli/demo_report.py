"""The demo's summary: tables on the console, or one JSON document (``demo --json``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sandbox_ledger.cli.output import plain
from sandbox_ledger.cli.render import print_table
from sandbox_ledger.models import SandboxStatus

if TYPE_CHECKING:
    from rich.console import Console

    from sandbox_ledger.cli.demo import Report


def _ms(samples: list[float], q: float) -> str:
    ordered = sorted(samples)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.1f}"


def render(report: Report, console: Console) -> None:
    """The summary tables (what they quote of the store shown
    :func:`~sandbox_ledger.cli.output.visible`, never as markup)."""
    ops = [
        [
            plain(op),
            plain(str(len(report.latencies[op]))),
            plain(f"{report.calls[op] / len(report.latencies[op]):.2f}"),
            plain(_ms(report.latencies[op], 0.5)),
            plain(_ms(report.latencies[op], 0.99)),
        ]
        for op in sorted(report.latencies)
    ]
    columns = ("operation", "count", "SDK requests/op", "p50 ms", "p99 ms")
    print_table(columns, ops, ("count", "p50 ms"), title="Operations", console=console)
    sessions = [
        [plain(str(status)), plain(str(report.statuses[str(status)]))]
        for status in (SandboxStatus.Running, SandboxStatus.Completed)
    ]
    print_table(("status", "sessions"), sessions, title="Sessions", console=console)
    rows = []
    for record_id in report.sweep.get("expired", []):
        provider, phase = report.records.get(record_id, ("?", "?"))
        reason = report.sweep["reasons"].get(record_id, "")
        rows.append([plain(cell) for cell in (record_id, provider, phase, reason)])
    # Each fitted to the terminal: an operation's name or a record's id is never cut.
    print_table(
        ("record", "provider", "phase", "why"),
        rows,
        ("provider", "phase"),
        title=f"Expired resource records ({report.sweep_via})",
        console=console,
    )
    console.print(
        f"{report.entries} ledger entries; {report.resumed} sandboxes resumed from their "
        f"ledger; environments built {report.environments_built}, reused "
        f"{report.environments_reused}; records expired {len(report.sweep.get('expired', []))}, "
        f"skipped {len(report.sweep.get('skipped', []))} (owners still heartbeating, or failed "
        f"cleanups kept for attention); {report.elapsed:.1f}s"
    )
    console.print(
        "The sweeper's clock is simulated: a first sweep observed the candidates, and a "
        f"second ran with its clock {report.sweep_clock.total_seconds() / 60:g} minutes later "
        "(one window), as the scheduled sweep would, so records whose owners died expire "
        "within this run."
    )
    console.print(
        f"{report.concurrency} sandboxes at once; latency includes queueing behind the others "
        "(the embedded server answers one request at a time). Requests per operation carry "
        "over to DynamoDB."
    )


def report_json(report: Report) -> dict[str, Any]:
    """The summary as JSON (``demo --json``): what :func:`render` shows, as numbers."""
    operations = {
        op: {
            "count": len(samples),
            "requestsPerOp": round(report.calls[op] / len(samples), 2),
            "p50Ms": float(_ms(samples, 0.5)),
            "p99Ms": float(_ms(samples, 0.99)),
        }
        for op, samples in sorted(report.latencies.items())
    }
    return {
        "operations": operations,
        "sessions": {str(s): report.statuses[str(s)] for s in SandboxStatus},
        "expired": {
            record_id: {
                "provider": report.records.get(record_id, ("?", "?"))[0],
                "phase": report.records.get(record_id, ("?", "?"))[1],
                "reason": report.sweep.get("reasons", {}).get(record_id, ""),
            }
            for record_id in report.sweep.get("expired", [])
        },
        "sweepClockAdvancedSeconds": int(report.sweep_clock.total_seconds()),
        "skipped": len(report.sweep.get("skipped", [])),
        "sweptBy": report.sweep_via,
        "entries": report.entries,
        "resumed": report.resumed,
        "environmentsBuilt": report.environments_built,
        "environmentsReused": report.environments_reused,
        "elapsedSeconds": round(report.elapsed, 3),
    }
