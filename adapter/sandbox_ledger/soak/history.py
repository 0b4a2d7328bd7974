"""The history of a run: every operation a process attempted, as JSON lines.

An invocation line is written before the operation is sent, a completion line after it
returns or raises: ``{"p": process, "i": n, "t": "invoke", "op": ..., "at": s, ...}`` and
``{"p": process, "i": n, "t": "ok" | "fail", "at": s, ...}``; something that happened in one
step (a change handed out) is one line, ``"t": "event"``. Each line is one ``write`` of
a file opened ``O_APPEND`` (the kernel appends each whole: lines of processes sharing the
file never interleave), so a process killed at any instant leaves at most one line torn,
its last, which :func:`read_history` leaves out. An invocation without a completion is an
operation whose outcome is unknown: it may or may not have happened.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sandbox_ledger._json import loads_unique

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

__all__ = [
    "History",
    "Operation",
    "operations",
    "read_history",
]


class History:
    """The history lines of one process, appended to ``path``."""

    def __init__(self, path: Path, process: str) -> None:
        self.process, self.path = process, path
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        self._ids = itertools.count()

    def _write(self, line: dict[str, Any]) -> None:
        data = (json.dumps(line, separators=(",", ":")) + "\n").encode()
        os.write(self._fd, data)

    def invoke(self, op: str, **fields: Any) -> int:
        """Record that operation ``op`` is about to be sent; its number in this process."""
        number = next(self._ids)
        self._write(
            {"p": self.process, "i": number, "t": "invoke", "op": op, "at": time.time(), **fields}
        )
        return number

    def ok(self, number: int, **fields: Any) -> None:
        """Record that operation ``number`` returned."""
        self._write({"p": self.process, "i": number, "t": "ok", "at": time.time(), **fields})

    def fail(self, number: int, error: BaseException) -> None:
        """Record that operation ``number`` raised (its outcome stays unknown)."""
        line = {"p": self.process, "i": number, "t": "fail", "at": time.time()}
        self._write({**line, "error": f"{type(error).__name__}: {error}"[:500]})

    def event(self, op: str, **fields: Any) -> None:
        """Record something that happened (a change handed out): an operation complete in
        one line."""
        number = next(self._ids)
        line = {"p": self.process, "i": number, "t": "event", "op": op, "at": time.time()}
        self._write({**line, **fields})

    def close(self) -> None:
        os.close(self._fd)


def read_history(path: Path, *, only: bytes = b"") -> Iterator[dict[str, Any]]:
    """The lines of a history, a torn line (a process killed while writing it) left out;
    with ``only``, just the lines that begin with it (the others are not parsed)."""
    with path.open("rb") as lines:
        for raw in lines:
            if not raw.startswith(only) or not raw.endswith(b"\n"):
                continue  # not asked for, or torn: its writer was killed mid-line
            try:
                line = loads_unique(raw)
            except (ValueError, RecursionError):
                continue
            if isinstance(line, dict) and {"p", "i", "t"} <= line.keys():
                yield line


@dataclass
class Operation:
    """One operation of the history: its invocation and, if it came, its completion."""

    process: str
    number: int
    op: str
    invoked: dict[str, Any]
    completed: dict[str, Any] | None = None
    fields: dict[str, Any] = field(default_factory=dict)

    @property
    def acknowledged(self) -> bool:
        """Whether it returned (it happened, once)."""
        return self.completed is not None and self.completed["t"] == "ok"

    @property
    def status(self) -> str:
        """ok, fail (it raised) or crashed (no completion: its process was killed)."""
        return "crashed" if self.completed is None else str(self.completed["t"])

    def line(self) -> str:
        """The operation in a history excerpt."""
        shown = {k: v for k, v in self.invoked.items() if k not in ("p", "i", "t", "at", "op")}
        done = "" if self.completed is None else f" -> {self.completed['t']}"
        result = {
            k: v
            for k, v in (self.completed or {}).items()
            if k not in ("p", "i", "t", "at", "op", "error")
        }
        if result and self.completed is not self.invoked:
            done += f" {json.dumps(result)}"
        error = (self.completed or {}).get("error")
        return f"{self.process}#{self.number} {self.op} {json.dumps(shown)}{done}" + (
            f" ({error})" if error else ""
        )


def operations(lines: Iterator[dict[str, Any]]) -> list[Operation]:
    """The history's operations, in the order they were invoked."""
    found: dict[tuple[str, int], Operation] = {}
    for line in lines:
        key = (str(line["p"]), int(line["i"]))
        if line["t"] == "invoke":
            found[key] = Operation(key[0], key[1], str(line.get("op")), line)
        elif line["t"] == "event":  # complete in itself
            found[key] = Operation(key[0], key[1], str(line.get("op")), line, line)
        elif key in found:
            found[key].completed = line
    return list(found.values())
