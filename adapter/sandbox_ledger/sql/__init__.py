"""The SQL core under both dialects (``sandbox_ledger.sqlite``, ``sandbox_ledger.postgres``).

- :mod:`.adapter`: the ledger contract, written once over the dialect's hooks.
- :mod:`.statements`: the SQL text of the contract over a dialect's tables and placeholders.
- :mod:`.connection`: what the core needs of a dialect's connection.
- :mod:`.rows`: validating entries and records and turning them into rows and back (pure).
- :mod:`.schema`: the versioned DDL files shipped in each dialect's package, and the
  forward-only migration both dialects run on ``connect()``.
- :mod:`.retention`: the ledger retention's SQL fragments, agreement and batched purge.
"""
