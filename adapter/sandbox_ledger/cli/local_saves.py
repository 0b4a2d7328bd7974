"""What ``sandbox-ledger local --data FILE`` does with FILE: loads it at start, then saves
what the served requests changed (see :mod:`sandbox_ledger.local.journal`), and says so."""

from __future__ import annotations

import gc
import os
from typing import TYPE_CHECKING

from sandbox_ledger.cli.local_writes import kept_elsewhere, write_data
from sandbox_ledger.cli.output import CommandError, ExitCode, say

if TYPE_CHECKING:
    from pathlib import Path

    from sandbox_ledger.cli.interrupt import StopSignals
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.local.inprocess import WriteLog
    from sandbox_ledger.local.persist import Bulk, DataState
    from sandbox_ledger.resources import SyncResourceRecordStore

__all__ = ["LoadStopped", "Saver"]


class LoadStopped(Exception):
    """A stopping signal arrived while the data file was being loaded."""


class Saver:
    """Loads ``data`` at start, then saves what the served requests changed (see
    :mod:`sandbox_ledger.local.journal`): appended to ``data``, or ``data`` written whole
    (the first save, on exit, and once the appended lines outgrow the file)."""

    IMAGE_ENTRIES = 5_000
    """Entries from which a load's image is written (fewer load in a moment from the lines:
    no file beside ``data`` for them)."""

    IMAGE_SESSION = 2_000
    """Entries from which a session a save changed is not built for the image (the save
    would cost a build of all of them for the few it added): the next start builds it."""

    GROWTH = 1 << 20
    """Bytes appended beyond the size of the file last written whole before it is written
    whole again (so appended lines never cost more than the file itself)."""

    def __init__(
        self,
        data: Path | None,
        ledger: SyncDynamoDBAdapter,
        store: SyncResourceRecordStore,
        log: WriteLog,
    ) -> None:
        from sandbox_ledger.local.image import Image, image_path
        from sandbox_ledger.local.persist import DataState

        self.data, self.ledger, self.store, self.log = data, ledger, store, log
        self.mirror = DataState(str(data))
        self.file: os.stat_result | None = None
        """The data file as the last save left it (None: not written by this server yet)."""
        self.whole = 0
        """Its size when last written whole."""
        self.stale = True
        """The file holds what the mirror does not say in the fewest lines (or nothing)."""
        self.stopped_loading = False
        self.failing: str | None = None
        """Why the last save failed, while saves fail."""
        self.bulk: Bulk | None = None
        """How a load puts the entries into the table directly (see :mod:`..local.bulk`)."""
        self.image = Image(image_path(data)) if data is not None else None
        """The items of ``data``'s sessions kept beside it (see :mod:`..local.image`)."""
        self.image_keys: set[tuple[str, str]] = set()
        """The sessions the image holds a record of."""
        self.image_dead = 0
        """Entries of the image's records that later ones replaced (appends stop once they
        outnumber FILE's entries: the image is then at most about twice what it holds)."""
        self._found: DataState | None = None
        """What :meth:`read` found in ``data`` (None: no file there)."""
        self._before: os.stat_result | None = None
        """``data`` as :meth:`read` found it."""
        self.image_off = False
        """Saves no longer keep the image up (it outgrew that, or could not be written)."""

    def read(self) -> str | None:
        """Read ``data`` (before the table is made: see :meth:`load`) and return the
        identity of the store it holds: the one it names, else one drawn from the file as
        it is (:func:`_unnamed_store_id`: the same at each start until a save names it in
        the file, written whole), or a new one where there is no file. None without
        ``data``: a fresh table's own."""
        from sandbox_ledger.deployment import new_store_id
        from sandbox_ledger.local.image import no_collection
        from sandbox_ledger.local.persist import read_data

        if self.data is None:
            return None
        if self.data.exists():
            self._before = before = os.stat(self.data)
            # The load makes millions of objects, none in a cycle, that live as long as the
            # tables: the collector is held off meanwhile, then they are kept out of its walks.
            with no_collection():
                self._found = read_data(self.data)
            self.mirror.store_id = self._found.store_id
            if self.mirror.store_id is None:
                self.mirror.store_id = _unnamed_store_id(before)
        if self.mirror.store_id is None:
            self.mirror.store_id = new_store_id()
        return self.mirror.store_id

    def load(self, stop: StopSignals) -> bool:
        """Load what :meth:`read` read into the tables, with progress on a terminal; False if
        a stopping signal came first (the tables are then partly loaded: never saved)."""
        from sandbox_ledger.cli.output import err
        from sandbox_ledger.cli.progress import reading
        from sandbox_ledger.local.image import no_collection
        from sandbox_ledger.local.persist import load_state

        state, before = self._found, self._before
        if state is None or before is None:
            return True
        unnamed = state.store_id is None
        state.store_id = self.mirror.store_id
        with no_collection():
            named = _named(state)
            if self.image is not None and self.bulk is not None:
                self.image.read()
            total = state.entries + len(state.environments) + len(state.records)
            with reading(f"loading {self.data}", err(), total) as bar:

                def progress(done: int) -> None:
                    if stop.received:
                        raise LoadStopped
                    if bar is not None:
                        bar(done)

                try:
                    loaded = load_state(
                        state, self.ledger, self.store, progress=progress, bulk=self.bulk
                    )
                except LoadStopped:
                    self.stopped_loading = True
                    return False
            gc.freeze()
        self.mirror, self.file, self.whole = state, before, before.st_size
        # Sessions FILE named no sequence for (an earlier version's) and entries it named no
        # order id for (an earlier version's, an export appended to FILE) now have the ones
        # the load stored them in, and a FILE naming no store the one the table was made
        # with: the next save writes FILE whole, naming each (a save appending the ids of a
        # session's new entries names them after those FILE names).
        self.stale = state.appended or unnamed or named != _named(state)
        image = self.image
        if image is not None and image.found.ignored is not None:
            say(f"{image.path}: {image.found.ignored}; ignored (the load built every session)")
        say(
            f"loaded {self.data}: {_entries(loaded.entries)}, {loaded.environments} environment "
            f"record(s), {loaded.records} resource record(s)"
        )
        return True

    def keep_image(self, stop: StopSignals) -> None:
        """Write the image of what the load stored, if it holds anything else (see
        :mod:`sandbox_ledger.local.image`): after the server serves, a chunk of sessions at
        a time (a stopping signal ends it, the last image left as it was). A failure is
        said; the next start builds what it lacks."""
        image = self.image
        if image is None:
            return
        try:
            big = self.mirror.entries >= self.IMAGE_ENTRIES
            if big and image.fingerprint and not image.current:
                image.write(lambda: not stop.received)
        except OSError as exc:
            self.image_off = True
            say(f"could not write {image.path} ({exc.strerror or exc}); the next start builds it")
        finally:
            self.image_keys = set(image.found.sessions)
            image.release()

    def save(self, *, final: bool = False) -> None:
        """Save what changed since the last save. A failed save (the directory gone, the
        disk full) is said on stderr and tried again at the next one while the server keeps
        serving; the one on exit, failing, writes the tables to a new file in the temporary
        directory instead and says where (:class:`CommandError`, exit 1)."""
        from sandbox_ledger.errors import LedgerError
        from sandbox_ledger.local import journal

        if self.data is None:
            return
        written = self.log.take()
        try:
            change = journal.changes(
                self.mirror, written, self.ledger.table_name, self.ledger, self.store
            )
        except (LedgerError, ValueError) as exc:  # a stored item this version cannot read
            self.log.put_back(written)  # read again at the next save
            why = f"cannot read what changed: {exc}"
            if final:
                kept = write_data(tuple(self.mirror.lines()), self.data)
                raise CommandError(
                    f"--data: {why}; {self.data} holds the tables as the last save found them"
                    + ("" if kept is None else f" (and could not be written: {kept})"),
                    ExitCode.FAILED,
                ) from exc
            if why != self.failing:
                say(f"could not save {self.data} ({why}); still serving, trying again")
            self.failing = why
            return
        before, self.mirror = self.mirror, change.after
        if change.after.appended:  # read whole again: the file is to be written whole
            self.stale = True
        failure: str | None = None
        if self.file is not None and not self.stale and not final:
            if not change.lines:
                return
            try:
                journal.append(self.data, change.lines, self.file)
            except journal.FileChangedError:
                self.stale = True
            except OSError as exc:
                self.stale = True  # it may end in part of these lines: written whole next
                failure = exc.strerror or str(exc)
            else:
                self.file = os.stat(self.data)
                if self.file.st_size - self.whole > max(self.whole, self.GROWTH):
                    self.stale = True  # written whole at the next save
                self._saved()
                self._image_saved(before)
                return
        if failure is None:
            if (
                final
                and self.file is not None
                and not self.stale
                and not change.lines
                and self.file.st_size == self.whole
            ):
                return  # the file holds the tables already, written whole
            lines = tuple(self.mirror.lines())
            failure = write_data(lines, self.data)
            if failure is None:
                self.file = os.stat(self.data)
                self.whole, self.stale = self.file.st_size, False
                self._saved()
                if not final:  # Ctrl-C exits at once: the next start builds these
                    self._image_saved(before)
                return
        if final:
            raise CommandError(
                kept_elsewhere(tuple(self.mirror.lines()), self.data, failure), ExitCode.FAILED
            )
        if failure != self.failing:
            say(f"could not save {self.data} ({failure}); still serving, trying again")
        self.failing = failure

    def _image_saved(self, before: DataState) -> None:
        """Keep the image up with a save: the sessions it changed (from ``before``), built
        from their lines as FILE now holds them, appended to the image; the image written
        whole, every session built, when there is none of this version yet and FILE holds
        :attr:`IMAGE_ENTRIES` entries. Appends stop once the records they replaced hold
        more entries than FILE (see :attr:`image_dead`). A failure is said once; the next
        start builds what the image lacks."""
        from sandbox_ledger.local import bulk
        from sandbox_ledger.local.image import fingerprint

        image, after = self.image, self.mirror
        if image is None or self.bulk is None or self.image_off:
            return
        whole = image.written is None
        if whole and after.entries < self.IMAGE_ENTRIES:
            return
        if after.appended and not whole:  # every table read again: every session "changed"
            self.image_off = True  # (a build of them all at this save): the next start's
            return
        changed = [
            (key, lines)
            for key, lines in after.sessions.items()
            if whole or (before.sessions.get(key) is not lines and len(lines) < self.IMAGE_SESSION)
        ]
        if not changed:
            return
        if not whole and self.image_dead > max(after.entries, self.IMAGE_ENTRIES):
            self.image_off = True  # mostly replaced records: the next start rewrites it
            return
        if image.shard_count is None:
            image.shard_count = self.ledger.run(self.ledger._resolve_shards())
        built = {}
        for key, lines in changed:
            stored = bulk.session_items(
                key,
                [line for _, line in lines],
                image.shard_count,
                after.sequences.get(key),
                after.orders.get(key),
            )
            if stored is not None:
                built[key] = stored
        try:
            if whole:
                image.kept, image.fingerprint = built, fingerprint(image.shard_count)
                image.write()
                self.image_keys, self.image_dead = set(built), 0
            elif built and not image.append(built):
                self.image_off = True  # no longer the file this server wrote: left alone
            else:
                for key in built:
                    if key in self.image_keys:
                        self.image_dead += len(before.sessions.get(key, ()))
                self.image_keys.update(built)
        except OSError as exc:
            self.image_off = True
            say(f"could not write {image.path} ({exc.strerror or exc}); the next start builds it")
        finally:
            image.release()

    def _saved(self) -> None:
        if self.failing is not None:
            say(f"saved {self.data} again")
            self.failing = None

    def saved(self) -> bool:
        """Whether ``data`` holds what the last save read (the table's stream is saved
        after it: :mod:`sandbox_ledger.local.streamfile`)."""
        return self.file is not None and self.failing is None

    def summary(self) -> str:
        if self.data is None:
            return " (no --data: the tables are gone)"
        if self.stopped_loading:
            return f" while loading {self.data}: nothing saved, the file is as it was"
        if self.file is None:
            return f"; nothing was stored, {self.data} not written"
        mirror = self.mirror
        return (
            f"; saved {_entries(mirror.entries)}, {len(mirror.environments)} environment "
            f"record(s) and {len(mirror.records)} resource record(s) to {self.data}"
        )


def _entries(count: int) -> str:
    return f"{count} entry" if count == 1 else f"{count} entries"


def _named(state: DataState) -> tuple[int, int]:
    """How many sessions ``state`` names a sequence for, and how many order ids it names (a
    load makes a session's ids the ones it stored: more where FILE names ids for fewer of
    its entries, fewer where it names more ids than entries)."""
    return len(state.sequences), sum(len(ids) for ids in state.orders.values())


def _unnamed_store_id(found: os.stat_result) -> str:
    """The identity of the store a data file naming none holds (an export, an earlier
    version's file), until a save names it there: drawn from the file as ``found`` (its
    device, inode, size and modification time), so that a start after one stopped before
    its first save (``kill -9``) is the same store (the cursors it handed out page on), the
    file renamed too, and a copy of it, or other data written in its place, another one."""
    import hashlib

    seen = f"{found.st_dev} {found.st_ino} {found.st_size} {found.st_mtime_ns}"
    return hashlib.blake2b(f"local --data {seen}".encode(), digest_size=16).hexdigest()
