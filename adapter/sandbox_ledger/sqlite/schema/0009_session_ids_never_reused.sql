-- sandbox-ledger, SQLite schema version 9: a session's row id is never handed out again.
--
-- A follow position holds its session's row id (sandbox_ledger/sql/follow.py), and a follower
-- resumed from it ends when the session's row is another. Without AUTOINCREMENT SQLite gives a
-- new row the largest id + 1, so a session deleted while it held the largest id and begun again
-- got the same id back, and a position of the deleted session resumed inside the new one. With
-- AUTOINCREMENT an id is never reused (sqlite_sequence keeps the largest ever taken). SQLite
-- cannot add AUTOINCREMENT to a table, so the table is built again with the same columns, ids,
-- indexes and triggers, in the migration's transaction. The session rows are few (one a
-- session: 50,000 sessions of 300,000 entries migrate in about half a second), and the entries
-- that refer to them are not touched: their foreign key is checked at commit
-- (defer_foreign_keys), when every id they name is back. An id deleted before this migration
-- above every id kept may still be taken once more (the upgrade cannot know it). An append's
-- summary upsert takes an id even when the session's row is there already (SQLite counts the
-- attempt), so ids grow with appends, not only sessions: still creation order, and 2**63 is
-- out of reach.
PRAGMA defer_foreign_keys = ON;

CREATE TABLE ledger_sessions_v9 (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,  -- creation order, never reused
    name               TEXT    NOT NULL,
    sandbox_id         TEXT    NOT NULL,
    started_at         INTEGER,
    completed_at       INTEGER,
    status             TEXT    NOT NULL DEFAULT 'running'
                               CHECK (status IN ('running', 'completed')),
    exec_count         INTEGER NOT NULL DEFAULT 0,
    summary_expires_at INTEGER,
    expires_at         INTEGER,
    UNIQUE (name, sandbox_id)
);
-- The rows wait in a copy while the table is dropped, and go into the new one once it has the
-- table's name: each row put back there answers the entries the drop left without one, which
-- is what lets the deferred foreign key pass at commit.
CREATE TABLE ledger_sessions_v8 AS SELECT * FROM ledger_sessions;

-- Dropping the table drops its indexes and its trigger (made again below); deleting its rows
-- this way is no change of the feed (a DROP fires no trigger). The trigger of the entries
-- reads the table: it goes first (a rename refuses a trigger that names a missing table) and
-- comes back as version 6 made it.
DROP TRIGGER ledger_changes_of_entries;
DROP TABLE ledger_sessions;
ALTER TABLE ledger_sessions_v9 RENAME TO ledger_sessions;
INSERT INTO ledger_sessions (
    id, name, sandbox_id, started_at, completed_at, status, exec_count, summary_expires_at,
    expires_at)
SELECT id, name, sandbox_id, started_at, completed_at, status, exec_count, summary_expires_at,
       expires_at
FROM ledger_sessions_v8 ORDER BY id;
DROP TABLE ledger_sessions_v8;

CREATE INDEX ledger_sessions_newest ON ledger_sessions (started_at DESC, id);
CREATE INDEX ledger_sessions_status_newest ON ledger_sessions (status, started_at DESC, id);
CREATE INDEX ledger_sessions_name_newest ON ledger_sessions (name, started_at DESC, id);
CREATE INDEX ledger_sessions_name_status_newest
    ON ledger_sessions (name, status, started_at DESC, id);
CREATE INDEX ledger_sessions_expires
    ON ledger_sessions (expires_at) WHERE expires_at IS NOT NULL;

CREATE TRIGGER ledger_changes_of_sessions AFTER DELETE ON ledger_sessions
WHEN OLD.started_at IS NOT NULL OR OLD.completed_at IS NOT NULL OR OLD.exec_count > 0
BEGIN
    INSERT INTO ledger_changes (kind, name, sandbox_id, at, written_at)
    VALUES (
        CASE WHEN OLD.expires_at IS NOT NULL
                  AND OLD.expires_at <= CAST(strftime('%s', 'now') AS INTEGER)
             THEN 'session.expired' ELSE 'session.deleted' END,
        OLD.name, OLD.sandbox_id,
        CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER),
        CAST(strftime('%s', 'now') AS INTEGER));
END;

CREATE TRIGGER ledger_changes_of_entries AFTER INSERT ON ledger_events
WHEN NEW.event IN ('sandbox.created', 'sandbox.closed')
BEGIN
    INSERT INTO ledger_changes (kind, name, sandbox_id, at, written_at)
    SELECT CASE NEW.event WHEN 'sandbox.created' THEN 'session.created'
                          ELSE 'session.closed' END,
           s.name, s.sandbox_id, NEW.ts, CAST(strftime('%s', 'now') AS INTEGER)
    FROM ledger_sessions AS s WHERE s.id = NEW.session_id;
END;
