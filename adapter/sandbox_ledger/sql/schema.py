"""Versioned schemas: DDL files shipped as package data, applied forward on ``connect()``.

Each SQL adapter's package holds ``schema/NNNN_title.sql`` files; file ``NNNN`` takes a
database from version ``NNNN - 1`` to ``NNNN``. The version a database is at is recorded in the
database itself (table ``ledger_schema``). On ``connect()`` an adapter:

- creates the schema from nothing on an empty database (every file in order);
- migrates an older schema forward (the missing files in order, in one transaction) and logs
  ``migrated ledger schema ... from version A to B``;
- refuses a schema newer than it knows with :class:`~sandbox_ledger.errors.SchemaVersionError`
  (an older library must not write to a layout it does not understand).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING

from sandbox_ledger.errors import SchemaVersionError, StoreNotFoundError

if TYPE_CHECKING:
    from sandbox_ledger.sql.connection import Connection
    from sandbox_ledger.sql.statements import Statements

__all__ = [
    "Migration",
    "load_migrations",
    "log_migration",
    "migrate",
    "pending",
    "schema_logger",
]

schema_logger = logging.getLogger("sandbox_ledger.schema")

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    """One DDL file: it takes the schema to ``version``."""

    version: int
    title: str
    sql: str


def load_migrations(package: str) -> tuple[Migration, ...]:
    """Every ``schema/NNNN_title.sql`` of ``package``, by version; versions must be 1, 2, ..."""
    folder = resources.files(package).joinpath("schema")
    found = []
    for item in folder.iterdir():
        match = _FILE.match(item.name)
        if match:
            found.append(Migration(int(match[1]), match[2], item.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"{package}: schema files must be numbered 1..n, found {versions}")
    return tuple(found)


def pending(
    current: int | None, migrations: tuple[Migration, ...], *, where: str
) -> tuple[Migration, ...]:
    """The migrations to apply to a database at version ``current`` (None: no schema yet).

    Raises:
        SchemaVersionError: the database is at a version newer than ``migrations`` reach.
    """
    latest = migrations[-1].version if migrations else 0
    have = current or 0
    if have > latest:
        raise SchemaVersionError(
            f"{where}: the ledger schema is at version {have}, newer than this library "
            f"understands (up to {latest}); upgrade sandbox-ledger to use this database",
            found=have,
            supported=latest,
        )
    return tuple(m for m in migrations if m.version > have)


def log_migration(where: str, current: int | None, applied: tuple[Migration, ...]) -> None:
    """Say what ``connect()`` did to the schema (nothing is logged when nothing was applied)."""
    if not applied:
        return
    if current:
        schema_logger.warning(
            "migrated ledger schema at %s from version %d to %d (%s)",
            where,
            current,
            applied[-1].version,
            ", ".join(f"{m.version:04d}_{m.title}" for m in applied),
        )
    else:
        schema_logger.info("created ledger schema version %d at %s", applied[-1].version, where)


async def migrate(
    conn: Connection,
    statements: Statements,
    migrations: tuple[Migration, ...],
    *,
    where: str,
    read_only: bool = False,
) -> None:
    """Bring the database's schema to the newest of ``migrations``, in one transaction;
    ``read_only`` (a read-only adapter): only check that it is there and current.

    Raises:
        SchemaVersionError: the database's schema is newer than ``migrations`` reach.
        StoreNotFoundError: ``read_only`` and there is no ledger schema.
        SchemaVersionError: ``read_only`` and the schema is older (a read does not migrate
            it).
    """
    # The usual case (schema current) only reads, so it never waits for a writer or a lock.
    current = await _version(conn, statements)
    todo = pending(current, migrations, where=where)
    if read_only and current is None:
        raise StoreNotFoundError(f"{where} holds no ledger (a read never creates one)")
    if read_only and todo and current is not None:
        raise SchemaVersionError(
            f"{where}: the ledger schema is at version {current}, older than this library's "
            f"{todo[-1].version}; a read does not migrate it, a writer does (an adapter "
            "opened without read_only; from the shell: sandbox-ledger --store URL table create)",
            found=current,
            supported=todo[-1].version,
        )
    if todo == ():
        return
    async with conn.exclusive():
        await conn.rows(statements.version_table)
        current = await _version(conn, statements)  # another process may have migrated
        todo = pending(current, migrations, where=where)
        for migration in todo:
            await conn.apply(migration)
        if todo:
            await conn.rows(statements.set_version, {"version": todo[-1].version})
    log_migration(where, current, todo)


async def _version(conn: Connection, statements: Statements) -> int | None:
    if not await conn.rows(statements.schema_exists):
        return None
    found = await conn.rows(statements.version)
    return int(found[0][0]) if found else None
