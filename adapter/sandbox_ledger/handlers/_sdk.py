"""The SDK session and endpoint a handler's clients use."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping


def sdk_session(environ: Mapping[str, str], session: Any | None) -> tuple[Any, str | None]:
    """``session`` or a new boto3 session in ``AWS_REGION``, and ``AWS_ENDPOINT_URL`` (None:
    the SDK's default endpoints), both read from ``environ`` rather than the process."""
    import boto3

    region = environ.get("AWS_REGION") or environ.get("AWS_DEFAULT_REGION") or None
    endpoint = environ.get("AWS_ENDPOINT_URL") or None
    return session or boto3.session.Session(region_name=region), endpoint
