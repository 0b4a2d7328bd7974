"""Model-based, fault-injected verification of the ledger contract and the resource lifecycle.

See docs/verification.md: what the checkers cover, what they cannot, and how to add one.
"""
