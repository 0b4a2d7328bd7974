-- sandbox-ledger, SQLite schema version 3: the database's own identity.
--
-- Applied by SQLiteAdapter.connect() in the same transaction that records the version, so
-- it runs exactly once per database. Paging cursors are bound to store_id: a cursor of
-- another database is refused, whatever its file is called; every client of this one
-- accepts it. See docs/table-design.md, "Paging cursors".
ALTER TABLE ledger_settings ADD COLUMN store_id TEXT;
UPDATE ledger_settings SET store_id = lower(hex(randomblob(16)))
    WHERE id = 1 AND store_id IS NULL;
