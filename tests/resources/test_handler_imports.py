"""What a Lambda handler's cold start loads: each handler module imports only what its
invocations use (checked in a fresh interpreter through ``sys.modules``; the times are in
benchmarks/cold_start.py, never in a test)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from resources.resource_fixtures import TS_RECORD

ROOT = Path(__file__).resolve().parents[2]

# Never wanted by either handler: the async stack, the ledger adapters and their models,
# the CLI and its server, the X-Ray SDK (tracing is off), Powertools' batch utility.
NEITHER = (
    "asyncio",
    "aioboto3",
    "aiobotocore",
    "aiohttp",
    "aws_xray_sdk",
    "aws_lambda_powertools.utilities.batch",
    "moto",
    "typer",
    "rich",
    "sandbox_ledger.models",
    "sandbox_ledger.memory",
    "sandbox_ledger.protocol",
    "sandbox_ledger.stores",
    "sandbox_ledger.dynamodb",
    "sandbox_ledger.sql",
    "sandbox_ledger.sqlite",
    "sandbox_ledger.postgres",
    "sandbox_ledger.cli",
    "sandbox_ledger.local",
)
# The stream handler classifies stream records without the models (pydantic) and builds its
# clients (boto3) on the first invocation; it has no use for the sweep or the record store.
NOT_IN_STREAM_HANDLER = (
    "pydantic",
    "boto3",
    "sandbox_ledger.resources.models",
    "sandbox_ledger.resources.store",
    "sandbox_ledger.resources.sweeper",
    "sandbox_ledger.sdk.client",
)
# The sweeper has no use for the stream parser or the bucket of unreported removals.
NOT_IN_SWEEPER = ("sandbox_ledger.resources.stream", "sandbox_ledger.resources.unreported")

PROBE = """
import json, sys
{body}
print(json.dumps(sorted(sys.modules)))
"""


def _loaded(body: str, **env: str) -> set[str]:
    """The modules loaded after running ``body`` in a fresh interpreter."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("AWS_", "SANDBOX_"))}
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(body=body)],
        env={
            **base,
            "TABLE_NAME": "ledger",
            "AWS_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "test",
            "AWS_SECRET_ACCESS_KEY": "test",
            # Nothing may be sent: a request would fail on this closed port.
            "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
            **env,
        },
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return set(json.loads(done.stdout.strip().splitlines()[-1]))


def _present(loaded: set[str], names: tuple[str, ...]) -> list[str]:
    """Which of ``names`` (modules or packages) ``loaded`` holds."""
    return [n for n in names if any(m == n or m.startswith(n + ".") for m in loaded)]


@pytest.mark.parametrize(
    ("handler", "unwanted"),
    [
        ("expire_stale_resources", NEITHER + NOT_IN_SWEEPER),
        ("on_ttl_expiry", NEITHER + NOT_IN_STREAM_HANDLER),
    ],
)
def test_a_handler_module_imports_only_what_it_uses(
    handler: str, unwanted: tuple[str, ...]
) -> None:
    loaded = _loaded(f"import sandbox_ledger.handlers.{handler}")
    assert f"sandbox_ledger.handlers.{handler}" in loaded
    assert _present(loaded, unwanted) == []
    # The probe can fail: what the handler does use is there.
    assert _present(loaded, ("aws_lambda_powertools", "botocore")) == [
        "aws_lambda_powertools",
        "botocore",
    ]


def test_the_entry_points_import_only_what_the_handlers_use() -> None:
    for handler, unwanted in (
        ("expire_stale_resources", NEITHER + NOT_IN_SWEEPER),
        ("on_ttl_expiry", NEITHER + NOT_IN_STREAM_HANDLER),
    ):
        entry = ROOT / "lambdas" / handler
        loaded = _loaded(f"sys.path.insert(0, {str(entry)!r})\nimport handler")
        assert _present(loaded, unwanted) == [], handler


