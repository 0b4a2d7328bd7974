"""No password is ever printed: a canary secret in every form a store URL or libpq DSN can
carry it, through the library's constructors and the CLI's error paths (in-process and as
real processes), and the environment's AWS secrets."""

from __future__ import annotations

import asyncio
import logging
import os
import socket
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from cli.processes import run
from sandbox_ledger._redact import redact_url, scrub
from sandbox_ledger.cli import app
from sandbox_ledger.errors import InvalidInputError, StorageError
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.stores import open_store, parse_store_url

# Holds '@', ':' and '/' (which a URL must percent-encode) and a space and a quote (which a
# key=value DSN must quote); each piece is a canary of its own.
SECRET = "pw1canary@pw2canary:pw3canary/pw4 can'ary"
BARE = "pw1canary@pw2canary:pw3canary/pw4"  # no space or quote: unquoted in a DSN
CANARIES = ("pw1canary", "pw2canary", "pw3canary", "canary", quote(SECRET, safe=""))


def assert_hidden(text: str) -> None:
    for canary in CANARIES:
        assert canary not in text, text


def urls(host: str, port: int) -> dict[str, str]:
    """The secret in every place a URL can carry it."""
    encoded = quote(SECRET, safe="")
    at = f"{host}:{port}/postgres"
    return {
        "userinfo": f"postgresql://postgres:{encoded}@{at}",
        "userinfo, not encoded": f"postgresql://postgres:{SECRET.replace(' ', '%20')}@{at}",
        "no user": f"postgresql://:{encoded}@{at}",
        "query": f"postgresql://postgres@{at}?password={encoded}",
        "query, key encoded": f"postgresql://postgres@{at}?sslmode=disable&%70assword={encoded}",
    }


def keyword_dsns(host: str, port: int) -> dict[str, str]:
    quoted = SECRET.replace("\\", "\\\\").replace("'", "\\'")
    base = f"host={host} port={port} dbname=postgres user=postgres"
    return {
        "key=value, quoted": f"{base} password='{quoted}'",
        "key=value, spaced": f"password = '{quoted}' {base}",
        "key=value, bare": f"{base} password={BARE}",
    }


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def with_option(url: str, option: str) -> str:
    return url + ("&" if "?" in url else "?") + option


def test_the_redactor_masks_every_form() -> None:
    everything = {**urls("db.example", 5432), **keyword_dsns("db.example", 5432)}
    for form, dsn in everything.items():
        shown = redact_url(dsn)
        assert_hidden(shown)
        assert "db.example" in shown, form  # the rest of it still says where
        secret = BARE if form == "key=value, bare" else SECRET
        assert_hidden(scrub(f"cannot connect to {dsn}: {secret} {quote(secret)}", dsn))


def test_the_redactor_masks_the_forms_libpq_refuses_and_quotes_back() -> None:
    # Found by the red-team review: libpq refuses these with a message quoting them.
    for dsn in (
        f"host=db.example PASSWORD={BARE}",
        f"postgresql://db.example/postgres?password%3D{quote(SECRET, safe='')}",
    ):
        assert_hidden(redact_url(dsn))
        assert_hidden(scrub(f"invalid connection option in {dsn!r}"))


def test_the_environments_aws_secrets_are_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    key, token = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYcanaryKEY", "FwoGZXIvYXdzEcanaryTOKENxyz"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", key)
    monkeypatch.setenv("AWS_SESSION_TOKEN", token)
    text = scrub(f"signed with {key} and {token} ({quote(key, safe='')})")
    assert key not in text and token not in text and "canary" not in text
    endpoint = f"http://127.0.0.1:{closed_port()}"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_LEDGER_")}
    done = run(
        ["--table", "ledger", "--endpoint-url", endpoint, "envs"],
        {**env, "AWS_SECRET_ACCESS_KEY": key, "AWS_SESSION_TOKEN": token},
        timeout=120,
    )
    assert done.returncode == 1
    assert "canary" not in done.stdout + done.stderr


def test_library_errors_never_carry_the_password() -> None:
    for form, url in urls("127.0.0.1", 5432).items():
        with pytest.raises(InvalidInputError) as refused:
            parse_store_url(with_option(url, "retention_days=0"))
        assert_hidden(str(refused.value))
        with pytest.raises(InvalidInputError) as bad_schema:
            open_store(with_option(url, "schema=Not-A-Name"))
        assert_hidden(str(bad_schema.value))
        assert "schema" in str(bad_schema.value), form
    for dsn in keyword_dsns("127.0.0.1", 5432).values():  # libpq's, but no store URL
        with pytest.raises(InvalidInputError) as not_url:
            parse_store_url(dsn)
        assert_hidden(str(not_url.value))


