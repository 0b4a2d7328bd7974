-- sandbox-ledger, SQLite schema version 5: the fields of a newer client.
--
-- An entry may carry fields this version does not know (a newer client's traceId); the
-- memory and DynamoDB stores keep them, and so does this column now: the entry's unknown
-- fields as one JSON object in their given order, NULL when it has none. Entries stored
-- before it have none.
ALTER TABLE ledger_events ADD COLUMN extra TEXT;
