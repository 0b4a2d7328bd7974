-- sandbox-ledger, SQLite schema version 6: the fleet's changes (SQLiteAdapter.changes).
--
-- A change is written by a trigger, in the transaction of the write that makes it: an entry
-- of sandbox.created or sandbox.closed stored, a session with a summary deleted (by
-- delete_sandbox: session.deleted; by purge_expired once it expired: session.expired). seq
-- is AUTOINCREMENT, so a seq is never handed out twice even after pruning, and SQLite has one
-- writer at a time, so seq is taken in commit order. See docs/live.md.
CREATE TABLE IF NOT EXISTS ledger_changes (
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,  -- feed order, never reused
    kind       TEXT    NOT NULL,
    name       TEXT    NOT NULL,
    sandbox_id TEXT    NOT NULL,
    at         INTEGER NOT NULL,                   -- Unix ms: the entry's ts, else the clock
    written_at INTEGER NOT NULL                    -- Unix s: what pruning compares
);
CREATE INDEX IF NOT EXISTS ledger_changes_written ON ledger_changes (written_at);

-- The pruning rule: a change is kept 24 hours; each change written deletes those older, and
-- the last seq deleted is kept here, so a position before it is known to have lost changes.
CREATE TABLE IF NOT EXISTS ledger_changes_pruned (
    id      INTEGER PRIMARY KEY CHECK (id = 1),
    through INTEGER NOT NULL
);
INSERT INTO ledger_changes_pruned (id, through) VALUES (1, 0) ON CONFLICT (id) DO NOTHING;

CREATE TRIGGER IF NOT EXISTS ledger_changes_of_entries AFTER INSERT ON ledger_events
WHEN NEW.event IN ('sandbox.created', 'sandbox.closed')
BEGIN
    INSERT INTO ledger_changes (kind, name, sandbox_id, at, written_at)
    SELECT CASE NEW.event WHEN 'sandbox.created' THEN 'session.created'
                          ELSE 'session.closed' END,
           s.name, s.sandbox_id, NEW.ts, CAST(strftime('%s', 'now') AS INTEGER)
    FROM ledger_sessions AS s WHERE s.id = NEW.session_id;
END;

CREATE TRIGGER IF NOT EXISTS ledger_changes_of_sessions AFTER DELETE ON ledger_sessions
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

CREATE TRIGGER IF NOT EXISTS ledger_changes_prune AFTER INSERT ON ledger_changes
BEGIN
    UPDATE ledger_changes_pruned
    SET through = MAX(through, (SELECT MAX(seq) FROM ledger_changes
                                WHERE written_at < NEW.written_at - 86400))
    WHERE EXISTS (SELECT 1 FROM ledger_changes WHERE written_at < NEW.written_at - 86400);
    DELETE FROM ledger_changes WHERE written_at < NEW.written_at - 86400;
END;
