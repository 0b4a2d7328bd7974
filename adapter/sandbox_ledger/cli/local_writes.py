"""How ``sandbox-ledger local --data FILE`` writes FILE whole (:mod:`.local_saves`): atomically,
only ever over a regular file, and, when FILE cannot take the tables on exit, into a new file
in the temporary directory instead."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["kept_elsewhere", "write_data"]


def write_data(lines: tuple[str, ...], data: Path) -> str | None:
    """Write ``lines`` over ``data`` atomically; None, or why it could not. Only ever a
    regular file: export writes into a FIFO as it is, whose open waits for a reader that
    never comes (and Ctrl-C could not end that wait)."""
    import stat

    from sandbox_ledger.cli.transfer import _export
    from sandbox_ledger.errors import InvalidInputError

    def replaced() -> bool:
        try:
            return not stat.S_ISREG(data.stat().st_mode)
        except FileNotFoundError:
            return False

    try:
        if replaced():
            return "not a regular file any more"
    except OSError as exc:
        return exc.strerror or str(exc)
    try:
        _export(iter(lines), data)
    except InvalidInputError as exc:
        return str(exc).removeprefix(f"{exc.field}: ").removeprefix(f"{data}: ")
    except OSError as exc:
        # Replaced between the look and the write (a FIFO's open: "No such device or
        # address"): the reason is the replacement, said as above.
        with contextlib.suppress(OSError):
            if replaced():
                return "not a regular file any more"
        return exc.strerror or str(exc)
    return None


def kept_elsewhere(lines: tuple[str, ...], data: Path, failure: str) -> str:
    """The tables written to a new file in the temporary directory, when ``data`` cannot
    take them on exit; the line that says where (or that they are lost)."""
    import os
    import tempfile

    try:
        descriptor, name = tempfile.mkstemp(prefix="sandbox-ledger-local-", suffix=".jsonl")
        with open(descriptor, "w", encoding="utf-8", newline="\n") as stream:
            stream.writelines(lines)
            stream.flush()
            os.fsync(stream.fileno())
    except OSError as exc:
        return (
            f"--data: could not save {data} ({failure}), nor a copy in the temporary "
            f"directory ({exc.strerror or exc}): what changed since the last save is lost"
        )
    return (
        f"--data: could not save {data} ({failure}); the tables are saved in {name} "
        f"instead: move it to {data} (or load it with --data {name})"
    )
