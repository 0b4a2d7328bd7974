"""``python -m sandbox_ledger_cdk.smoke``: the deploy smoke test (``make deploy-smoke``)."""

from sandbox_ledger_cdk.smoke.cli import main

raise SystemExit(main())
