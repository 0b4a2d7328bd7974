"""The items a data file's sessions load as, kept beside it (``.FILE.image``) for the next
start of ``sandbox-ledger local --data FILE``.

A start builds each session's items from its lines (:mod:`sandbox_ledger.local.bulk`: the
adapter's own builders, about a tenth of a millisecond of CPU per entry). The image keeps
what was built, per session, under the SHA-256 of the session's lines, so that the next
start takes a session's items from it when its lines are the same and builds only the
sessions that changed. The server writes it whole once it serves after a load that built
anything, and a save appends the sessions it changed (built from their lines as FILE now
holds them). FILE stays the data: a session is only ever taken from the image when its
lines are byte for byte the ones its record was built from and every item is in the
session's partition, and the image is only read when

- every record's SHA-256 matches (else it is damaged: ignored as a whole); a last record cut
  short (``kill -9`` during an append) is left out, as FILE's torn last line is;
- it is of this format and was written by builders of the same source (:func:`fingerprint`:
  another version of sandbox-ledger, of Python or of pydantic builds its own);
- it holds only plain values (no object of any class is read from it: :class:`_Plain`).

Otherwise it is ignored, with the reason (:class:`Found`). Written whole, it goes to a
temporary file renamed over the last one. Removing it costs only the next start's time.

Layout: the line ``sandbox-ledger local image 1``, a JSON line ``{"fingerprint": ...}``, then
records: each a pickle (plain tuples, lists, strings and bytes: a list of sessions, each
``(name, sandboxId, digest of its lines, its last order id, its items)``) after its length
as 8 bytes and its SHA-256. A later record of a session replaces an earlier one.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import json
import os
import pickle
import struct
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from pathlib import Path

__all__ = [
    "Flat",
    "Found",
    "Image",
    "Stored",
    "fingerprint",
    "image_path",
    "lines_digest",
    "no_collection",
]

MAGIC = b"sandbox-ledger local image 1\n"
_LENGTH = struct.Struct(">Q")
_DIGEST = 32
_EMPTY = bytes(_LENGTH.size + _DIGEST)
CHUNK = 256
"""Sessions per pickled chunk (a writer holds the interpreter for one chunk at a time)."""


Flat = tuple[Any, ...]
"""An item as an image keeps it (:func:`sandbox_ledger.local.bulk.flat`)."""


class Stored(NamedTuple):
    """A session's items as a load builds them from its lines."""

    digest: bytes
    """The SHA-256 of the session's lines, sequence and order ids (:func:`lines_digest`)."""
    last_order: str
    """The greatest order id among its entries (a restart's order ids go on after it)."""
    items: list[Flat]
    """Every item the import would store for the session, each as :data:`Flat`."""


def lines_digest(
    lines: Iterable[str],
    runs: Iterable[tuple[str, int, int]] | None = None,
    orders: Iterable[str] | None = None,
) -> bytes:
    """The SHA-256 of a session's lines (each with its newline), as UTF-8, after its
    sequence's runs (the marks the items are built with) and its entries' order ids (their
    heads' keys), where the data file names them."""
    digest = hashlib.sha256()
    if runs is not None:
        digest.update(json.dumps([list(run) for run in runs]).encode("utf-8") + b"\n")
    if orders:
        digest.update(json.dumps({"orders": list(orders)}).encode("utf-8") + b"\n")
    for line in lines:
        digest.update(line.encode("utf-8"))
    return digest.digest()


def image_path(data: Path) -> Path:
    """Where the image of the data file ``data`` is: ``.NAME.image`` beside the file a link
    named ``data`` leads to (as its lock file)."""
    target = data.resolve()
    return target.with_name(f".{target.name}.image")


