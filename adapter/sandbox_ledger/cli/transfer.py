"""The bodies of ``sandbox-ledger export`` and ``import``: files, progress and reports around
:mod:`sandbox_ledger.transfer`."""

from __future__ import annotations

import contextlib
import glob
import itertools
import os
import secrets
import shutil
import signal
import stat
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, TextIO

from sandbox_ledger._signals import deferred, removed_on_termination
from sandbox_ledger.cli.output import json_safe, say, visible
from sandbox_ledger.cli.render import Format, choose
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.transfer import ImportReport, export_lines, import_lines, read_lines

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator

    from rich.console import Console

    from sandbox_ledger.cli.interrupt import ImportStatus
    from sandbox_ledger.protocol import SyncTransferAdapter


def export_to(
    ledger: SyncTransferAdapter,
    *,
    name: str | None,
    sandbox_id: str | None,
    output: Path | None,
    err: Console,
    select: Callable[[str], str | None] | None = None,
    segments: int | None = None,
    replaced: Callable[[], None] | None = None,
) -> tuple[int, int, int, int]:
    """Write the export to ``output`` (or stdout); returns (sessions exported, entries,
    environment records, lines written). A whole-store export (no ``name``) carries the
    environment records too. ``select`` (``--query``) gives each line's replacement, or None
    to leave it out; ``segments``: the scan's parallelism (see ``scan_sessions``).

    A file is written beside its destination and renamed into place only once complete, so
    a failed export leaves an existing file untouched. ``replaced`` is called as the file is
    renamed into place, with Ctrl-C, SIGTERM and SIGHUP held across both: a signal then
    finds the rename said (the line an interruption prints tells which happened).
    """
    if name is not None and sandbox_id is not None:
        sessions = [(name, sandbox_id)]
    else:
        sessions = ledger.scan_sessions(name, segments=segments)
    environments = ledger.list_environments() if name is None else []
    from sandbox_ledger.cli.progress import reading

    with reading("exporting", err, total=len(set(sessions))) as progress:
        exported: list[tuple[str, str]] = []
        lines = export_lines(ledger, sessions, environments, progress=progress, exported=exported)
        # Nothing to export is a mistyped name or the wrong store, not an empty backup:
        # refused before the output is opened, so an existing file keeps its contents.
        first = next(lines, None)
        if first is None:
            raise NothingToExport(name, sandbox_id)
        counted = _Counted(itertools.chain([first], lines))
        lines = iter(counted)
        if select is not None:
            lines = (kept for kept in map(select, lines) if kept is not None)
        written = _export(lines, output, replaced)
    return len(exported), counted.count - len(environments), len(environments), written


def export_file(file: Path | None, output: str | None, *, as_json: bool) -> Path | None:
    """The file an export writes (None: stdout) from ``-o/--file`` and ``--output``.

    ``--output`` is the format, as on every command: ``json`` (what export writes) is
    accepted, ``text`` and ``table`` refused. A value that is no format is an older
    version's spelling of ``-o FILE``, still written there with a note (scripts keep
    working; nothing else can be meant by it).
    """
    formats = {f.value for f in Format}
    if output is None or output in formats:
        choose(as_json, None if output is None else Format(output))  # --json agrees
        if output in (Format.text, Format.table):
            raise InvalidInputError(
                "--output",
                f"export writes JSON lines only, not {output} (--query selects from them); "
                "--output is the format, as on every command: the file is -o FILE",
            )
        return file
    if file is not None:
        raise InvalidInputError(
            "--output",
            f"{output!r} is not a format (json, text or table), and -o names the file "
            f"already ({file})",
        )
    if as_json:
        raise InvalidInputError("--json, --output", f"--json is --output json, not {output!r}")
    say(
        f"note: --output {output} is the old spelling of -o {output}: --output is the format, "
        "as on every command; write -o FILE (or --file FILE)"
    )
    return Path(output)


class _Counted:
    """The lines of an export, counting those read (``--query`` may write fewer)."""

    def __init__(self, lines: Iterator[str]) -> None:
        self._lines, self.count = lines, 0

    def __iter__(self) -> Iterator[str]:
        for line in self._lines:
            self.count += 1
            yield line


class NothingToExport(LookupError):
    """An export found nothing: no entries of the session or name asked for, or (``name``
    None) no entries and no environment records in the whole store."""

    def __init__(self, name: str | None, sandbox_id: str | None) -> None:
        super().__init__(name, sandbox_id)
        self.name, self.sandbox_id = name, sandbox_id


