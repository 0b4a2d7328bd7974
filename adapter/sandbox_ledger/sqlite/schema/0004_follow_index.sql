-- sandbox-ledger, SQLite schema version 4: following a session (SQLiteAdapter.follow).
--
-- A follower asks for a session's entries after the last seq it handed out; this index
-- answers that with a range read, however long the session. SQLite has one writer at a
-- time, so seq is handed out in commit order. See docs/live.md.
CREATE INDEX IF NOT EXISTS ledger_events_session_seq ON ledger_events (session_id, seq);
