"""One TLS context per CA bundle, shared by every async client of the process.

aiobotocore builds a new ``ssl.SSLContext`` for each client and loads the whole CA bundle into
it (certifi's 117 certificates, or a system bundle's): 17-22 ms of CPU per client here, the
client-side work of a dozen DynamoDB requests, paid again by each adapter or store a process
creates (``benchmarks/client_setup.py``: a new adapter's client and first request, 33 ms
before, 13 ms after).
An ``SSLContext`` may be shared by any number of connections, threads and event loops, so
:class:`SharedTLSSession` builds one per CA bundle and reuses it. A bundle file that changes
(its size or modification time) gets a new context, so a rotated bundle is read again as
aiobotocore would. Client certificates and proxies keep aiobotocore's own per-client context,
and so does a config that names its own ``http_session_cls`` (a subclass of aiobotocore's
``AIOHTTPSession`` that changes nothing opts out).
"""

from __future__ import annotations

import os
import threading
from typing import TYPE_CHECKING, Any

from aiobotocore.httpsession import AIOHTTPSession
from botocore.httpsession import get_cert_path

if TYPE_CHECKING:
    import ssl

_contexts: dict[tuple[str, int, int], ssl.SSLContext] = {}
_lock = threading.Lock()


def shared_context(session: AIOHTTPSession, ca_bundle: str) -> ssl.SSLContext:
    """The context ``session`` would build for ``ca_bundle``, built once per bundle version."""
    stat = os.stat(ca_bundle)
    key = (os.path.abspath(ca_bundle), stat.st_size, stat.st_mtime_ns)
    with _lock:
        context = _contexts.get(key)
        if context is None:
            context = session._get_ssl_context()
            context.load_verify_locations(ca_bundle, None, None)
            _contexts[key] = context
        return context


class SharedTLSSession(AIOHTTPSession):  # type: ignore[misc]  # aiobotocore is untyped
    """aiobotocore's HTTP session, with the TLS context of :func:`shared_context`."""

    def _create_connector(self, proxy_url: str | None) -> Any:
        ca_bundle = get_cert_path(self._verify) if self._verify else None
        if proxy_url or self._cert_file or not isinstance(ca_bundle, str):
            return super()._create_connector(proxy_url)
        import aiohttp

        return aiohttp.TCPConnector(
            limit=self._max_pool_connections,
            ssl=shared_context(self, ca_bundle),
            **self._connector_args,
        )
