"""A deploy smoke test on a real account (``make deploy-smoke``,
``python -m sandbox_ledger_cdk.smoke``): the repository's app deployed as a scratch stack
``sandbox-ledger-smoke-<hex>``, a worker built like ``examples/worker`` invoked, a sweep run,
its ``ResourceExpired`` event received from the stack's bus, the alarms checked; then the
stack and everything the run created removed, also when a step fails, on Ctrl-C and on
SIGTERM. It refuses to start unless ``SANDBOX_LEDGER_AWS_TESTS=1`` and the credentials of
boto3's default chain resolve (STS GetCallerIdentity).

The worker is a Lambda function the run creates beside the stack, not inside it: the
stack's own Lambda asset (the library and its locked packages, built for the stack's
runtime and architecture) with ``examples/worker/handler.py`` added, and a role holding
only the stack's ``WorkerPolicyArn``. So the run proves the worker policy as IAM evaluates
it and the library as Lambda runs it, where the library run locally under an assumed role
would prove only the first; and the app's template (its cdk-nag checks, the template tests)
gets no smoke-only function.

- :mod:`.plan`: the run's names, its CDK context and command, the opt-in, who and where,
  the cost and time estimate;
- :mod:`.checks`: what each step sends and checks, as pure functions;
- :mod:`.cleanup`: what a run leaves, in which order it goes, and its removal;
- :mod:`.run`: the steps, in order, and the run that always ends with the removal;
- :mod:`.cli`: the account's side (the CDK CLI, Lambda) and the command line.

``tests/deploy/test_deploy_smoke.py`` tests the pure parts and runs the steps against moto.
"""
