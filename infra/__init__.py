"""The AWS deployment: the ledger table, the expiry handlers and their wiring (CDK v2)."""
