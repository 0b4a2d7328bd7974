-- sandbox-ledger, PostgreSQL schema version 6: the fleet's changes (PostgresAdapter.changes).
--
-- A change is written by a trigger, in the transaction of the write that makes it: an entry
-- of sandbox.created or sandbox.closed stored, a session with a summary deleted (by
-- delete_sandbox: session.deleted; by purge_expired once it expired: session.expired).
-- Transactions take seq in any order and commit in another, so the feed is ordered by the
-- writing transaction's id, then seq, and a reader hands out only the changes of
-- transactions older than every one still running (pg_snapshot_xmin): a transaction that
-- commits later always has a larger id than anything already handed out. See docs/live.md.
CREATE TABLE IF NOT EXISTS ledger_changes (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    txid       xid8   NOT NULL DEFAULT pg_current_xact_id(),
    kind       text   NOT NULL,
    name       text   NOT NULL,
    sandbox_id text   NOT NULL,
    at         bigint NOT NULL,              -- Unix ms: the entry's ts, else the clock
    written_at bigint NOT NULL DEFAULT extract(epoch FROM now())::bigint  -- pruning
);
CREATE INDEX IF NOT EXISTS ledger_changes_order ON ledger_changes (txid, seq);
CREATE INDEX IF NOT EXISTS ledger_changes_written ON ledger_changes (written_at);

-- The pruning rule: a change is kept 24 hours; each change written deletes those older, and
-- the last (txid, seq) deleted is kept here, so a position before it is known to have lost
-- changes.
CREATE TABLE IF NOT EXISTS ledger_changes_pruned (
    id      integer PRIMARY KEY CHECK (id = 1),
    txid    xid8    NOT NULL,
    seq     bigint  NOT NULL
);
INSERT INTO ledger_changes_pruned (id, txid, seq) VALUES (1, '0', 0) ON CONFLICT (id) DO NOTHING;

CREATE OR REPLACE FUNCTION ledger_changes_of_entries() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format(
        'INSERT INTO %1$I.ledger_changes (kind, name, sandbox_id, at) '
        'SELECT $1, s.name, s.sandbox_id, $2 FROM %1$I.ledger_sessions AS s WHERE s.id = $3',
        TG_TABLE_SCHEMA)
    USING CASE NEW.event WHEN 'sandbox.created' THEN 'session.created' ELSE 'session.closed' END,
          NEW.ts, NEW.session_id;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS ledger_changes_of_entries ON ledger_events;
CREATE TRIGGER ledger_changes_of_entries AFTER INSERT ON ledger_events
    FOR EACH ROW WHEN (NEW.event IN ('sandbox.created', 'sandbox.closed'))
    EXECUTE FUNCTION ledger_changes_of_entries();

CREATE OR REPLACE FUNCTION ledger_changes_of_sessions() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format(
        'INSERT INTO %I.ledger_changes (kind, name, sandbox_id, at) VALUES ($1, $2, $3, $4)',
        TG_TABLE_SCHEMA)
    USING CASE WHEN OLD.expires_at IS NOT NULL
                    AND OLD.expires_at <= extract(epoch FROM now())::bigint
               THEN 'session.expired' ELSE 'session.deleted' END,
          OLD.name, OLD.sandbox_id, (extract(epoch FROM clock_timestamp()) * 1000)::bigint;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS ledger_changes_of_sessions ON ledger_sessions;
CREATE TRIGGER ledger_changes_of_sessions AFTER DELETE ON ledger_sessions
    FOR EACH ROW
    WHEN (OLD.started_at IS NOT NULL OR OLD.completed_at IS NOT NULL OR OLD.exec_count > 0)
    EXECUTE FUNCTION ledger_changes_of_sessions();

CREATE OR REPLACE FUNCTION ledger_changes_prune() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format(
        'WITH gone AS (DELETE FROM %1$I.ledger_changes WHERE written_at < $1 - 86400 '
        'RETURNING txid, seq), '
        'last AS (SELECT txid, seq FROM gone ORDER BY txid DESC, seq DESC LIMIT 1) '
        'UPDATE %1$I.ledger_changes_pruned AS p SET txid = last.txid, seq = last.seq '
        'FROM last WHERE (last.txid, last.seq) > (p.txid, p.seq)',
        TG_TABLE_SCHEMA)
    USING NEW.written_at;
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS ledger_changes_prune ON ledger_changes;
CREATE TRIGGER ledger_changes_prune AFTER INSERT ON ledger_changes
    FOR EACH ROW EXECUTE FUNCTION ledger_changes_prune();
