"""moto's choice of service app is remembered for DynamoDB requests.

The server wraps moto's dispatcher in :class:`_DynamoDBFirst` when this adjustment is on (it
replaces nothing of moto's: it relies on how moto's dispatcher chooses an app, which the
fingerprint checks).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import Adjustment

if TYPE_CHECKING:
    from collections.abc import Callable

NAME = "dispatch"
KNOWN_SOURCES = {
    "DomainDispatcherApplication.get_application": frozenset({"ae39700cc3ee21e6"}),
}


def _sources() -> dict[str, Any]:
    from moto.moto_server.werkzeug_app import DomainDispatcherApplication

    return {
        "DomainDispatcherApplication.get_application": (DomainDispatcherApplication.get_application)
    }


def _install(stock: dict[str, Any]) -> None:
    """Nothing to install: the server wraps its own dispatcher."""


ADJUSTMENT = Adjustment(
    name=NAME,
    gain="moto's choice of service app is remembered for DynamoDB requests",
    behaviour=None,
    sources=_sources,
    known=KNOWN_SOURCES,
    install=_install,
)

_DYNAMODB_TARGETS = frozenset({"DynamoDB_20120810", "DynamoDBStreams_20120810"})
_DYNAMODB_SERVICES = frozenset({"dynamodb", "dynamodbstreams"})


class _DynamoDBFirst:
    """moto's dispatcher, with its choice of app for DynamoDB requests remembered.

    moto works out, for every request, which of its services' apps serves it (the host, the
    path, the body and the signature's credential scope, scanning the list of its modules):
    about a tenth of a DynamoDB request's time here. A DynamoDB or DynamoDB Streams request
    is recognised by its ``X-Amz-Target`` and its signature's service; the first one of each
    kind is dispatched by moto, which then serves every later one of that kind without the
    search. Every other request goes through moto's dispatcher unchanged.
    """

    def __init__(self, dispatcher: Any) -> None:
        self._dispatcher = dispatcher
        self._apps: dict[tuple[str, str], Any] = {}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        key = _dynamodb_request(environ)
        app = self._apps.get(key) if key else None
        if app is None:
            app = self._dispatcher.get_application(environ)
            # Remembered only once moto chose its DynamoDB app for it: a request whose
            # signature moto reads otherwise must not decide where later ones go.
            if key and getattr(app, "service", None) in _DYNAMODB_SERVICES:
                self._apps[key] = app
        return app(environ, start_response)


def _dynamodb_request(environ: dict[str, Any]) -> tuple[str, str] | None:
    """(target prefix, signed service) of a DynamoDB (Streams) JSON request at ``/``, or None."""
    if environ.get("PATH_INFO") != "/":
        return None
    prefix = str(environ.get("HTTP_X_AMZ_TARGET", "")).partition(".")[0]
    if prefix not in _DYNAMODB_TARGETS:
        return None
    # AWS4-HMAC-SHA256 Credential=AKID/20261201/us-east-1/dynamodb/aws4_request, ...: read
    # the way moto reads it (the second word of the first comma-separated part).
    words = str(environ.get("HTTP_AUTHORIZATION", "")).split(",")[0].split()
    parts = words[1].split("/") if len(words) > 1 else []
    return (prefix, parts[3].lower()) if len(parts) == 5 else None
