"""The two Lambda handlers, as importable modules (``lambdas/`` holds their entry points).

Each module has ``build(environ)``, which validates exactly the settings the handler uses
and returns its dependencies (clients, store, publisher), ``dependencies()``, which builds
them once per cold start from ``os.environ``, and ``handler(event, context)``, the Lambda
entry point, which parses the event and calls one library function. Tests and the demo call
``build`` with their own environment, or ``handler`` after setting the environment.
"""

try:
    import aws_lambda_powertools  # noqa: F401 - both handlers log and count through it
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the install
    raise ModuleNotFoundError(
        "sandbox_ledger.handlers needs the 'lambda' extra: "
        f"pip install 'sandbox-ledger-dynamodb[lambda]' (missing module: {exc.name})",
        name=exc.name,
    ) from exc
