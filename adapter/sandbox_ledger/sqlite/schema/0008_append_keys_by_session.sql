-- sandbox-ledger, SQLite schema version 8: append keys stored behind their session's id.
--
-- An import's claim key (i<occurrence>-<content digest>) and an append_at's position key
-- (p<position>-<digest>) are random, so version 7's unique index on append_key took each new
-- entry at a random page: a batch of 8,000 entries into a ledger of a million touched most
-- of the index's pages, and each commit wrote them to the WAL again. From this version the
-- column holds '<session id as 16 hex digits>:<key>' (sandbox_ledger/sqlite/queries.py:
-- STORED_KEY): a key names its session already (its digest covers name and sandboxId), so
-- the index refuses exactly what it refused before, and a new session's entries go to the
-- index's end. The keys already stored are rewritten the same way, so an import run again
-- after the upgrade finds every entry it wrote before.
UPDATE ledger_events SET append_key = printf('%016x:', session_id) || append_key
WHERE append_key IS NOT NULL;

-- A process of an older library that connected before this migration still writes keys
-- without the prefix, which this version's lookups would not find (a re-import by either
-- would store such an entry twice): its keyed inserts are refused instead. Live appends
-- (no key) and this version's writes pass.
DROP TRIGGER IF EXISTS ledger_events_keys_by_session;
CREATE TRIGGER ledger_events_keys_by_session BEFORE INSERT ON ledger_events
WHEN NEW.append_key IS NOT NULL AND NEW.append_key NOT GLOB '*:*'
BEGIN
    SELECT RAISE(ABORT, 'sandbox-ledger: an append key without its session id (written by a library older than schema version 8): upgrade sandbox-ledger in every process that writes this database');
END;