LEDGER_ONLY_BATCH = """
from sandbox_ledger.handlers import on_ttl_expiry as ttl
removal = {{
    "eventName": "REMOVE",
    "userIdentity": {{"type": "Service", "principalId": "dynamodb.amazonaws.com"}},
    "eventSourceARN": "arn:aws:dynamodb:us-east-1:1:table/ledger/stream/2026",
    "dynamodb": {{"SequenceNumber": "1", "OldImage": {{
        "PK": {{"S": "S#1#n#s"}}, "SK": {{"S": "#SUMMARY"}}, "itemType": {{"S": "session"}}}}}},
}}
class Context:
    function_name, memory_limit_in_mb, aws_request_id = "fn", 128, "r"
    invoked_function_arn = "arn:aws:lambda:us-east-1:1:function:fn"
    def get_remaining_time_in_millis(self):
        return 60_000
assert ttl.handler({{"Records": [removal]}}, Context()) == {{"batchItemFailures": []}}
reporter = ttl.dependencies()
assert reporter.unreported is not None and not reporter.unreported.client.created
{then}
"""


def test_the_stream_handler_loads_the_models_and_s3_client_only_when_it_needs_them() -> None:
    """A batch of ledger items' TTL removals (ignored) neither loads the models nor creates
    the S3 client; decoding a resource record's removal loads the models then."""
    env = {"UNREPORTED_BUCKET": "kept", "POWERTOOLS_METRICS_DISABLED": "true"}
    loaded = _loaded(LEDGER_ONLY_BATCH.format(then=""), **env)
    assert _present(loaded, ("boto3", "pydantic", "sandbox_ledger.resources.models")) == ["boto3"]
    # A resource record's removal, its item written by hand (the models are not loaded).
    decode = (
        "from sandbox_ledger import keys as k\n"
        f"wire = {TS_RECORD!r}\n"
        "updated = wire.pop('updatedAt')\n"
        "removal['dynamodb']['OldImage'] = {\n"
        "    k.PARTITION_KEY: {'S': k.resource_pk(wire['id'])}, k.SORT_KEY: {'S': k.RESOURCE_SK},\n"
        "    k.ITEM_TYPE: {'S': k.RESOURCE_ITEM_TYPE}, k.REVISION: {'N': '3'},\n"
        "    k.RECORD_BODY: {'S': json.dumps(wire)}, k.RECORD_UPDATED_AT: {'S': updated}}\n"
        "assert 'pydantic' not in sys.modules\n"
        "from sandbox_ledger.resources import ttl_expiry\n"
        "expiry = ttl_expiry(removal)\n"
        "assert expiry.revision == 3 and expiry.record.wire()['updatedAt'] == updated\n"
    )
    loaded = _loaded(LEDGER_ONLY_BATCH.format(then=decode), **env)
    assert _present(loaded, ("pydantic", "sandbox_ledger.resources.models")) == [
        "pydantic",
        "sandbox_ledger.resources.models",
    ]


def test_the_lazy_s3_client_is_created_once_on_first_use() -> None:
    from sandbox_ledger.handlers import on_ttl_expiry

    reporter = on_ttl_expiry.build(
        {"TABLE_NAME": "ledger", "UNREPORTED_BUCKET": "kept", "AWS_REGION": "eu-west-1"}
    )
    assert reporter.unreported is not None
    lazy = reporter.unreported.client
    assert not lazy.created and "not created yet" in repr(lazy)
    assert lazy.meta.service_model.service_name == "s3"
    assert lazy.meta.region_name == "eu-west-1"
    assert lazy.created and lazy.meta is lazy.meta
    with pytest.raises(AttributeError):
        lazy.no_such_operation  # noqa: B018 - the client's own AttributeError


def test_botocores_stubber_works_on_a_lazy_client() -> None:
    import boto3
    from botocore.stub import Stubber

    from sandbox_ledger.handlers._sdk import LazyClient

    session = boto3.session.Session(
        region_name="us-east-1", aws_access_key_id="a", aws_secret_access_key="b"
    )
    lazy = LazyClient(session, "s3", None)
    with Stubber(lazy) as stub:
        stub.add_response("put_object", {"ETag": '"1"'}, {"Bucket": "b", "Key": "k", "Body": b"x"})
        assert lazy.put_object(Bucket="b", Key="k", Body=b"x")["ETag"] == '"1"'
        stub.assert_no_pending_responses()
