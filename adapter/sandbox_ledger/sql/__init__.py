"""Machinery shared by the SQL adapters (``sandbox_ledger.sqlite``, ``sandbox_ledger.postgres``).

- :mod:`.rows`: validating entries and records and turning them into rows and back (pure).
- :mod:`.schema`: the versioned DDL files shipped in each adapter's package, and the
  forward-only migration plan both adapters follow on ``connect()``.
- :mod:`.retention`: the ledger retention's SQL fragments, agreement check and batched purge.
"""