def test_an_unreachable_server_is_named_without_the_password(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A closed local port: the connection error names the server, not the password; nor do
    the pool's logs of each failed attempt (libpq names a malformed URL's host, a piece of
    the password when it holds an unencoded '@')."""
    caplog.set_level(logging.WARNING, logger="psycopg.pool")
    port = closed_port()
    for form, dsn in {**urls("127.0.0.1", port), **keyword_dsns("127.0.0.1", port)}.items():
        adapter = PostgresAdapter(dsn, timeout=0.3)
        with pytest.raises(StorageError) as failed:
            asyncio.run(adapter.connect())
        text = str(failed.value)
        assert "cannot connect to" in text and str(port) in text, form
        assert_hidden(text)
    logged = [r.getMessage() for r in caplog.records if r.name == "psycopg.pool"]
    assert any("failed to resolve host" in m for m in logged)  # the malformed URL's
    for message in logged:
        assert_hidden(message)


@pytest.fixture
def reachable(postgres_dsn: str) -> dict[str, str]:
    """The forms of the secret on the test server (it trusts every password)."""
    host, port = postgres_dsn.split("@", 1)[1].split("/", 1)[0].rsplit(":", 1)
    return urls(host, int(port))


CONNECTING = ("userinfo", "query", "query, key encoded")
COMMANDS = {
    "show": ["show", "job", "sb-1"],
    "rm": ["rm", "job", "sb-1", "--yes"],
    "export --name": ["export", "--name", "job"],
    "ls": ["ls"],
}


def test_cli_messages_never_carry_the_password(
    reachable: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not found (a message and a suggested command naming the store), a bad option, and the
    failures of the forms libpq refuses: no password in any of them."""
    for name in ("SANDBOX_LEDGER_TABLE", "SANDBOX_LEDGER_STORE"):
        monkeypatch.delenv(name, raising=False)
    runner = CliRunner()
    for form, url in reachable.items():
        # The forms libpq refuses or misreads fail only after the pool's 30 s: their
        # connection errors are test_an_unreachable_server_is_named_without_the_password's.
        for command, argv in COMMANDS.items() if form in CONNECTING else ():
            done = runner.invoke(app, ["--store", url, *argv])
            assert done.exit_code in (0, 3), (form, command, done.output)
            assert_hidden(done.output)
            if form in ("userinfo", "query") and command in ("show", "rm"):
                # The suggested command names the store quoted for a shell (its *** included).
                assert done.exit_code == 3 and "--store 'postgresql://postgres" in done.stderr
        bad = runner.invoke(app, ["--store", with_option(url, "retention_days=0"), "ls"])
        assert bad.exit_code == 2 and "retention_days" in bad.stderr, form
        assert_hidden(bad.output)


