-- sandbox-ledger, PostgreSQL schema version 7: the change feed's triggers, cheaper per entry.
--
-- The same changes and the same pruning rule as version 6 (schema/0006_changes.sql); only
-- their cost on a write changes, which a bulk import pays once per sandbox.created and
-- sandbox.closed. Version 6 built and planned two statements per change (EXECUTE): the
-- change's insert, and the pruning that deletes the changes older than a day. Now the insert
-- is a static statement, planned once per connection, and the pruning statement runs only
-- when the oldest change kept is older than a day (read from the written_at index by a static
-- statement); when it is not, the pruning had nothing to delete and nothing to record. The
-- pruning itself stays planned with its actual bound (an index range, however many changes
-- are kept). The schema's name is written into the static statements when this migration
-- runs in it (search_path is the adapter's schema).
DO $migration$
BEGIN
    EXECUTE format($function$
CREATE OR REPLACE FUNCTION %1$I.ledger_changes_of_entries() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    INSERT INTO %1$I.ledger_changes (kind, name, sandbox_id, at)
    SELECT CASE NEW.event WHEN 'sandbox.created' THEN 'session.created'
                          ELSE 'session.closed' END,
           s.name, s.sandbox_id, NEW.ts
    FROM %1$I.ledger_sessions AS s WHERE s.id = NEW.session_id;
    RETURN NULL;
END
$body$
$function$, current_schema());
    EXECUTE format($function$
CREATE OR REPLACE FUNCTION %1$I.ledger_changes_prune() RETURNS trigger
LANGUAGE plpgsql AS $body$
BEGIN
    IF (SELECT min(written_at) FROM %1$I.ledger_changes) < NEW.written_at - 86400 THEN
        EXECUTE format(
            'WITH gone AS (DELETE FROM %%1$I.ledger_changes WHERE written_at < $1 - 86400 '
            'RETURNING txid, seq), '
            'last AS (SELECT txid, seq FROM gone ORDER BY txid DESC, seq DESC LIMIT 1) '
            'UPDATE %%1$I.ledger_changes_pruned AS p SET txid = last.txid, seq = last.seq '
            'FROM last WHERE (last.txid, last.seq) > (p.txid, p.seq)',
            TG_TABLE_SCHEMA)
        USING NEW.written_at;
    END IF;
    RETURN NULL;
END
$body$
$function$, current_schema());
END
$migration$;
