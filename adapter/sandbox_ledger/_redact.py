"""The one redactor: every message of the library and the CLI that may name a store passes
through it, so no password a store URL or libpq DSN can carry is ever printed, nor an AWS
secret of the environment.

A password can sit in a URL's userinfo (``postgresql://u:S@h/db``, ``postgresql://:S@h``,
``S`` holding ``@``, ``:`` or ``/``, percent-encoded or not), in its query
(``?password=S``, the key itself possibly percent-encoded, as libpq decodes both), or in a
key=value DSN (``password=S``, ``password = 'a b'`` with libpq's quoting). :func:`redact_url`
masks it in place; :func:`scrub` also removes every form of the known secrets from any text
(a driver's error message, a suggested command).
"""

from __future__ import annotations

import logging
import os
import re
from urllib.parse import quote, unquote

MASK = "***"

SECRET_VARIABLES = (
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "PGPASSWORD",
)
"""Environment variables whose values are never printed."""

# Masking a secret wherever it occurs in free text would mangle messages for a short one
# ("testing" is a common fake AWS key): free text is scrubbed of secrets this long or
# longer; a URL's or DSN's password is masked by its place whatever its length.
_SCRUB_MIN = {"env": 16, "source": 4}

# libpq's keyword/value syntax: a bare value runs to the next space; a quoted one allows
# spaces, with \' and \\ as escapes (an unterminated quote runs to the end).
# Any case: libpq refuses 'PASSWORD=' as an unknown keyword, and may quote it back. A quoted
# value needs no space after it: host='h'password=S is libpq's too.
# libpq separates values by ASCII whitespace only: a no-break space is part of a password.
# sslpassword is the passphrase of the client's key, a password all the same.
_KEYWORD_PASSWORD = re.compile(
    r"(?:^|(?<=\s)|(?<=[^\\]'))(?:ssl)?password[ \t\n\r\f\v]*=[ \t\n\r\f\v]*"
    r"('(?:[^'\\]|\\.)*'?|[^ \t\n\r\f\v]*)",
    re.IGNORECASE,
)

# Query keys whose values are secrets: libpq's two passwords, and AWS credentials that a
# dynamodb:// URL does not take but a user may still write there.
_SECRET_KEYS = frozenset(
    {"password", "sslpassword", "aws_secret_access_key", "aws_session_token", "secret_key"}
)


def redact_url(url: str) -> str:
    """``url`` (a store URL or a libpq DSN, URL or key=value) with its passwords masked."""
    if "://" not in url:
        return _KEYWORD_PASSWORD.sub(_masked_keyword, url)
    scheme, rest = url.split("://", 1)
    userinfo, rest = split_userinfo(rest)
    if userinfo is not None:
        user, colon, _ = userinfo.partition(":")
        rest = (f"{user}:{MASK}" if colon else user) + rest
    head, mark, query = rest.partition("?")
    if mark:
        query = "&".join(_masked_parameters(query.split("&")))
    return f"{scheme}://{head}{mark}{query}"


def _masked_keyword(match: re.Match[str]) -> str:
    """``password=***`` (or ``sslpassword=***``), as the keyword was written."""
    return f"{match.group(0).partition('=')[0].rstrip()}={MASK}"


def _masked_parameters(parameters: list[str]) -> list[str]:
    """A query's parameters masked, an endpoint URL's password cut at an unencoded '&'
    included (see :func:`_cut_endpoint`)."""
    out = [_masked_parameter(p) for p in parameters]
    for i in range(1, len(parameters)):
        cut = _cut_endpoint(parameters, i)
        if cut is not None:
            key, head, _, host = cut
            out[i - 1], out[i] = f"{key}={head}:{MASK}", f"{MASK}@{host}"
    return out


def _cut_endpoint(parameters: list[str], i: int) -> tuple[str, str, str, str] | None:
    """When ``parameters[i]`` is a bare ``rest@host`` (no '=') after an endpoint URL
    (``endpoint_url=http://u:pw``): that URL's password held an unencoded '&', which cut it
    in two. Its key, the URL up to the user name (``http://u``), the password whole and the
    host; else None."""
    parameter, previous = parameters[i], parameters[i - 1]
    if "=" in parameter or "@" not in parameter or "://" not in previous:
        return None
    key, _, value = previous.partition("=")
    scheme, _, rest = unquote(value).partition("://")
    user, _, first = rest.partition(":")
    tail, _, host = parameter.rpartition("@")
    return key, f"{scheme}://{user}", f"{first}&{tail}", host


def _is_secret_key(key: str) -> bool:
    return unquote(key).strip().lower() in _SECRET_KEYS


