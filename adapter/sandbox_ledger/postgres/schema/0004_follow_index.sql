-- sandbox-ledger, PostgreSQL schema version 4: following a session (PostgresAdapter.follow).
--
-- A follower asks for a session's entries after the last seq it handed out; this index
-- answers that with a range read. An append takes seq while it holds its session row's lock
-- (the summary upsert comes first in the append's one statement) and keeps the lock until
-- it commits, so within one session seq is taken in commit order: a follower that has seen
-- seq n never meets a smaller one later. See docs/live.md.
CREATE INDEX IF NOT EXISTS ledger_events_session_seq ON ledger_events (session_id, seq);

-- Followers are woken by a notification per stored entry (see sandbox_ledger.postgres.listen):
-- '<schema>:<session row id>' on the channel sandbox_ledger_follow, delivered at commit.
CREATE OR REPLACE FUNCTION ledger_events_notify() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('sandbox_ledger_follow', TG_TABLE_SCHEMA || ':' || NEW.session_id);
    RETURN NULL;
END
$$;
DROP TRIGGER IF EXISTS ledger_events_notify ON ledger_events;
CREATE TRIGGER ledger_events_notify AFTER INSERT ON ledger_events
    FOR EACH ROW EXECUTE FUNCTION ledger_events_notify();
