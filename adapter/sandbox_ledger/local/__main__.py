"""``python -m sandbox_ledger.local``: the embedded DynamoDB until stdin closes."""

from .dynamodb import _serve_until_stdin_closes

_serve_until_stdin_closes()