def split_userinfo(rest: str) -> tuple[str | None, str]:
    """A URL's userinfo (what is after ``://`` and before its '@') and the rest from that
    '@' on, or None and ``rest`` when it has none.

    The userinfo ends at an '@' before the query (the first '?' after the first '/'): an '@'
    in a query value is no userinfo. Of those, the last one whose user name (before the first
    ':') holds no '/' ends it, so a password holding '@' or '/' unencoded is masked whole (the
    safe side of libpq, which stops at the first '@' before a '/' and then quotes the rest as
    a host). Before the first '/' a '?' or '#' belongs to the user name or the password, as
    libpq reads them (it has no fragment); after it, a user name holding '?' is a query's
    (``dynamodb://T?endpoint_url=https://u:pw@proxy``), and a path's '@'
    (``sqlite:///a:b@c/x.db``) is no userinfo either.
    """
    slash = rest.find("/")
    query = rest.find("?", slash) if slash >= 0 else -1
    at = rest.rfind("@", 0, query if query >= 0 else len(rest))
    while at >= 0:
        user = rest[:at].partition(":")[0]
        if "/" not in user and (slash < 0 or at < slash or "?" not in user):
            return rest[:at], rest[at:]
        at = rest.rfind("@", 0, at)
    return None, rest


def _masked_parameter(parameter: str) -> str:
    key, equals, value = parameter.partition("=")
    if equals and _is_secret_key(key):
        return f"{key}={MASK}"
    # 'password%3DS': no '=' before decoding, so libpq refuses it quoting the whole parameter.
    if not equals and unquote(key).strip().lower().startswith(tuple(_SECRET_KEYS)):
        return MASK
    if "://" in unquote(value):  # dynamodb://T?endpoint_url=https://user:pw@proxy
        return f"{key}={redact_url(unquote(value))}"
    return parameter


def passwords(url: str) -> set[str]:
    """Every password ``url`` carries (see :func:`redact_url`), as written and decoded."""
    found: set[str] = set()
    if "://" not in url:
        for match in _KEYWORD_PASSWORD.finditer(url):
            value = match.group(1)
            found.add(value)
            if value.startswith("'"):
                found.add(re.sub(r"\\(.)", r"\1", value.strip("'")))
    else:
        userinfo, rest = split_userinfo(url.split("://", 1)[1])
        if userinfo is not None and ":" in userinfo:
            found.add(userinfo.partition(":")[2])
        parameters = rest.partition("?")[2].split("&")
        for i, parameter in enumerate(parameters):
            key, equals, value = parameter.partition("=")
            if equals and _is_secret_key(key):
                found.add(value)
            cut = _cut_endpoint(parameters, i) if i else None
            if cut is not None:
                found.add(cut[2])
    decoded = {unquote(value) for value in found}
    return {value for value in found | decoded if value}


def scrub(text: str, *sources: str | None) -> str:
    """``text`` with the passwords of each source (a URL or DSN) and the AWS secrets of the
    environment masked in every form: as written, decoded and percent-encoded, and any
    URL or ``password=`` in the text itself redacted."""
    secrets = {os.environ.get(name, "") for name in SECRET_VARIABLES}
    secrets = {value for value in secrets if len(value) >= _SCRUB_MIN["env"]}
    placed: dict[str, str] = {}
    for source in sources:
        if source:
            found = passwords(source)
            secrets |= {p for p in found if len(p) >= _SCRUB_MIN["source"]}
            for secret in found:
                placed |= _placed_forms(secret)
    forms = {form: MASK for secret in secrets for form in _forms(secret)}
    forms = placed | forms
    # Longest first: a secret holding another is masked whole.
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, forms[form])
    text = _KEYWORD_PASSWORD.sub(_masked_keyword, text)
    return _URL_IN_TEXT.sub(lambda m: redact_url(m.group(0)), text)


def _forms(secret: str) -> set[str]:
    forms = {secret, quote(secret, safe=""), quote(secret), secret.replace("'", "\\'")}
    # A driver may quote a piece of a malformed URL (postgresql://u:a@b@host: host "b@host").
    pieces = re.split(r"[@:/?#&\s']", secret)
    return forms | {piece for piece in pieces if len(piece) >= _SCRUB_MIN["source"]}


def _placed_forms(secret: str) -> dict[str, str]:
    """The pieces of a source's password, of any length, where a driver shows them: quoted
    as a value (libpq's 'unexpected spaces found in "a b"') or as a host before the
    next '@' (libpq and psycopg end the password at the first '@': "failed to resolve host
    'b@host'" for ``u:a@b@host``)."""
    pieces = {secret, *re.split(r"[@:/?#\s']", secret)}
    forms = {f"{q}{piece}{q}": f"{q}{MASK}{q}" for piece in pieces if piece for q in "\"'"}
    return forms | {f"{piece}@": f"{MASK}@" for piece in secret.split("@")[1:] if piece}


# A URL inside a longer text (an error message quoting a DSN, a suggested command).
# Its password may hold any whitespace, line breaks included, up to the '@' that ends the
# userinfo. A host:port followed by a '/' is never taken for one; one followed by no '/'
# and, within 256 characters, an '@' would be: too much masked, never too little.
_URL_IN_TEXT = re.compile(
    r"[a-zA-Z][a-zA-Z0-9+.-]*://(?:[^\s'\"`@/]*:[^'\"`@/]{0,256}@)?[^\s'\"`]*"
)


class ScrubbingFilter(logging.Filter):
    """A logging filter masking the passwords of ``sources`` in every record, as
    :func:`scrub` does (psycopg_pool logs each failed connection attempt with libpq's text)."""

    def __init__(self, *sources: str | None) -> None:
        super().__init__()
        self._sources = sources

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        clean = scrub(message, *self._sources)
        if clean != message:
            record.msg, record.args = clean, None
        return True
