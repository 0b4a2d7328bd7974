"""The async clients share one TLS context per CA bundle (sandbox_ledger.sdk.tls), and that
context still verifies: a real HTTPS endpoint whose certificate the bundle holds answers, one
the bundle does not hold is refused, and a bundle rewritten in place is read again."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import gc
import http.server
import ipaddress
import json
import os
import socket
import socketserver
import ssl
import subprocess
import sys
import threading
import weakref
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from aiobotocore.config import AioConfig
from aiobotocore.httpsession import AIOHTTPSession
from botocore.config import Config
from botocore.exceptions import SSLError
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from sandbox_ledger.dynamodb import DynamoDBAdapter
from sandbox_ledger.sdk import tls
from sandbox_ledger.sdk.client import AsyncClient


def _self_signed(directory: Path, name: str, dns_name: str | None = None) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1, or for ``dns_name`` only (and its key), valid for a day."""
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(dns_name)]
                if dns_name
                else [x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / f"{name}.pem", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


class _ListTables(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = json.dumps({"TableNames": ["over-tls"]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.0")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextlib.contextmanager
def _serving_tls(cert: Path, key: Path) -> Iterator[str]:
    """A DynamoDB-shaped HTTPS endpoint on 127.0.0.1 presenting ``cert``: its URL."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ListTables)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


@pytest.fixture
def https_endpoint(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An endpoint with a certificate for 127.0.0.1, and that certificate."""
    cert, key = _self_signed(tmp_path, "server")
    with _serving_tls(cert, key) as endpoint:
        yield endpoint, cert


@pytest.fixture
def ca_bundle(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """AWS_CA_BUNDLE pointing at a file the test fills."""
    bundle = tmp_path / "bundle.pem"
    monkeypatch.setenv("AWS_CA_BUNDLE", str(bundle))
    return bundle


async def _list_tables(endpoint: str) -> list[str]:
    # One attempt: a refused certificate is not retried into a slow test.
    once = Config(retries={"mode": "standard", "total_max_attempts": 1})
    client = AsyncClient(endpoint_url=endpoint, region_name="us-east-1", session=None, config=once)
    try:
        raw = await client.get()
        answer = await raw.list_tables()
        return list(answer["TableNames"])
    finally:
        await client.close()


def _connector_context(session: AIOHTTPSession) -> Any:
    return session._create_connector(None)._ssl


@pytest.fixture
async def sessions() -> AsyncIterator[list[AIOHTTPSession]]:
    made: list[AIOHTTPSession] = []
    yield made
    for session in made:
        await session.close()


async def test_two_clients_share_one_context_that_verifies(
    https_endpoint: tuple[str, Path], ca_bundle: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint, cert = https_endpoint
    ca_bundle.write_bytes(cert.read_bytes())
    built: list[ssl.SSLContext] = []
    stock = AIOHTTPSession._get_ssl_context

    def spy(self: AIOHTTPSession) -> ssl.SSLContext:
        built.append(stock(self))
        return built[-1]

    monkeypatch.setattr(AIOHTTPSession, "_get_ssl_context", spy)
    assert await _list_tables(endpoint) == ["over-tls"]
    assert await _list_tables(endpoint) == ["over-tls"]
    [context] = built  # one context for both clients
    assert context.verify_mode == ssl.CERT_REQUIRED
    assert [c["subject"] for c in context.get_ca_certs()] == [((("commonName", "server"),),)]


async def test_a_certificate_the_bundle_does_not_hold_is_refused_until_it_does(
    https_endpoint: tuple[str, Path], ca_bundle: Path, tmp_path: Path
) -> None:
    """Refused while the bundle lacks the server's certificate; the bundle rewritten in
    place with it, the next client is served."""
    endpoint, cert = https_endpoint
    other, _ = _self_signed(tmp_path, "someone-else")
    ca_bundle.write_bytes(other.read_bytes())
    with pytest.raises(SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        await _list_tables(endpoint)
    # The rotated bundle: same path, new contents (and a later modification time).
    ca_bundle.write_bytes(other.read_bytes() + cert.read_bytes())
    stat = ca_bundle.stat()
    os.utime(ca_bundle, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    assert await _list_tables(endpoint) == ["over-tls"]


async def test_one_context_per_bundle_and_none_without_verification(
    sessions: list[AIOHTTPSession], tmp_path: Path
) -> None:
    cert, _ = _self_signed(tmp_path, "a")
    same = [tls.SharedTLSSession(verify=str(cert)) for _ in range(2)]
    default = tls.SharedTLSSession(verify=True)
    off = tls.SharedTLSSession(verify=False)
    sessions += [*same, default, off]
    first, second = (_connector_context(s) for s in same)
    assert first is second
    assert _connector_context(default) is not first
    assert _connector_context(default) is _connector_context(tls.SharedTLSSession(verify=True))
    assert _connector_context(off) is False


async def test_a_client_certificate_gets_its_own_context_and_a_bare_proxy_the_shared_one(
    sessions: list[AIOHTTPSession], tmp_path: Path
) -> None:
    cert, key = _self_signed(tmp_path, "client")
    with_cert = tls.SharedTLSSession(verify=True, client_cert=(str(cert), str(key)))
    proxied = tls.SharedTLSSession(verify=True)
    plain = tls.SharedTLSSession(verify=True)
    sessions += [with_cert, proxied, plain]
    own = _connector_context(with_cert)
    assert own is not _connector_context(plain)
    assert own.check_hostname and own.verify_mode == ssl.CERT_REQUIRED
    assert _connector_context(plain).check_hostname
    bare_proxy = proxied._create_connector("http://proxy.internal:3128")._ssl
    assert bare_proxy is _connector_context(plain)


async def test_the_adapters_use_it_and_a_callers_own_choice_stands() -> None:
    class Mine(AIOHTTPSession):  # type: ignore[misc]
        pass

    async def client_of(config: Config | None) -> Any:
        adapter = DynamoDBAdapter("tbl", region_name="us-east-1", config=config)
        client = await adapter.client()
        await adapter.close()
        return client

    default = await client_of(None)
    assert type(default._endpoint.http_session) is tls.SharedTLSSession
    assert default.meta.config.retries == {"mode": "standard", "total_max_attempts": 10 + 1}
    tuned = await client_of(Config(read_timeout=3))
    assert type(tuned._endpoint.http_session) is tls.SharedTLSSession
    assert (tuned.meta.config.read_timeout, tuned.meta.config.connect_timeout) == (3, 5)
    assert tuned.meta.config.max_pool_connections == 50
    own = await client_of(AioConfig(http_session_cls=Mine, connector_args={"keepalive_timeout": 2}))
    assert type(own._endpoint.http_session) is Mine
    assert own.meta.config.connector_args == {"keepalive_timeout": 2}
    kept = await client_of(AioConfig(connector_args={"keepalive_timeout": 2}))
    assert type(kept._endpoint.http_session) is tls.SharedTLSSession
    assert kept.meta.config.connector_args == {"keepalive_timeout": 2}


def _same_size_other(directory: Path, size: int) -> Path:
    """Another self-signed certificate whose PEM file has exactly ``size`` bytes (signatures
    vary by a byte or two, so a few tries suffice)."""
    for _ in range(200):
        other, _ = _self_signed(directory, "sErVeR")  # the same name length as "server"
        if other.stat().st_size == size:
            return other
    raise AssertionError("no certificate of the same size in 200 tries")


async def test_a_bundle_replaced_with_its_size_and_mtime_kept_is_read_again(
    https_endpoint: tuple[str, Path], ca_bundle: Path, tmp_path: Path
) -> None:
    """The server's CA taken out of the bundle by a copy that keeps the size and puts the old
    modification time back (cp -p, rsync -a, tar -x): the next client refuses the server."""
    endpoint, cert = https_endpoint
    ca_bundle.write_bytes(cert.read_bytes())
    assert await _list_tables(endpoint) == ["over-tls"]
    before = ca_bundle.stat()
    ca_bundle.write_bytes(_same_size_other(tmp_path, before.st_size).read_bytes())
    os.utime(ca_bundle, ns=(before.st_atime_ns, before.st_mtime_ns))
    with pytest.raises(SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        await _list_tables(endpoint)


async def test_a_superseded_bundle_versions_context_is_dropped(
    sessions: list[AIOHTTPSession], tmp_path: Path
) -> None:
    cert, _ = _self_signed(tmp_path, "a")
    bundle = tmp_path / "rotating.pem"
    built = []
    for _ in range(5):  # a sidecar rewriting the bundle
        bundle.write_bytes(cert.read_bytes())
        session = tls.SharedTLSSession(verify=str(bundle))
        sessions.append(session)
        built.append(weakref.ref(_connector_context(session)))
    await asyncio.gather(*(s.close() for s in sessions))
    gc.collect()
    assert [ref() is not None for ref in built] == [False] * 4 + [True]


async def test_contexts_of_many_bundle_paths_are_not_all_kept(tmp_path: Path) -> None:
    """A process writing a bundle per tenant to a file of its own, then deleting it: only
    the most recently used paths' contexts stay (the others are rebuilt when used again)."""
    cert, _ = _self_signed(tmp_path, "a")
    built = []
    for n in range(3 * tls.CONTEXTS_KEPT):
        bundle = tmp_path / f"tenant-{n}.pem"
        bundle.write_bytes(cert.read_bytes())
        session = tls.SharedTLSSession(verify=str(bundle))
        built.append(weakref.ref(_connector_context(session)))
        await session.close()
        bundle.unlink()
    gc.collect()
    alive = [ref() is not None for ref in built]
    assert alive == [False] * 2 * tls.CONTEXTS_KEPT + [True] * tls.CONTEXTS_KEPT


async def test_a_session_class_made_at_run_time_goes_with_its_contexts(tmp_path: Path) -> None:
    cert, _ = _self_signed(tmp_path, "a")
    classes, built = [], []
    for _ in range(3):
        made = type("Made", (tls.SharedTLSSession,), {})
        session = made(verify=str(cert))
        built.append(weakref.ref(_connector_context(session)))
        await session.close()
        classes.append(weakref.ref(made))
        del made, session
    gc.collect()
    assert [ref() for ref in classes + built] == [None] * 6


async def test_a_subclass_context_stays_with_its_class(
    https_endpoint: tuple[str, Path], ca_bundle: Path, tmp_path: Path
) -> None:
    """A subclass that turns verification off for itself does not turn it off for the
    adapters, whichever builds its context first."""
    endpoint, _ = https_endpoint
    ca_bundle.write_bytes(_self_signed(tmp_path, "someone-else")[0].read_bytes())

    class Lax(tls.SharedTLSSession):  # type: ignore[misc]
        def _get_ssl_context(self) -> ssl.SSLContext:
            context: ssl.SSLContext = super()._get_ssl_context()
            context.verify_mode = ssl.CERT_NONE
            return context

    lax = Lax(verify=str(ca_bundle))
    assert _connector_context(lax).verify_mode == ssl.CERT_NONE
    await lax.close()
    with pytest.raises(SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        await _list_tables(endpoint)


def test_building_an_async_adapter_or_store_loads_no_async_stack() -> None:
    """They connect on first use: building one imports neither asyncio nor aiobotocore."""
    probe = (
        "import sys\n"
        "from sandbox_ledger.stores import open_store\n"
        "from sandbox_ledger.resources import ResourceRecordStore\n"
        "open_store('dynamodb://ledger?region=us-east-1')\n"
        "ResourceRecordStore('ledger', region_name='us-east-1')\n"
        "print(sorted({m.split('.')[0] for m in sys.modules}"
        " & {'asyncio', 'aiohttp', 'aiobotocore', 'aioboto3'}))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


async def test_a_trusted_certificate_for_another_host_is_refused(
    ca_bundle: Path, tmp_path: Path
) -> None:
    """Stock aiobotocore accepts it (host names unchecked); these clients do not."""
    cert, key = _self_signed(tmp_path, "named", "not-this-host.example")
    ca_bundle.write_bytes(cert.read_bytes())
    with _serving_tls(cert, key) as endpoint, pytest.raises(SSLError, match="mismatch"):
        await _list_tables(endpoint)


class _Connect(socketserver.BaseRequestHandler):
    """An HTTP CONNECT proxy: the tunnel, then bytes both ways."""

    tunnels: list[str] = []

    def handle(self) -> None:
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.request.recv(4096)
            if not chunk:
                return
            head += chunk
        target = head.split()[1].decode()
        self.tunnels.append(target)
        host, port = target.rsplit(":", 1)
        upstream = socket.create_connection((host, int(port)))
        self.request.sendall(b"HTTP/1.1 200 Connection established\r\n\r\n")

        def pump(source: socket.socket, sink: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while chunk := source.recv(65536):
                    sink.sendall(chunk)
            with contextlib.suppress(OSError):
                sink.shutdown(socket.SHUT_WR)

        back = threading.Thread(target=pump, args=(upstream, self.request), daemon=True)
        back.start()
        pump(self.request, upstream)
        back.join()
        upstream.close()


@pytest.fixture
def https_proxy(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """HTTPS_PROXY pointing at a CONNECT proxy on 127.0.0.1; the targets it tunnelled to."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Connect)
    server.daemon_threads = True
    _Connect.tunnels = []
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    for name in ("NO_PROXY", "no_proxy", "HTTP_PROXY", "http_proxy", "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", f"http://127.0.0.1:{server.server_address[1]}")
    yield _Connect.tunnels
    server.shutdown()
    server.server_close()
    thread.join()


async def test_through_a_proxy_the_server_is_still_verified(
    https_endpoint: tuple[str, Path], ca_bundle: Path, https_proxy: list[str], tmp_path: Path
) -> None:
    """Stock aiobotocore verifies nothing through a proxy without TLS settings of its own
    (``ssl=False``): any certificate is accepted. These clients verify it."""
    endpoint, cert = https_endpoint
    ca_bundle.write_bytes(cert.read_bytes())
    assert await _list_tables(endpoint) == ["over-tls"]
    assert https_proxy == [endpoint.removeprefix("https://")]  # it went through the proxy
    ca_bundle.write_bytes(_self_signed(tmp_path, "someone-else")[0].read_bytes())
    with pytest.raises(SSLError, match="CERTIFICATE_VERIFY_FAILED"):
        await _list_tables(endpoint)
    assert len(https_proxy) == 2
