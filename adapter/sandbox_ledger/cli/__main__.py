"""``python -m sandbox_ledger.cli``: the same as the ``sandbox-ledger`` command."""

from sandbox_ledger.cli import main

if __name__ == "__main__":
    main()
