"""Powertools Tracer (AWS X-Ray) behind one setting, ``SANDBOX_LEDGER_TRACING``.

Off (the default), the Tracer is never created and the X-Ray SDK never imported, so a cold
start pays nothing for it. On (the stack's ``tracing`` context value sets it, with active
tracing on the functions and the X-Ray grant), each invocation is a traced segment and the
SDK's AWS calls are subsegments. Outside Lambda, Powertools disables the Tracer itself.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeVar, cast

from sandbox_ledger.errors import InvalidInputError

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

TRACING_VARIABLE = "SANDBOX_LEDGER_TRACING"
_F = TypeVar("_F", bound="Callable[..., Any]")


def tracing_enabled(environ: Mapping[str, str]) -> bool:
    """Whether ``SANDBOX_LEDGER_TRACING`` turns tracing on (InvalidInputError naming the
    variable if it is neither true nor false)."""
    raw = environ.get(TRACING_VARIABLE, "").strip().lower()
    if raw in ("", "0", "false", "no", "off"):
        return False
    if raw in ("1", "true", "yes", "on"):
        return True
    raise InvalidInputError(TRACING_VARIABLE, f"must be true or false, got {raw!r}")


def traced(service: str, environ: Mapping[str, str]) -> Callable[[_F], _F]:
    """A decorator for a Lambda handler: Powertools' ``capture_lambda_handler`` when
    tracing is on, else the handler unchanged."""
    if not tracing_enabled(environ):
        return lambda handler: handler
    from aws_lambda_powertools import Tracer

    tracer = Tracer(service=service)

    def decorate(handler: _F) -> _F:
        return cast("_F", tracer.capture_lambda_handler(handler))

    return decorate
