"""One TLS context per CA bundle, shared by every async client of the process.

aiobotocore builds a new ``ssl.SSLContext`` for each client and loads the whole CA bundle into
it (certifi's 117 certificates, or a system bundle's): 17-22 ms of CPU per client here, the
client-side work of a dozen DynamoDB requests, paid again by each adapter or store a process
creates (``benchmarks/client_setup.py``: a new adapter's client and first request, 33 ms
before, 13 ms after).
An ``SSLContext`` may be shared by any number of connections, threads and event loops, so
:class:`SharedTLSSession` builds one per CA bundle and reuses it; a bundle file replaced or
rewritten is read again, as aiobotocore would (:func:`shared_context`).

It also verifies where stock aiobotocore 2.25 does not: it checks the server's host name
(aiobotocore accepts a certificate of any trusted CA for any host), and through a proxy
without TLS settings of its own it verifies the server (aiobotocore passes ``ssl=False``).
A config naming its own ``http_session_cls`` keeps it (a subclass of aiobotocore's
``AIOHTTPSession`` that changes nothing opts out of all this). One difference from boto3's
sync client remains: through a proxy, aiohttp 3.14 checks the endpoint's host name with its
trailing dot, if it has one (``https://dynamodb.us-east-1.amazonaws.com.``), which no
certificate matches; write the endpoint without the dot.
"""

from __future__ import annotations

import collections
import os
import ssl
import threading
import weakref
from typing import Any

from botocore.httpsession import get_cert_path

from sandbox_ledger.sdk.client import require_async_extra

try:
    from aiobotocore.httpsession import AIOHTTPSession
except ModuleNotFoundError:  # pragma: no cover - depends on the install
    require_async_extra()  # one line naming the extra
    raise

CONTEXTS_KEPT = 8
"""Bundle paths whose context each session class keeps, the most recently used: a process
that writes a CA bundle per tenant or per client to a file of its own rebuilds beyond these
(as aiobotocore does for every client) instead of keeping every context it ever built."""

# session class (weakly: a class made at run time goes with its contexts) -> bundle path ->
# (the bundle file's version, the context built from it), least recently used first
_contexts: weakref.WeakKeyDictionary[
    type[Any], collections.OrderedDict[str, tuple[tuple[int, ...], ssl.SSLContext]]
] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _verifying(context: ssl.SSLContext) -> ssl.SSLContext:
    """``context`` checking the server's host name too, unless verification is off in it.

    botocore's ``create_urllib3_context`` leaves ``check_hostname`` off because urllib3
    matches host names itself; aiohttp does not, so stock aiobotocore accepts a certificate
    of any trusted CA for any host."""
    if context.verify_mode != ssl.CERT_NONE:
        context.check_hostname = True
    return context


def shared_context(session: AIOHTTPSession, ca_bundle: str | os.PathLike[str]) -> ssl.SSLContext:
    """The context ``session`` builds for ``ca_bundle``: one per session class, bundle path and
    version of the bundle file (device, inode, size, modification and change times: a file
    replaced or rewritten in place, even with its old modification time put back, is read
    again). The context of a superseded version is dropped, and so is that of the least
    recently used path beyond :data:`CONTEXTS_KEPT`."""
    stat = os.stat(ca_bundle)
    version = (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns, stat.st_ctime_ns)
    path = os.path.abspath(ca_bundle)
    with _lock:
        kept = _contexts.setdefault(type(session), collections.OrderedDict())
        known = kept.get(path)
        if known is not None and known[0] == version:
            kept.move_to_end(path)
            return known[1]
        context: ssl.SSLContext = session._get_ssl_context()
        context.load_verify_locations(ca_bundle, None, None)
        kept[path] = (version, _verifying(context))
        kept.move_to_end(path)
        while len(kept) > CONTEXTS_KEPT:
            kept.popitem(last=False)
        return context


class SharedTLSSession(AIOHTTPSession):  # type: ignore[misc]  # aiobotocore is untyped
    """aiobotocore's HTTP session, with the TLS context of :func:`shared_context` and host
    names checked. A client certificate or a proxy with TLS settings of its own gets a
    context per client, built as aiobotocore builds it; a proxy without them gets the shared
    context (aiobotocore then verified nothing: ``ssl=False``). ``verify=False`` stays off."""

    def _create_connector(self, proxy_url: str | None) -> Any:
        if not self._verify:
            return super()._create_connector(proxy_url)
        import aiohttp

        ca_bundle = get_cert_path(self._verify)
        proxy_context = self._setup_proxy_ssl_context(proxy_url) if proxy_url else None
        if proxy_context is None and not self._cert_file:
            context = shared_context(self, ca_bundle)
        else:  # aiobotocore's own steps, for this client alone
            context = proxy_context or self._get_ssl_context()
            if self._cert_file:
                context.load_cert_chain(self._cert_file, self._key_file)
            context.load_verify_locations(ca_bundle, None, None)
            _verifying(context)
        return aiohttp.TCPConnector(
            limit=self._max_pool_connections, ssl=context, **self._connector_args
        )
