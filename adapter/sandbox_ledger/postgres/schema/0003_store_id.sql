-- sandbox-ledger, PostgreSQL schema version 3: the schema's own identity.
--
-- Applied by PostgresAdapter.connect() in the transaction that records the version, under
-- the advisory lock; every statement is idempotent as well. Paging cursors are bound to
-- store_id: a cursor of another database or schema is refused, even one of the same name on
-- the same server; every client of this one accepts it. See docs/table-design.md, "Paging
-- cursors". md5 of random() and the clock: unique, not secret (gen_random_uuid() needs 13+).
ALTER TABLE ledger_settings ADD COLUMN IF NOT EXISTS store_id text;
UPDATE ledger_settings
    SET store_id = md5(random()::text || clock_timestamp()::text || pg_backend_pid()::text)
    WHERE id = 1 AND store_id IS NULL;
