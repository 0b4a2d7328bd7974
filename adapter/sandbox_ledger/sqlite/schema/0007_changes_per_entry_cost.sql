-- sandbox-ledger, SQLite schema version 7: the change feed's pruning, cheaper per change.
--
-- The same pruning rule as version 6 (schema/0006_changes.sql): a change is kept 24 hours,
-- each change written deletes those older and records the last seq deleted. Version 6 ran
-- the pruning's two statements for every change written, which a bulk import pays once per
-- sandbox.created and sandbox.closed; now they run only when the oldest change kept is older
-- than a day (read from the written_at index). When it is not, they had nothing to delete and
-- nothing to record.
DROP TRIGGER IF EXISTS ledger_changes_prune;
CREATE TRIGGER ledger_changes_prune AFTER INSERT ON ledger_changes
WHEN (SELECT min(written_at) FROM ledger_changes) < NEW.written_at - 86400
BEGIN
    -- The WHEN clause is version 6's condition on this update: some change is older.
    UPDATE ledger_changes_pruned SET through = MAX(
        through, (SELECT MAX(seq) FROM ledger_changes WHERE written_at < NEW.written_at - 86400));
    DELETE FROM ledger_changes WHERE written_at < NEW.written_at - 86400;
END;
