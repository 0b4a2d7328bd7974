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


_OWN = frozenset({"_session", "_service", "_endpoint_url", "_client"})


class LazyClient:
    """A boto3 client created on first use, then kept (one per cold start like the others).

    For a client only a rare path uses: creating one loads its service model (for S3, which
    the stream handler uses only when a publish fails or on a replay, tens of milliseconds of
    CPU), and a cold start should not pay for it. Attribute access goes to the client, so
    ``client.meta.events`` and botocore's Stubber work on it.
    """

    def __init__(self, session: Any, service: str, endpoint_url: str | None) -> None:
        self._session = session
        self._service = service
        self._endpoint_url = endpoint_url
        self._client: Any = None

    @property
    def created(self) -> bool:
        """Whether the client exists yet."""
        return self._client is not None

    def __getattr__(self, name: str) -> Any:
        # Called only for names the proxy itself lacks: the client's methods and attributes
        # (never its own, which a copy that skipped __init__ lacks: no endless recursion).
        if name.startswith("__") or name in _OWN:
            raise AttributeError(name)
        if self._client is None:
            self._client = self._session.client(self._service, endpoint_url=self._endpoint_url)
        return getattr(self._client, name)

    def __repr__(self) -> str:
        state = "created" if self.created else "not created yet"
        return f"<LazyClient {self._service} ({state})>"
