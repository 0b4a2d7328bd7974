"""A session's timeline as a picture: an SVG drawn on the server from its entries.

One lane per branch (the sandbox-level events in a lane of their own at the top), each exec
a bar from its ``exec.started`` to its ``exec.complete`` or ``exec.failed`` (a failed one
marked, its error in its title; one never ended runs to the session's last entry and is
drawn open), checkpoints as markers with their snapshot id and tag, the sandbox's created
and closed bounds as lines. Every text is the ledger's, so every text is escaped; nothing
of an entry is ever markup.
"""

from __future__ import annotations

from dataclasses import dataclass
from html import escape as _escape
from typing import TYPE_CHECKING, Any

from sandbox_ledger.models import LedgerEvent
from sandbox_ledger.ui.text import visible

if TYPE_CHECKING:
    from collections.abc import Sequence

    from sandbox_ledger.models import LedgerEntry


def escape(text: str) -> str:
    """A text of the ledger as SVG text: markup escaped, hidden characters shown."""
    return _escape(visible(text))


WIDTH = 960
LANE = 28
TOP = 24
LEFT = 110
"""Room for the lanes' labels."""


@dataclass(frozen=True)
class Bar:
    """One exec: its lane, step, times (ms), end event (None: never ended) and error."""

    lane: str
    step: int
    start: int
    end: int
    ended: str | None
    error: str | None


@dataclass(frozen=True)
class Marker:
    """A point in time on a lane: a checkpoint, the created or the closed bound."""

    lane: str
    at: int
    kind: str
    label: str


def lane_of(entry: LedgerEntry) -> str:
    """The lane an entry is drawn in: its branch's, the main line's, or the sandbox's."""
    if entry.step_index < 0:
        return "sandbox"
    return f"branch {entry.branch}" if entry.branch is not None else "main"


def shapes(entries: Sequence[LedgerEntry]) -> tuple[list[str], list[Bar], list[Marker]]:
    """The lanes in the order they appear (the sandbox's first), the exec bars and the
    markers of ``entries`` (in ``read_all`` order)."""
    lanes = ["sandbox"]
    bars: list[Bar] = []
    markers: list[Marker] = []
    open_execs: dict[tuple[str, int], LedgerEntry] = {}
    last = max((e.ts for e in entries), default=0)
    for entry in entries:
        lane = lane_of(entry)
        if lane not in lanes:
            lanes.append(lane)
        key = (lane, entry.step_index)
        if entry.event == LedgerEvent.ExecStarted:
            open_execs[key] = entry
        elif entry.event in (LedgerEvent.ExecComplete, LedgerEvent.ExecFailed):
            started = open_execs.pop(key, None)
            begin = started.ts if started is not None else entry.ts
            error = entry.error if entry.event == LedgerEvent.ExecFailed else None
            bars.append(Bar(lane, entry.step_index, begin, entry.ts, str(entry.event), error))
        elif entry.event == LedgerEvent.CheckpointCreated:
            payload = entry.payload if isinstance(entry.payload, dict) else {}
            label = " ".join(
                str(payload[key])
                for key in ("snapshotId", "name", "tag")
                if payload.get(key) is not None
            )
            markers.append(Marker(lane, entry.ts, "checkpoint", label or "checkpoint"))
        elif entry.event in (LedgerEvent.SandboxCreated, LedgerEvent.SandboxClosed):
            kind = "created" if entry.event == LedgerEvent.SandboxCreated else "closed"
            markers.append(Marker("sandbox", entry.ts, kind, kind))
    for (lane, step), started in open_execs.items():
        bars.append(Bar(lane, step, started.ts, last, None, None))
    return lanes, bars, markers


def draw(entries: Sequence[LedgerEntry]) -> str:
    """The SVG of ``entries``' timeline (an empty session: a picture that says so)."""
    if not entries:
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" '
            'height="40" role="img"><text x="8" y="24">no entries</text></svg>'
        )
    lanes, bars, markers = shapes(entries)
    first = min(e.ts for e in entries)
    last = max(e.ts for e in entries)
    span = max(last - first, 1)
    usable = WIDTH - LEFT - 16

    def x(ts: int) -> float:
        return LEFT + (ts - first) / span * usable

    def y(lane: str) -> int:
        return TOP + lanes.index(lane) * LANE

    height = TOP + len(lanes) * LANE + 20
    parts: list[str] = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{WIDTH}" '
        f'height="{height}" role="img" aria-label="timeline of {len(entries)} entries">'
    ]
    for lane in lanes:
        parts.append(
            f'<text class="lane" x="4" y="{y(lane) + 14}">{escape(lane)}</text>'
            f'<line class="lane-line" x1="{LEFT}" x2="{WIDTH - 8}" y1="{y(lane) + 10}" '
            f'y2="{y(lane) + 10}"/>'
        )
    for bar in bars:
        left, right = x(bar.start), x(bar.end)
        kind = (
            "open"
            if bar.ended is None
            else "failed"
            if bar.error or "failed" in bar.ended
            else "ok"
        )
        took = f"{bar.end - bar.start} ms" if bar.ended is not None else "not ended"
        title = f"step {bar.step}: {took}" + (f"; error: {bar.error}" if bar.error else "")
        parts.append(
            f'<rect class="exec {kind}" x="{left:.1f}" y="{y(bar.lane) + 3}" '
            f'width="{max(right - left, 2):.1f}" height="{LANE - 12}">'
            f"<title>{escape(title)}</title></rect>"
        )
    for marker in markers:
        at = x(marker.at)
        if marker.kind == "checkpoint":
            parts.append(
                f'<circle class="checkpoint" cx="{at:.1f}" cy="{y(marker.lane) + 10}" r="5">'
                f"<title>{escape(marker.label)}</title></circle>"
            )
        else:
            parts.append(
                f'<line class="bound {marker.kind}" x1="{at:.1f}" x2="{at:.1f}" y1="{TOP - 6}" '
                f'y2="{height - 16}"><title>{escape(marker.label)}</title></line>'
            )
    parts.append(
        f'<text class="axis" x="{LEFT}" y="{height - 4}">0 ms</text>'
        f'<text class="axis end" x="{WIDTH - 8}" y="{height - 4}">{span} ms</text></svg>'
    )
    return "".join(parts)


def describe(bar: Bar) -> dict[str, Any]:
    """A bar as JSON (the page's live updates and tests)."""
    return {
        "lane": bar.lane,
        "step": bar.step,
        "start": bar.start,
        "end": bar.end,
        "ended": bar.ended,
        "error": bar.error,
    }
