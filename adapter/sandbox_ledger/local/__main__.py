"""``python -m sandbox_ledger.local``: the embedded DynamoDB until stdin closes."""

from .dynamodb import _serve_until_stdin_closes

if __name__ == "__main__":  # importing the module (pkgutil.walk_packages) starts nothing
    _serve_until_stdin_closes()
