-- sandbox-ledger, PostgreSQL schema version 1.
--
-- Applied by PostgresAdapter.connect() in one transaction, under an advisory lock, with
-- search_path set to the adapter's schema (default "sandbox_ledger"); the version is recorded
-- in ledger_schema. Every listing below is served by an index (see tests/test_sql_indexes.py).

-- One row per session, keyed by (name, sandbox_id): the running summary that listings read.
-- An append upserts it in the same statement that inserts the entry, so exec_count never
-- disagrees with the events.
CREATE TABLE ledger_sessions (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,  -- ties of started_at
    name         text   NOT NULL,
    sandbox_id   text   NOT NULL,
    started_at   bigint,                      -- ts of the first sandbox.created appended
    completed_at bigint,                      -- ts of the first sandbox.closed appended
    status       text   NOT NULL DEFAULT 'running'
                        CHECK (status IN ('running', 'completed')),
    exec_count   bigint NOT NULL DEFAULT 0,   -- exec.complete events appended
    CONSTRAINT ledger_sessions_key UNIQUE (name, sandbox_id)
);

-- list_all_sandbox_details, with and without a status; list_sandbox_details, likewise.
CREATE INDEX ledger_sessions_newest ON ledger_sessions (started_at DESC, id);
CREATE INDEX ledger_sessions_status_newest ON ledger_sessions (status, started_at DESC, id);
CREATE INDEX ledger_sessions_name_newest ON ledger_sessions (name, started_at DESC, id);
CREATE INDEX ledger_sessions_name_status_newest
    ON ledger_sessions (name, status, started_at DESC, id);

-- Every entry, in append order (seq). The payload is the JSON text exactly as written
-- (text, not jsonb: jsonb would reorder keys, drop duplicates and refuse \u0000).
CREATE TABLE ledger_events (
    seq        bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,    -- ties of equal ts
    session_id bigint NOT NULL REFERENCES ledger_sessions (id) ON DELETE CASCADE,
    ts         bigint NOT NULL,               -- Unix milliseconds
    step_index bigint NOT NULL,
    branch     bigint,
    event      text   NOT NULL,
    payload    text,                          -- JSON text; NULL when absent
    error      text,
    -- Fixed before the first attempt (random, or a position for append_at), so a retried
    -- append whose first attempt did commit is recognised and stored once.
    append_key text   NOT NULL,
    CONSTRAINT ledger_events_append_key UNIQUE (append_key)
);

-- read_all (ascending ts, ties in append order) and the cascade of delete_sandbox.
CREATE INDEX ledger_events_session_ts ON ledger_events (session_id, ts, seq);
-- list_checkpoints and last_checkpoint read checkpoints only.
CREATE INDEX ledger_events_checkpoints ON ledger_events (session_id, ts, seq)
    WHERE event = 'sandbox.checkpoint_created';

-- Environment records, upserted by name; the record is its wire JSON text.
CREATE TABLE ledger_environments (
    id       bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,      -- first-saved order
    name     text   NOT NULL,
    built_at bigint NOT NULL,
    record   text   NOT NULL,
    CONSTRAINT ledger_environments_name UNIQUE (name)
);
CREATE INDEX ledger_environments_newest ON ledger_environments (built_at DESC, id);
