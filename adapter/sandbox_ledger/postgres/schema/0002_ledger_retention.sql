-- sandbox-ledger, PostgreSQL schema version 2: optional ledger retention.
--
-- Applied by PostgresAdapter.connect() in the transaction that records the version, under
-- the advisory lock; every statement is idempotent as well. Rows written before it keep
-- NULL expiry: forever. See docs/table-design.md, "Ledger retention" (SQLite and PostgreSQL).

-- The database's deployment settings (one row): the SQL analogue of the DynamoDB table's
-- descriptor. retention_seconds NULL: keep forever, until the first adapter given a
-- retention connects and records it; from then on every adapter must agree with it.
CREATE TABLE IF NOT EXISTS ledger_settings (
    id                integer PRIMARY KEY CHECK (id = 1),
    retention_seconds bigint CHECK (retention_seconds > 0)
);
INSERT INTO ledger_settings (id, retention_seconds) VALUES (1, NULL)
    ON CONFLICT (id) DO NOTHING;

-- When the entry expires (Unix s): its own ts (rounded down to seconds) + the retention
-- recorded when it was appended; NULL: kept forever.
ALTER TABLE ledger_events ADD COLUMN IF NOT EXISTS expires_at bigint;
-- When the summary expires: from the last sandbox.created / exec.complete / sandbox.closed
-- appended (the entries that change it). Reads hide a summary past it.
ALTER TABLE ledger_sessions ADD COLUMN IF NOT EXISTS summary_expires_at bigint;
-- When the whole row may go: the latest expiry of every entry ever appended to the session
-- (NULL if any is kept forever), so it outlives its entries and its summary.
ALTER TABLE ledger_sessions ADD COLUMN IF NOT EXISTS expires_at bigint;

-- purge_expired(): the expired entries, then the expired session rows, oldest first.
CREATE INDEX IF NOT EXISTS ledger_events_expires
    ON ledger_events (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX IF NOT EXISTS ledger_sessions_expires
    ON ledger_sessions (expires_at) WHERE expires_at IS NOT NULL;
