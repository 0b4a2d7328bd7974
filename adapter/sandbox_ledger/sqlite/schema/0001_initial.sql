-- sandbox-ledger, SQLite schema version 1.
--
-- Applied by SQLiteAdapter.connect() in one transaction; the version is recorded in
-- ledger_schema. Every listing below is served by an index (see tests/test_sql_indexes.py).

-- One row per session, keyed by (name, sandbox_id): the running summary that listings read.
-- Updated in the same transaction as every entry appended to the session, so exec_count
-- never disagrees with the events.
CREATE TABLE ledger_sessions (
    id           INTEGER PRIMARY KEY,            -- creation order (ties of started_at)
    name         TEXT    NOT NULL,
    sandbox_id   TEXT    NOT NULL,
    started_at   INTEGER,                        -- ts of the first sandbox.created appended
    completed_at INTEGER,                        -- ts of the first sandbox.closed appended
    status       TEXT    NOT NULL DEFAULT 'running'
                         CHECK (status IN ('running', 'completed')),
    exec_count   INTEGER NOT NULL DEFAULT 0,     -- exec.complete events appended
    UNIQUE (name, sandbox_id)
);

-- list_all_sandbox_details, with and without a status; list_sandbox_details, likewise.
CREATE INDEX ledger_sessions_newest ON ledger_sessions (started_at DESC, id);
CREATE INDEX ledger_sessions_status_newest ON ledger_sessions (status, started_at DESC, id);
CREATE INDEX ledger_sessions_name_newest ON ledger_sessions (name, started_at DESC, id);
CREATE INDEX ledger_sessions_name_status_newest
    ON ledger_sessions (name, status, started_at DESC, id);

-- Every entry, in append order (seq). The payload is the JSON text exactly as written.
CREATE TABLE ledger_events (
    seq        INTEGER PRIMARY KEY,              -- append order (ties of equal ts)
    session_id INTEGER NOT NULL REFERENCES ledger_sessions (id),
    ts         INTEGER NOT NULL,                 -- Unix milliseconds
    step_index INTEGER NOT NULL,
    branch     INTEGER,
    event      TEXT    NOT NULL,
    payload    TEXT,                             -- JSON text; NULL when absent
    error      TEXT,
    append_key TEXT    UNIQUE                    -- set by append_at: a re-imported line is a no-op
);

-- read_all (ascending ts, ties in append order) and delete_sandbox.
CREATE INDEX ledger_events_session_ts ON ledger_events (session_id, ts, seq);
-- list_checkpoints and last_checkpoint read checkpoints only.
CREATE INDEX ledger_events_checkpoints ON ledger_events (session_id, ts, seq)
    WHERE event = 'sandbox.checkpoint_created';

-- Environment records, upserted by name; the record is its wire JSON text.
CREATE TABLE ledger_environments (
    id       INTEGER PRIMARY KEY,                -- first-saved order, kept on update
    name     TEXT    NOT NULL UNIQUE,
    built_at INTEGER NOT NULL,
    record   TEXT    NOT NULL
);
CREATE INDEX ledger_environments_newest ON ledger_environments (built_at DESC, id);