def _export(
    lines: Iterator[str], output: Path | None, replaced: Callable[[], None] | None = None
) -> int:
    """Write the lines to ``output`` (or stdout); returns how many. ``replaced``: see
    :func:`export_to`."""
    if output is None or str(output) == "-":  # "-" is stdout, as import's "-" is stdin
        # Perhaps a terminal: the same values, with no raw C1 or bidi character.
        count = _write(sys.stdout, map(json_safe, lines))
        sys.stdout.flush()
        return count
    # A symlink's target is what gets replaced (renaming onto the link would replace the
    # link and leave the file it points at as it was), keeping the file's permissions.
    target = Path(os.path.realpath(output))
    if not target.parent.is_dir():
        raise InvalidInputError("-o", f"{output}: its directory {target.parent} does not exist")
    if target.is_dir():
        raise InvalidInputError("-o", f"{output} is a directory")
    if output.exists() and not output.is_file():
        # A FIFO, a terminal, /dev/stdout into a pipe: nothing to replace, written as is
        # (terminal-safe, as to stdout).
        with output.open("w", encoding="utf-8", newline="\n") as stream:
            return _write(stream, map(json_safe, lines))
    _remove_abandoned(target)
    # Created with the replaced file's permissions (a new file: 0666 less the umask, as
    # open() makes it), so a private backup is never readable by others meanwhile.
    mode = target.stat().st_mode & 0o7777 if target.exists() else 0o666
    with _temporary_beside(target, mode, output) as (descriptor, temporary):
        # The descriptor (and its lock) stays open until the file is renamed into place.
        with open(descriptor, "w", encoding="utf-8", newline="\n", closefd=False) as stream:
            count = _write(stream, lines)
            stream.flush()
            os.fsync(stream.fileno())
        if target.exists():
            shutil.copymode(target, temporary)  # the umask may have masked some bits
        # The rename and what records it are one step for the ending signals: one taken
        # between them would be told of an unchanged file that was replaced.
        with deferred(_ENDING):
            os.replace(temporary, target)
            if replaced is not None:
                replaced()
    return count


# The signals that end an export: each one arriving while its temporary file is being
# claimed is held until the file is known and its removal on the way out is in place.
_ENDING = frozenset({signal.SIGINT, signal.SIGTERM, signal.SIGHUP})


@contextlib.contextmanager
def _temporary_beside(target: Path, mode: int, output: Path) -> Iterator[tuple[int, Path]]:
    """A new temporary file beside ``target`` (its descriptor and path), removed if the
    block fails or a signal ends it; closed at the end. One that cannot be created is an
    :class:`InvalidInputError` naming ``output``, as the user gave it. The removal is armed
    before the file exists, and Ctrl-C, SIGTERM and SIGHUP are held while it is created
    (:func:`~sandbox_ledger._signals.deferred`), so no signal, however soon it follows the
    file's creation, leaves the file behind."""
    created: list[tuple[int, Path]] = []

    def remove() -> None:
        for _, temporary in created:
            with contextlib.suppress(OSError):
                temporary.unlink()

    with removed_on_termination(remove):
        try:
            with deferred(_ENDING):  # a signal held meanwhile is taken at its end, in this try
                try:
                    created.append(_claim_temporary(target, mode))
                except OSError as exc:
                    # Named by what the user gave, not by the temporary file beside it.
                    raise InvalidInputError(
                        "-o",
                        f"{output}: cannot create a file in {target.parent} "
                        f"({exc.strerror or exc})",
                    ) from exc
            yield created[0]
        except BaseException:
            for _, temporary in created:
                with contextlib.suppress(OSError):
                    temporary.unlink()
            raise
        finally:
            for descriptor, _ in created:
                os.close(descriptor)


def _partials(target: Path) -> list[Path]:
    """The temporary files of exports to ``target``, live or abandoned."""
    return sorted(target.parent.glob(f".{glob.escape(target.name)}.*.partial"))


