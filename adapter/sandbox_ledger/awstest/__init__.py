"""``make test-aws`` and ``make test-aws-clean``: the library's suites against a real AWS
account, opt-in and safe (docs/deploy.md, "The suites on a real account").

``python -m sandbox_ledger.awstest run [--suite NAME]... [-- PYTEST_ARGS]`` refuses to start
without ``SANDBOX_LEDGER_AWS_TESTS=1`` and credentials that resolve; prints the account, the
region and an estimate of the cost; creates one on-demand table named for the run
(:mod:`.runtable`: tagged, with the stream and TTL the construct sets); runs each suite
(:mod:`.suites`) through it in one-table mode; prints what they consumed and its price
(:mod:`.meter`); and deletes the table, also on a failure, Ctrl-C or SIGTERM (:mod:`.run`).
``python -m sandbox_ledger.awstest clean [--min-age HOURS]`` deletes what runs left, found by
their tag. ``--endpoint-url`` points either at another endpoint in place of AWS (this
repository's tests point it at the embedded server).
"""