def test_cli_processes_never_print_the_password(reachable: dict[str, str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOX_LEDGER_")}
    url = reachable["query"]
    for argv in (
        ["--store", url, "show", "job", "sb-1"],
        ["export", "--store", url, "--name", "job"],
        ["--store", with_option(url, "retention_days=0"), "rm", "job", "sb-1", "--yes"],
        ["--store", reachable["userinfo"], "rm", "job", "sb-1", "--yes"],
    ):
        done = run(argv, env, timeout=120)
        assert done.returncode in (2, 3), done.stderr
        assert done.stderr.startswith("error: ")
        assert_hidden(done.stdout + done.stderr)


# Short pieces (under the 4 characters free text is scrubbed of) and an unencoded '?' and
# space: found by the red-team review of the redactor.
SHORT = {
    "'?' in the userinfo": ("postgresql://u:Zq9?Xj7@{at}", ("Zq9", "Xj7")),
    "short pieces around '@'": ("postgresql://u:Zq9@Xj7@{at}", ("Zq9", "Xj7")),
    "a space": ("postgresql://u:Zq9 Xj7@{at}", ("Zq9", "Xj7")),
}


def test_short_and_unencoded_passwords_are_masked_where_the_driver_shows_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Each form through the redactor, in free text naming the URL, and through the real
    driver's errors and the pool's logs on a closed port."""
    caplog.set_level(logging.WARNING, logger="psycopg.pool")
    port = closed_port()
    for form, (template, pieces) in SHORT.items():
        url = template.format(at=f"127.0.0.1:{port}/postgres")
        shown = redact_url(url)
        assert shown == f"postgresql://u:***@127.0.0.1:{port}/postgres", form
        assert not any(p in scrub(f"cannot connect to {url}: refused") for p in pieces), form
        with pytest.raises(StorageError) as failed:
            asyncio.run(PostgresAdapter(url, timeout=0.3).connect())
        assert not any(p in str(failed.value) for p in pieces), (form, str(failed.value))
    logged = [r.getMessage() for r in caplog.records if r.name == "psycopg.pool"]
    assert any("failed to resolve host" in m for m in logged)  # psycopg names 'Xj7@127...'
    assert not any(p in m for m in logged for p in ("Zq9", "Xj7")), logged


def test_urls_without_a_password_are_shown_as_given() -> None:
    """An '@' or ':' in a path or a query value is no userinfo."""
    for url in (
        "sqlite:///data/a:b@c/ledger.db",
        "sqlite:////tmp/x@y.db?retention_days=30",
        "postgresql://db.example/ledger?application_name=job@host&sslmode=require",
        "dynamodb://ledger?endpoint_url=http://localhost:4566&region=us-east-1",
        "dynamodb://ledger?profile=ops@prod",
        "postgresql://alice@db.example/ledger",
    ):
        assert redact_url(url) == url
        assert scrub(f"cannot open {url}: refused", url) == f"cannot open {url}: refused"


def test_the_forms_the_second_red_team_found_are_masked() -> None:
    """A quoted value right before password= (libpq needs no space after a quote), a query
    key PASSWORD in any case, and a user name holding '#' (libpq's user 'u#x')."""
    for dsn in (
        f"host='db.example'password={BARE} dbname=x",
        f"postgresql://db.example/postgres?PASSWORD={quote(SECRET, safe='')}&schema=Bad",
        f"postgresql://db.example/postgres?Password={quote(SECRET, safe='')}",
        f"postgresql://u#x:{quote(SECRET, safe='')}@db.example/postgres",
    ):
        assert_hidden(redact_url(dsn))
        assert "db.example" in redact_url(dsn)
        assert_hidden(scrub(f"invalid connection option in {dsn!r}"))
    with pytest.raises(InvalidInputError) as bad:
        open_store(f"postgresql://127.0.0.1/postgres?PASSWORD={quote(SECRET, safe='')}&schema=Bad")
    assert_hidden(str(bad.value))


# The third red team's forms: libpq ends a URL's userinfo at the first '@' before a '/', so a
# '#' or '?' in the password or a '?' in the user name is part of it; an '@' in a query value
# is not. Each through the redactor, open_store's refusals, the real driver and the CLI.
THIRD = {
    "'#' in the password": "postgresql://u:Cq7ab#cdXYZ@127.0.0.1:{port}/postgres",
    "'?' in the password": "postgresql://u:Cq7ab?cdXYZ@127.0.0.1:{port}/postgres",
    "'?' in the user name": "postgresql://u?x:Cq7abcdXYZ@127.0.0.1:{port}/postgres",
    "'@' in a query value": (
        "postgresql://u:Cq7abcdXYZ@127.0.0.1:{port}/postgres?application_name=ops@team"
    ),
}
THIRD_PIECES = ("Cq7ab", "cdXYZ", "Cq7abcdXYZ")


def test_the_forms_the_third_red_team_found_are_masked(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="psycopg.pool")
    port = closed_port()
    for form, template in THIRD.items():
        url = template.format(port=port)
        shown = redact_url(url)
        assert not any(p in shown for p in THIRD_PIECES), (form, shown)
        assert f"127.0.0.1:{port}/postgres" in shown, (form, shown)  # not mangled
        assert not any(p in scrub(f"cannot connect to {url}") for p in THIRD_PIECES), form
        with pytest.raises(InvalidInputError) as bad:
            open_store(f"{url}{'&' if '?' in url.split('/', 3)[-1] else '?'}retention_days=0")
        assert "retention_days" in str(bad.value) and f"127.0.0.1:{port}" in str(bad.value)
        assert not any(p in str(bad.value) for p in THIRD_PIECES), (form, str(bad.value))
        # The DSN handed to the driver is the URL as libpq reads it (the password whole).
        _, kwargs = parse_store_url(url)
        from psycopg.conninfo import conninfo_to_dict

        assert conninfo_to_dict(kwargs["dsn"]) == conninfo_to_dict(url), form
        with pytest.raises(StorageError) as failed:
            asyncio.run(PostgresAdapter(kwargs["dsn"], timeout=0.3).connect())
        assert not any(p in str(failed.value) for p in THIRD_PIECES), (form, str(failed.value))
    logged = " ".join(r.getMessage() for r in caplog.records if r.name == "psycopg.pool")
    assert not any(p in logged for p in THIRD_PIECES), logged


def test_an_endpoint_url_with_a_hash_in_its_password_is_masked() -> None:
    url = "http://u:Cq7ab#cdXYZ@127.0.0.1:1"
    assert not any(p in redact_url(url) for p in THIRD_PIECES), redact_url(url)
    assert not any(p in scrub(f"could not connect to {url}: refused") for p in THIRD_PIECES)
    assert not any(
        p in scrub("Port could not be cast to integer value as 'Cq7ab'", url) for p in THIRD_PIECES
    )


def test_a_url_password_holding_a_newline_or_a_tab_is_masked_without_its_source() -> None:
    """The third red team: scrub() with no source stopped a quoted URL's password at a line
    break, printing the rest of it. A URL's userinfo may hold any whitespace up to its '@'."""
    for password in ("Cq7ab\ncdXYZ", "Cq7ab\r\ncdXYZ", "Cq7ab\tcdXYZ", "Cq7ab cdXYZ"):
        url = f"postgresql://u:{password}@127.0.0.1:5432/postgres"
        for text in (f"cannot connect to {url}: refused", f"{url}\nnext line"):
            shown = scrub(text)
            assert not any(p in shown for p in THIRD_PIECES), (password, shown)
            assert "127.0.0.1:5432/postgres" in shown, shown
        assert not any(p in redact_url(url) for p in THIRD_PIECES)
    # A host:port followed by text is no userinfo: nothing is masked across it.
    text = "cannot connect to postgresql://db.example:5432/x\nmail ops@example.com"
    assert scrub(text) == text


def test_the_forms_the_fourth_red_team_found_are_masked() -> None:
    """libpq's sslpassword (the client key's passphrase), a key=value password holding a
    no-break space or another non-ASCII blank (libpq splits on ASCII whitespace only), an
    endpoint URL's password holding an unencoded '&', and AWS credentials written into a
    dynamodb:// URL: each printed before."""
    forms = {
        "postgresql://u@127.0.0.1:1/db?sslpassword=Kq7Zx9Wm": "127.0.0.1:1/db",
        "host=127.0.0.1 sslpassword=Kq7Zx9Wm dbname=x": "dbname=x",
        "host=127.0.0.1 port=1 password=Kq7Z\xa0x9Wm": "port=1",
        "host=127.0.0.1 password=Kq7Z\u2028x9Wm port=1": "port=1",
        "dynamodb://T?endpoint_url=http://u:Kq7Z&x9Wm@127.0.0.1:1&region=us-east-1": "region",
        "dynamodb://T?aws_secret_access_key=Kq7Zx9Wm&region=us-east-1": "region",
    }
    for url, kept in forms.items():
        shown = redact_url(url)
        assert "Kq7Z" not in shown and "x9Wm" not in shown, shown
        assert kept in shown, shown
        for message in (f"cannot connect to {url}", f"invalid option in {url!r}"):
            assert "Kq7Z" not in scrub(message, url) and "x9Wm" not in scrub(message, url)
            assert "Kq7Z" not in scrub(message)  # no source: found by its place
    # The CLI's own messages, as a process: an unreachable server, a bad option, a bad URL.
    for store in (
        f"postgresql://u@127.0.0.1:{closed_port()}/db?sslpassword=Kq7Zx9Wm",
        "postgresql://u@127.0.0.1:1/db?sslpassword=Kq7Zx9Wm&retention_days=0",
        "dynamodb://T?endpoint_url=http://u:Kq7Z&x9Wm@127.0.0.1:1&region=us-east-1",
    ):
        done = run(["--store", store, "ls"], dict(os.environ))
        assert done.returncode in (1, 2), done.stderr
        assert "Kq7Z" not in done.stderr + done.stdout and "x9Wm" not in done.stderr, done.stderr