def _claim_temporary(target: Path, mode: int) -> tuple[int, Path]:
    """A new temporary file beside ``target``, unique to this run (not to the PID: every
    container run is PID 1) and locked for as long as this process holds it open."""
    while True:
        temporary = target.with_name(f".{target.name}.{secrets.token_hex(8)}.partial")
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            _lock(descriptor, wait=True)
            # Another export may have found the file unlocked between its creation and the
            # lock, taken it for abandoned and removed it: then start over with a new name.
            with contextlib.suppress(FileNotFoundError):
                if os.stat(temporary).st_ino == os.fstat(descriptor).st_ino:
                    return descriptor, temporary
        except BaseException:
            with contextlib.suppress(OSError):
                if os.stat(temporary).st_ino == os.fstat(descriptor).st_ino:
                    temporary.unlink()
            os.close(descriptor)
            raise
        os.close(descriptor)


def _remove_abandoned(target: Path) -> None:
    """Remove the temporary files of exports to ``target`` whose writer is gone (killed, the
    machine restarted): a live writer holds a lock on its file until it is renamed."""
    for partial in _partials(target):
        try:
            descriptor = os.open(partial, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if _lock(descriptor, wait=False):
                partial.unlink()  # under the lock, so its writer never finds it gone late
        except OSError:
            pass
        finally:
            os.close(descriptor)


def _lock(descriptor: int, *, wait: bool) -> bool:
    """An exclusive lock on the open file (released when it is closed); False if another
    process holds one and ``wait`` is false."""
    import fcntl

    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
    except BlockingIOError:
        return False
    return True


def _write(stream: TextIO, lines: Iterator[str]) -> int:
    count = 0
    write = stream.write
    for line in lines:
        write(line)
        count += 1
    return count


def import_from(
    ledger: SyncTransferAdapter,
    source: BinaryIO,
    *,
    label: str,
    err: Console,
    status: ImportStatus | None = None,
) -> ImportReport:
    """Reconcile the JSON lines of ``source`` into ``ledger`` as they are read (streamed: a
    pipe and a file alike); failed lines are printed to ``err`` as ``label:line: reason``.
    On a terminal a progress line shows the lines done and lines/s, and for a regular file
    the share read and the time left; nothing on a pipe or a redirected stderr. ``status``
    follows how far it got (for the line an interruption prints): Ctrl-C and SIGTERM wait for
    the batch being written (about half a second of writing), so that its counts are exact;
    a second one stops at once."""
    from sandbox_ledger.cli.interrupt import ImportStatus

    status = status if status is not None else ImportStatus()
    status.report = ImportReport()
    if err.is_terminal:
        report = _import_with_progress(ledger, source, label, err, status)
    else:
        lines = _counted(source, status)
        report = import_lines(ledger, lines, report=status.report, guard=status.batch)
    for failure in report.failed:
        say(f"{label}:{failure.number}: {failure.reason}", err)
    return report


def _counted(source: Iterable[bytes], status: ImportStatus) -> Iterator[bytes]:
    for line in read_lines(source):
        status.lines += 1
        yield line


def _file_size(source: BinaryIO) -> int | None:
    """The size of a regular file (what a share of it read means), None for a pipe."""
    try:
        status = os.fstat(source.fileno())
    except (OSError, ValueError, AttributeError):
        return None
    return status.st_size if stat.S_ISREG(status.st_mode) and status.st_size else None


def _import_with_progress(
    ledger: SyncTransferAdapter, source: BinaryIO, label: str, err: Console, status: ImportStatus
) -> ImportReport:
    """:func:`import_lines` of ``source`` with a progress line: the lines read and lines/s,
    and for a regular file a bar, the share read and the time left."""
    from rich.progress import (
        BarColumn,
        Progress,
        ProgressColumn,
        TaskProgressColumn,
        TextColumn,
        TimeRemainingColumn,
    )

    size = _file_size(source)
    columns: list[ProgressColumn] = [
        TextColumn("{task.description}", markup=False),
        TextColumn("{task.fields[lines]}", markup=False),
    ]
    if size is not None:
        columns[1:1] = [BarColumn(), TaskProgressColumn(), TimeRemainingColumn()]
    started = time.monotonic()
    with Progress(*columns, console=err, transient=True) as progress:
        task = progress.add_task(visible(f"importing {label}"), total=size, lines="")
        read = 0

        def counted() -> Iterator[bytes]:
            nonlocal read
            for line in read_lines(source):
                status.lines += 1
                read += len(line)
                if status.lines % 1000 == 0:
                    rate = status.lines / max(time.monotonic() - started, 1e-9)
                    shown = f"{status.lines:,} lines, {rate:,.0f}/s"
                    progress.update(task, completed=read, lines=shown)
                yield line

        return import_lines(ledger, counted(), report=status.report, guard=status.batch)
