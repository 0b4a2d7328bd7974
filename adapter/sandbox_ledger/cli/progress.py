"""Progress on stderr for long work (export, rm, resources sweep, resources import and export;
import has its own bar),
shown only when stderr is a terminal: piped or redirected, the commands stay silent."""

from __future__ import annotations

import contextlib
import sys
from typing import TYPE_CHECKING, Any

from sandbox_ledger.cli.output import visible

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from rich.console import Console
    from rich.progress import Progress, TaskID


def _bar(console: Console, *, total: bool) -> Progress:
    """A bar with a known total, or a spinner with a ``detail`` field (counts so far). The
    texts are never read as markup: a description may quote a stored name (rm's); each
    helper below makes its label :func:`~sandbox_ledger.cli.output.visible`."""
    from rich.progress import (
        BarColumn,
        Progress,
        SpinnerColumn,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    described = TextColumn("{task.description}", style="progress.description", markup=False)
    if total:  # rich's default columns, but the description's
        return Progress(
            described,
            BarColumn(),
            TaskProgressColumn(),
            TimeRemainingColumn(),
            console=console,
            transient=True,
        )
    return Progress(
        SpinnerColumn(),
        described,
        TextColumn("{task.fields[detail]}", markup=False),
        TimeElapsedColumn(),
        console=console,
        transient=True,
    )


@contextlib.contextmanager
def reading(label: str, console: Console, total: int) -> Iterator[Callable[[int], None] | None]:
    """A ``progress`` callback for :func:`~sandbox_ledger.transfer.export_lines` that shows a
    bar of the ``total`` sessions read, or None when not on a terminal."""
    if not console.is_terminal or not total:
        yield None
        return
    with _bar(console, total=True) as progress:
        task = progress.add_task(visible(label), total=total)
        yield lambda n: progress.advance(task, n)


@contextlib.contextmanager
def deleting(ledger: Any, label: str, console: Console) -> Iterator[None]:
    """A spinner counting the items a DynamoDB ``delete_sandbox`` removes (its batches are
    watched through botocore's event hooks); other stores delete in one statement."""
    if not console.is_terminal or "sandbox_ledger.dynamodb" not in sys.modules:
        yield  # not a DynamoDB ledger (it would have imported its module)
        return
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    if not isinstance(ledger, SyncDynamoDBAdapter):
        yield
        return
    events = ledger.client().meta.events
    with _bar(console, total=False) as progress:
        task = progress.add_task(visible(label), total=None, detail="0 items deleted")
        deleted = 0

        def before(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            context["sandbox_ledger_sent"] = sum(len(v) for v in params["RequestItems"].values())

        def after(parsed: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
            nonlocal deleted
            left = sum(len(v) for v in (parsed.get("UnprocessedItems") or {}).values())
            deleted += context.get("sandbox_ledger_sent", 0) - left
            progress.update(task, detail=f"{deleted} items deleted")

        events.register("before-parameter-build.dynamodb.BatchWriteItem", before)
        events.register("after-call.dynamodb.BatchWriteItem", after)
        try:
            yield
        finally:
            events.unregister("before-parameter-build.dynamodb.BatchWriteItem", before)
            events.unregister("after-call.dynamodb.BatchWriteItem", after)


class _CountingStore:
    """The sweep's store, counting the records examined and deleted for the progress line."""

    def __init__(self, store: Any, progress: Progress, task: TaskID) -> None:
        self._store = store
        self._progress = progress
        self._task = task
        self._examined = 0
        self._deleted = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _show(self) -> None:
        detail = f"{self._examined} records examined, {self._deleted} deleted"
        self._progress.update(self._task, detail=detail)

    def get_many(self, record_ids: list[str]) -> Any:
        found = self._store.get_many(record_ids)
        self._examined += len(record_ids)
        self._show()
        return found

    def delete_claimed(self, claims: list[Any]) -> list[str]:
        deleted: list[str] = self._store.delete_claimed(claims)
        self._deleted += len(deleted)
        self._show()
        return deleted


@contextlib.contextmanager
def sweeping(store: Any, console: Console) -> Iterator[Any]:
    """The store to sweep: itself, or (on a terminal) a wrapper that shows its progress."""
    if not console.is_terminal:
        yield store
        return
    with _bar(console, total=False) as progress:
        task = progress.add_task("sweeping", total=None, detail="0 records examined")
        yield _CountingStore(store, progress, task)


@contextlib.contextmanager
def per_file(
    label: str, console: Console, total: int | None
) -> Iterator[Callable[[str], None] | None]:
    """An ``on_file`` callback for the record-directory functions that shows the files done
    (a bar when ``total`` is known, else a count), or None when not on a terminal."""
    if not console.is_terminal:
        yield None
        return
    with _bar(console, total=total is not None) as progress:
        task = progress.add_task(visible(label), total=total, detail="0 files")
        done = 0

        def on_file(name: str) -> None:
            nonlocal done
            done += 1
            progress.update(task, completed=done, detail=f"{done} files")

        yield on_file