def fingerprint(shard_count: int) -> str:
    """What the image's items depend on besides the lines: this format, the source of the
    modules that build them, the versions of Python and of the library that parses the
    lines (pydantic), and the table's shard count. Not moto's: the image holds DynamoDB's
    low-level values, made into moto's objects at each load."""
    import importlib
    from importlib.metadata import version

    digest = hashlib.sha256(MAGIC)
    digest.update(f"{sys.version_info[:2]}|{shard_count}".encode())
    for distribution in ("pydantic", "pydantic-core"):  # they read the lines
        digest.update(f"|{distribution} {version(distribution)}".encode())
    for name in _BUILDERS:
        module = importlib.import_module(name)
        source = getattr(module, "__file__", None)
        digest.update(name.encode())
        if source is not None and os.path.exists(source):
            with open(source, "rb") as stream:
                digest.update(stream.read())
        else:  # pragma: no cover - a build without sources: its version then
            from sandbox_ledger import __version__

            digest.update(__version__.encode())
    return digest.hexdigest()


_BUILDERS = (
    "sandbox_ledger.local.bulk",
    "sandbox_ledger.local.image",
    "sandbox_ledger.dynamodb._items",
    "sandbox_ledger.dynamodb._packing",
    "sandbox_ledger.dynamodb._sequence",
    "sandbox_ledger.dynamodb.adapter",
    "sandbox_ledger.dynamodb.import_items",
    "sandbox_ledger.transfer",
    "sandbox_ledger.models",
    "sandbox_ledger.keys",
    "sandbox_ledger._json",
    "sandbox_ledger.sdk.attributes",
)
"""The modules whose code decides an entry's items (a change to any makes a new image)."""


@dataclass
class Found:
    """An image as read: its fingerprint and sessions, or why it was ignored."""

    fingerprint: str = ""
    sessions: dict[tuple[str, str], Stored] = field(default_factory=dict)
    ignored: str | None = None
    """Why the image (present) was not read: damaged, another format."""
    records: int = 0
    """Session records read (more than :attr:`sessions`: some replaced by later ones)."""
    torn: bool = False
    """The last record was cut short (left out)."""


@dataclass
class Image:
    """The image of one data file: what a load found in it, and what it built."""

    path: Path
    found: Found = field(default_factory=Found)
    kept: dict[tuple[str, str], Stored] = field(default_factory=dict)
    """Each session as the last load stored it (from the image or built)."""
    fingerprint: str = ""
    """The fingerprint of what the last load stored."""
    used: int = 0
    """Sessions the last load took from the image."""
    shard_count: int | None = None
    """The table's shard count (set by a load)."""
    written: os.stat_result | None = None
    """The image file as this server last read or wrote it (None: none to append to)."""

    def read(self) -> Found:
        """Read the image (:attr:`found`): nothing if there is none."""
        with no_collection():
            self.found, self.written = _read(self.path)
        return self.found

    @property
    def current(self) -> bool:
        """The image holds exactly what the last load stored (nothing to write)."""
        found = self.found
        return (
            found.ignored is None
            and not found.torn
            and found.fingerprint == self.fingerprint
            and found.records == len(self.kept)
            and found.sessions.keys() == self.kept.keys()
            and all(found.sessions[key].digest == s.digest for key, s in self.kept.items())
        )

    def release(self) -> None:
        """Forget the sessions read and kept (the server need not hold them while it
        serves)."""
        found = self.found
        self.found = Found(found.fingerprint, ignored=found.ignored, torn=found.torn)
        self.kept = {}
        if self.fingerprint != found.fingerprint or found.ignored is not None or found.torn:
            self.written = None  # not this version's image, or one ending torn: not appended to

    def write(self, going_on: Callable[[], bool] = lambda: True) -> bool:
        """Write :attr:`kept` as the image, a chunk of sessions at a time (``going_on`` is
        asked before each: False leaves the last image as it was). Returns whether it was
        written. Raises OSError (the temporary file is removed)."""
        temporary = self.path.with_name(self.path.name + ".tmp")
        sessions = list(self.kept.items())
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(temporary)  # a killed writer's: made again, readable by its owner only
            descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with open(descriptor, "wb") as stream:
                stream.write(MAGIC)
                stream.write(json.dumps({"fingerprint": self.fingerprint}).encode() + b"\n")
                for start in range(0, len(sessions), CHUNK):
                    if not going_on():
                        raise _Abandoned
                    stream.write(_chunk(sessions[start : start + CHUNK]))
            os.replace(temporary, self.path)
        except BaseException as exc:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            if isinstance(exc, _Abandoned):
                return False
            raise
        self.written = os.stat(self.path)
        self.found = Found(self.fingerprint, dict(self.kept), records=len(self.kept))
        return True

    def append(self, sessions: dict[tuple[str, str], Stored]) -> bool:
        """Append ``sessions`` (built from their lines as a save wrote them) to the image
        this server wrote or read last, if it is still that file: a later record of a
        session replaces the earlier one when the image is read. Returns whether they
        were appended. Raises OSError (the image then ends in a torn record, which a read
        leaves out)."""
        written = self.written
        if written is None or not sessions:
            return False
        try:
            now = os.stat(self.path)
        except FileNotFoundError:
            return False
        if (now.st_dev, now.st_ino, now.st_size) != (
            written.st_dev,
            written.st_ino,
            written.st_size,
        ):
            self.written = None  # another file, or changed by another: no more appends
            return False
        with open(self.path, "ab") as stream:
            stream.write(_chunk(list(sessions.items())))
        self.written = os.stat(self.path)
        return True


