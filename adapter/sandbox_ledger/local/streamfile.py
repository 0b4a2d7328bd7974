"""``local --data FILE`` keeps its table's stream across a restart: the same ARN and label,
the same shards, every record the stream still held.

DynamoDB keeps a stream's records 24 hours whatever happens to its servers; a consumer (the
TTL reporter, ``changes()``) saves a position (a shard and a sequence number) and reads on
after it. A restart that served a new stream lost what such a consumer had not read yet.

**Where.** ``.NAME.stream`` beside the file a link named FILE leads to, as the load's image
(:func:`sandbox_ledger.local.image.image_path`) and the lock: FILE itself stays an export
plus the local kinds it has (any reader of an export reads it; a stream is no part of the
store's data, and its records, kept in FILE, would be rewritten whole with it at every
whole save). A sidecar is written by the same saves as FILE, just after FILE is saved (so
a kill between the two loses that save's records, never makes a record of a change FILE
lacks; while FILE's saves fail, none), and by the final save on stop (after the server
refuses clients: every acknowledged write's record is in it).

**Format.** JSON lines. The first names what it holds: ``{"kind": "sandboxLedgerStream",
"format": 1, "store": ..., "table": ..., "arn": ..., "label": ..., "strict": ...}`` (the
store identity the table's descriptor holds, so that another store's sidecar is never
restored). Each save appends, in one write then fsync, the records the stream took since the
last one (``{"r": [sequence number, shard id or null, wall time taken or null, body]}``),
then the stream's state (``{"state": {...}}``: the strict view's shards and counters, or
moto's first sequence number). A save counts once its state line is whole: a read stops at
the first line that is not (a kill mid-save), and the records after the last state line are
dropped (that save's, at most); the next start cuts the file back there. The state
says what was trimmed since (a shard's ``trimmed_to``, moto's first number), so the records
it trimmed are dropped at the read. Once the file holds more than twice the records the
stream keeps (and :data:`REWRITE_LINES` more), or its appends (their state lines, one a
save) outgrow what it held when last written whole (and :data:`GROWTH`), it is written whole
again (a temporary file renamed over it; one a kill left is removed at the next start).

**Restore.** After the load (which puts FILE's items straight into moto's table, or through
requests on the fallback path), before any client is served: the table's stream is replaced
by the one the sidecar holds, or by a new empty one (no sidecar, or one ignored: another
store's, another format or mode, damaged, or FILE gone; said in one line): a restart is not
a change, and the load's own records are never in it. The records are then trimmed to this
server's ``--stream-records`` (and, under ``--strict``, its retention: their ages run on
across the restart).
Shard iterators handed out before are not kept (moto's are refused; the strict view's may be
read on, or refused once expired); sequence-number positions hold.

Under ``--strict`` the shards are the view's (:class:`.strict.streams.StreamViews`);
otherwise moto's one shard (``StreamShard``) with its records and first sequence number. A
sidecar written by the other mode is ignored (a strict stream's shards are not moto's).
"""

from __future__ import annotations

import contextlib
import json
import os
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
    from sandbox_ledger.local.dynamodb import LocalDynamoDB

__all__ = ["KIND", "REWRITE_LINES", "StreamFile", "stream_path"]

KIND = "sandboxLedgerStream"
FORMAT = 1
REWRITE_LINES = 1000
"""Records the sidecar may hold beyond twice what the stream keeps before it is rewritten."""

GROWTH = 1 << 20
"""Bytes appended beyond the size of the sidecar last written whole before it is rewritten."""

_EPOCH = datetime(1970, 1, 1)  # moto's times: naive UTC

_Row = tuple[int, str | None, float | None, dict[str, Any]]
"""A record as saved: sequence number, shard id (strict), wall time taken (strict), body."""


def stream_path(data: Path) -> Path:
    """Where the stream of the data file ``data`` is kept: ``.NAME.stream`` beside the file a
    link named ``data`` leads to."""
    target = data.resolve()
    return target.with_name(f".{target.name}.stream")


