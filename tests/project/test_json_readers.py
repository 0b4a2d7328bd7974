"""Every place the library parses JSON is one of a known list: JSON taken from outside is read
with ``sandbox_ledger._json.loads_unique`` (or checked with ``refuse_duplicate_keys``), which
refuses an object that names a key twice (issue 41, item 8); a plain ``json.loads`` is only
for JSON the product wrote itself. A new parse anywhere fails here until it is put in one of
the two lists, with why."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "adapter" / "sandbox_ledger"

PLAIN = {
    # Rows and items the stores wrote (their payload, extra fields, environment records).
    "sql/rows.py": 5,
    "dynamodb/_items.py": 2,
    "resources/_items.py": 1,
    # The import's own claim counts, written by the import to the store.
    "_import_stream.py": 1,
    # The CLI's own output lines, searched by --grep.
    "cli/render.py": 1,
    # Objects the TTL handler and Lambda wrote to the unreported bucket.
    "resources/unreported.py": 2,
    # _json.loads itself: "Parse JSON written by dumps".
    "_json.py": 1,
    # The embedded server's own answers, and the requests it served (already parsed and
    # accepted by the server), read in process to note which partitions a write touched.
    "local/inprocess.py": 2,
    # The strict profile's front: a request body it passes on to moto (which parses it again
    # and answers as DynamoDB would; the front only reads its shape), moto's answer, and
    # moto's DescribeStream answer, whose shards it replaces.
    "local/strict/front.py": 3,
    # A shard iterator the strict profile's stream view handed out: a JSON array (no keys to
    # repeat); one it did not issue fails to unpack and is refused.
    "local/strict/streams.py": 1,
    # The local data file's image header, written by the server's own save.
    "local/image.py": 1,
    # The local data file's stream sidecar, written by the server's own saves (one that
    # does not describe a stream, however it came to be, is ignored with a word).
    "local/streamfile.py": 2,
    # A DynamoDB read's response, decoded from the wire: parsed exactly as botocore's own
    # parser does (json.loads, a repeated key's last value), which the decoding must equal
    # (tests/dynamodb/test_wire_decoding.py); the items are the store's own.
    "sdk/wire.py": 1,
}
"""Modules parsing JSON the product wrote, and how many parses each holds."""

PYDANTIC = {
    # Import lines: checked by refuse_duplicate_keys right after (tests/contract/
    # test_duplicate_keys.py, test_the_fast_check_is_exact).
    "transfer.py": 1,
}
"""Modules parsing JSON from outside with pydantic, each followed by the duplicate-key check."""


def _parses() -> tuple[Counter[str], Counter[str]]:
    plain: Counter[str] = Counter()
    pydantic: Counter[str] = Counter()
    for path in PACKAGE.rglob("*.py"):
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            called, owner = node.func.attr, node.func.value
            if called == "loads" and isinstance(owner, ast.Name) and owner.id in ("json", "_json"):
                if any(k.arg == "object_pairs_hook" for k in node.keywords):
                    continue  # loads_unique itself
                plain[where] += 1
            elif called in ("model_validate_json", "validate_json"):
                pydantic[where] += 1
    return plain, pydantic


def test_every_json_parse_is_known() -> None:
    plain, pydantic = _parses()
    assert dict(plain) == PLAIN, "a new json.loads: JSON from outside goes through loads_unique"
    assert dict(pydantic) == PYDANTIC, "a new pydantic JSON parse: check it for duplicate keys"