def _chunk(sessions: list[tuple[tuple[str, str], Stored]]) -> bytes:
    """A record of ``sessions``: its length, its SHA-256, then its pickle."""
    data = pickle.dumps([(*key, *stored) for key, stored in sessions], protocol=5)
    return _LENGTH.pack(len(data)) + hashlib.sha256(data).digest() + data


@contextlib.contextmanager
def no_collection() -> Iterator[None]:
    """Python's cyclic garbage collector held off while a load makes its many objects (none
    of them in a cycle: the collector would walk them all, again and again, for nothing)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class _Abandoned(Exception):
    pass


def read(path: Path) -> Found:
    """The image at ``path``: its sessions, or why it is ignored (nothing if absent)."""
    with no_collection():
        return _read(path)[0]


def _read(path: Path) -> tuple[Found, os.stat_result | None]:
    try:
        with open(path, "rb") as stream:
            data = stream.read()
            status = os.fstat(stream.fileno())
    except FileNotFoundError:
        return Found(), None
    except OSError as exc:
        return Found(ignored=f"cannot be read ({exc.strerror or exc})"), None
    if not data.startswith(MAGIC):
        return Found(ignored="not an image of this version"), None
    try:
        view = io.BytesIO(data)
        view.seek(len(MAGIC))
        header = json.loads(view.readline())
        found = Found(str(header["fingerprint"]))
        while view.tell() < len(data):
            start = view.tell()
            head = view.read(_LENGTH.size + _DIGEST)
            length = _LENGTH.unpack(head[: _LENGTH.size])[0] if len(head) == len(_EMPTY) else 0
            if len(head) < len(_EMPTY) or start + len(head) + length > len(data):
                found.torn = True  # the last record cut short (kill -9): left out
                break
            record = view.read(length)
            if hashlib.sha256(record).digest() != head[_LENGTH.size :]:
                return Found(ignored="damaged (a record's digest does not match)"), None
            for name, sandbox_id, session_digest, last_order, items in _Plain(
                io.BytesIO(record)
            ).load():
                if not (
                    isinstance(name, str)
                    and isinstance(sandbox_id, str)
                    and isinstance(session_digest, bytes)
                    and isinstance(last_order, str)
                    and isinstance(items, list)
                    and all(_flat(item) for item in items)
                ):
                    raise TypeError("not a session's items")
                found.sessions[(name, sandbox_id)] = Stored(session_digest, last_order, items)
                found.records += 1
    except (ValueError, TypeError, KeyError, EOFError, struct.error, pickle.UnpicklingError) as exc:
        return Found(ignored=f"not readable ({exc})"[:200]), None
    return found, status


def _flat(item: object) -> bool:
    """Whether ``item`` has the shape of :data:`Flat`: two key strings, then name, type and
    value for each attribute."""
    return (
        isinstance(item, tuple)
        and len(item) % 3 == 2
        and isinstance(item[0], str)
        and isinstance(item[1], str)
    )


class _Plain(pickle.Unpickler):
    """Reads plain values only: a pickle that names any class or function is refused."""

    def find_class(self, module: str, name: str) -> Any:
        raise pickle.UnpicklingError(f"a value of a class ({module}.{name})")