class StreamFile:
    """The sidecar of one ``local --data`` server (called by it: :meth:`restore` after the
    load, :meth:`save` after each save of FILE)."""

    def __init__(
        self,
        data: Path,
        server: LocalDynamoDB,
        ledger: SyncDynamoDBAdapter,
        say: Callable[[str], None],
    ) -> None:
        self.data, self.path = data, stream_path(data)
        self.server, self.ledger, self.say = server, ledger, say
        self.header: dict[str, Any] | None = None
        """The first line of the file as this server last wrote it (None: to be written
        whole at the next save)."""
        self.saved_to = 0
        """The highest sequence number the file holds a record of."""
        self.lines = 0
        """Record lines in the file (trimmed ones included)."""
        self.size = self.appended = 0
        """The file's size as last written whole (or read), and the bytes appended since."""
        self.state: dict[str, Any] | None = None
        """The stream's state as the file's last line says it (None: not written yet)."""
        self.failing: str | None = None

    # -- reading ------------------------------------------------------------------------

    def restore(self) -> None:
        """Serve the stream the sidecar holds, or a new empty one (see the module)."""
        from botocore.exceptions import ClientError

        from sandbox_ledger.errors import LedgerError

        self._remove_leftovers()
        found: tuple[dict[str, Any], dict[str, Any], list[list[Any]]] | None = None
        why: str | None = None
        if not self.data.exists():  # a new store: its stream too
            why = f"{self.data} does not exist" if self.path.exists() else None
        else:
            try:
                found, why = self._read(self._store())
            except (LedgerError, ClientError) as exc:
                why = f"cannot read the table's identity ({exc})"
        with self.server.exclusive():
            table = self._table()
            if table is None or not table.latest_stream_label:
                return
            label = table.latest_stream_label
            if found is not None:
                try:
                    self._restore(table, *found)
                except (ValueError, TypeError, KeyError, AttributeError) as exc:
                    found, why = None, f"damaged ({exc!r})"[:200]
            if found is None:
                self._restart(table, label, None)
        if why is not None:
            self.say(f"{self.path}: {why}; ignored (the table's stream starts new)")
        if found is None:
            self.header = None

    def _remove_leftovers(self) -> None:
        """Remove the temporary file of a whole write a killed server left (this server holds
        FILE's lock: no other writes one), and those of versions that named it by their
        process id."""
        import glob

        pattern = glob.escape(str(self.path)) + ".*tmp"
        for leftover in glob.glob(pattern, include_hidden=True):
            name = os.path.basename(leftover)[len(self.path.name) :]
            if name == ".tmp" or (name[1:-4].isdigit() and name.endswith(".tmp")):
                with contextlib.suppress(OSError):
                    os.unlink(leftover)

    def _read(
        self, store: str
    ) -> tuple[tuple[dict[str, Any], dict[str, Any], list[list[Any]]] | None, str | None]:
        """(header, last state, its records) of the sidecar, or why it is ignored; cuts a
        torn tail."""
        try:
            stream = open(self.path, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            return None, None
        except OSError as exc:
            return None, f"cannot be read ({exc.strerror or exc})"
        with stream:
            first = stream.readline()
            try:
                header = json.loads(first)
            except (ValueError, RecursionError):
                return None, "not a stream of this version"
            if (
                not first.endswith(b"\n")
                or not isinstance(header, dict)
                or header.get("kind") != KIND
                or header.get("format") != FORMAT
            ):
                return None, "not a stream of this version"
            if header.get("store") != store or header.get("table") != self.ledger.table_name:
                return None, "the stream of another store"
            if header.get("strict") != (self.server.strict is not None):
                kept = "with" if header.get("strict") else "without"
                return None, f"kept by a server {kept} --strict"
            state: dict[str, Any] | None = None
            records: list[list[Any]] = []
            pending: list[list[Any]] = []
            end = valid = stream.tell()
            for line in stream:
                end += len(line)
                try:
                    if not line.endswith(b"\n"):
                        raise ValueError("cut")
                    value = json.loads(line)
                    if "r" in value:
                        pending.append(value["r"])
                    else:
                        state = value["state"]
                        records.extend(pending)
                        pending = []
                        valid = end
                except (ValueError, TypeError, KeyError, RecursionError):
                    break  # a torn save: what came before its state line holds
            if state is None:
                return None, "damaged (no save in it)"
        if valid < end or pending:
            with contextlib.suppress(OSError):
                os.truncate(self.path, valid)
        self.lines, self.size, self.appended = len(records), valid, 0
        return (header, state, records), None

    def _restore(
        self, table: Any, header: dict[str, Any], state: dict[str, Any], rows: list[list[Any]]
    ) -> None:
        from moto.dynamodb.models.table import StreamRecord

        records: list[tuple[int, Any, Any, Any]] = []
        for row in rows:
            if not isinstance(row, list) or len(row) != 4 or not isinstance(row[3], dict):
                raise ValueError("a record line of another shape")
            seq, shard, taken, body = row
            record: Any = StreamRecord.__new__(StreamRecord)
            record.record = _body(body)
            records.append((int(seq), shard, taken, record))
        label = header.get("label")
        if not isinstance(label, str) or not label:
            raise ValueError("no stream label")
        front = self.server._front
        if front is not None:
            from sandbox_ledger.local.strict.streams import Kept

            # The records a shard trimmed since they were saved (the state names how far):
            # dropped here, as the module says, and as moto's first number drops them below.
            trimmed = {
                str(row[0]): int(row[10])
                for row in state.get("shards") or []
                if isinstance(row, list) and len(row) == 11
            }
            kept = [
                Kept(seq, str(shard), float(taken), record)
                for seq, shard, taken, record in records
                if seq > trimmed.get(str(shard), 0)
            ]
            self._restart(table, label, state.get("created"))
            front.streams.restore(table, state, kept)
        else:
            start = int(state["start"])
            live = [record for seq, _, _, record in records if seq >= start]
            if [int(r.record["dynamodb"]["SequenceNumber"]) for r in live] != list(
                range(start, start + len(live))
            ):
                raise ValueError("its records are not numbered one after another")
            keep = self.server._stream_records
            if keep is not None and len(live) > keep:
                start += len(live) - keep
                live = live[len(live) - keep :] if keep else []
            shard = self._restart(table, label, state.get("created"))
            shard.starting_sequence_number = start
            shard.items = live
        self.header, self.saved_to = header, max((r[0] for r in records), default=0)

    def _restart(self, table: Any, label: str | None, created: Any) -> Any:
        """A new empty moto shard for ``table``'s stream (under ``label``, created at
        ``created`` epoch seconds, if given): the load's records are gone."""
        from moto.dynamodb.models.table import StreamShard

        shard = StreamShard(table.account_id, table)
        if isinstance(created, (int, float)):
            shard.created_on = _EPOCH + timedelta(seconds=created)
        if label is not None:
            table.latest_stream_label = label
        table.stream_shard = shard
        if self.server._front is not None:
            self.server._front.streams.drop(table)  # made again, of this shard
        return shard

    # -- writing ------------------------------------------------------------------------

    def save(self) -> None:
        """Append the records taken since the last save, and the stream's state; write the
        file whole when it has none of this server's yet or holds mostly trimmed records.
        A failure is said once (and the file written whole at the next save)."""
        from botocore.exceptions import ClientError

        from sandbox_ledger.errors import LedgerError

        try:
            store = self._store()
        except (LedgerError, ClientError) as exc:  # said as FILE's save says it
            self._failed(str(exc))
            return
        with self.server.exclusive():
            table = self._table()
            snapshot = None if table is None else self._snapshot(table, store, self.saved_to)
            if snapshot is None:
                return
            header, _, records, kept = snapshot
            whole = (
                self.header != header
                or self.lines + len(records) > 2 * kept + REWRITE_LINES
                or self.appended > max(self.size, GROWTH)
            )
            if whole:
                snapshot = self._snapshot(table, store, 0)
                assert snapshot is not None  # the same stream, under the same lock
        header, state, records, _ = snapshot
        if not whole and not records and state == self.state:
            return  # nothing new: no line, no fsync
        # Bodies are written outside the lock: a record's body is whole once its request is.
        try:
            if whole:
                self.size, self.appended = self._write_whole(header, state, records), 0
                self.lines = len(records)
            else:
                self.appended += self._append(state, records)
                self.lines += len(records)
        except OSError as exc:
            self.header = None
            self._failed(exc.strerror or str(exc))
            return
        self.header, self.state = header, state
        self.saved_to = max([self.saved_to, *(r[0] for r in records)])
        if self.failing is not None:
            self.say(f"saved {self.path} again")
            self.failing = None

    def _snapshot(
        self, table: Any, store: str, after: int
    ) -> tuple[dict[str, Any], dict[str, Any], list[_Row], int] | None:
        """(header, state, records numbered after ``after``, records kept) of the table's
        stream (under the server's lock), None if it has none."""
        label, shard = table.latest_stream_label, table.stream_shard
        if not label or shard is None:
            return None
        front = self.server._front
        header = {
            "kind": KIND,
            "format": FORMAT,
            "store": store,
            "table": table.name,
            "arn": f"{table.table_arn}/stream/{label}",
            "label": label,
            "strict": front is not None,
        }
        created = (shard.created_on - _EPOCH).total_seconds()
        rows: list[_Row]
        if front is not None:
            kept = front.streams.kept(table, after)
            if kept is None:
                return None
            state, found, count = kept
            state["created"] = created
            rows = [(k.seq, k.shard, k.taken, _measured(k.record)) for k in found]
        else:
            state = {"start": shard.starting_sequence_number, "created": created}
            base = max(after + 1 - shard.starting_sequence_number, 0)
            rows = [
                (int(r.record["dynamodb"]["SequenceNumber"]), None, None, _measured(r))
                for r in shard.items[base:]
            ]
            count = len(shard.items)
        return header, state, rows, count

    def _append(self, state: dict[str, Any], records: list[_Row]) -> int:
        """Append one save (in one write, then fsync); the bytes written."""
        text = ("".join(_record(r) for r in records) + _line({"state": state})).encode()
        from sandbox_ledger.local.journal import write_synced  # not at import: --help is light

        descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW)
        try:
            write_synced(descriptor, text)
        finally:
            os.close(descriptor)
        return len(text)

    def _write_whole(
        self, header: dict[str, Any], state: dict[str, Any], records: list[_Row]
    ) -> int:
        """Write the file whole (a temporary file renamed over it); its size."""
        temporary = self.path.with_name(f"{self.path.name}.tmp")  # one server: the lock's
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)  # a killed writer's: made again, readable by its owner only
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(descriptor, "w", encoding="utf-8", newline="\n") as stream:
                stream.write(_line(header))
                stream.writelines(_record(r) for r in records)
                stream.write(_line({"state": state}))
                stream.flush()
                os.fsync(stream.fileno())
                size = os.fstat(stream.fileno()).st_size
            os.replace(temporary, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        with contextlib.suppress(OSError):
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        return size

    def _failed(self, why: str) -> None:
        if why != self.failing:
            self.say(f"could not save {self.path} ({why}); still serving, trying again")
        self.failing = why

    # -- the table ----------------------------------------------------------------------

    def _store(self) -> str:
        """The store identity the table's descriptor holds (read in process)."""
        return str(self.ledger.run(self.ledger._identity()))

    def _table(self) -> Any:
        """moto's table of the ledger (under the server's lock), None if gone."""
        from moto.core.models import DEFAULT_ACCOUNT_ID
        from moto.dynamodb.models import dynamodb_backends

        region = self.ledger._in_process.meta.region_name  # type: ignore[attr-defined]
        return dynamodb_backends[DEFAULT_ACCOUNT_ID][region].tables.get(self.ledger.table_name)


def _line(value: Any) -> str:
    return json.dumps(value, separators=(",", ":")) + "\n"


def _record(row: _Row) -> str:
    """A record's line (its body as moto writes it: times as epoch seconds, binary values as
    base64)."""
    from moto.dynamodb.models.utilities import dynamo_json_dump

    seq, shard, taken, body = row
    head = json.dumps([seq, shard, taken], separators=(",", ":"))[:-1]
    return f'{{"r":{head},{dynamo_json_dump(body)}]}}\n'


def _measured(record: Any) -> dict[str, Any]:
    """A record's body, its ``SizeBytes`` measured (under the server's lock: the stream
    sizes adjustment measures a record at its first ``to_json()``)."""
    body: dict[str, Any] = record.to_json()
    return body


def _body(body: dict[str, Any]) -> dict[str, Any]:
    """A record's body as read back: its time a datetime again, as moto keeps it."""
    part = body.get("dynamodb")
    if not isinstance(part, dict) or not isinstance(part.get("SequenceNumber"), str):
        raise ValueError("a record without its dynamodb part")
    when = part.get("ApproximateCreationDateTime")
    if isinstance(when, (int, float)):
        part["ApproximateCreationDateTime"] = _EPOCH + timedelta(seconds=when)
    return body
