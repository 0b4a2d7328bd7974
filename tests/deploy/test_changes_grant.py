"""``LedgerTable.grant_changes``: the change feed's role may do exactly what ``changes()``
sends (read the table's stream, find it, read the descriptor), write nothing, and passes
cdk-nag's AwsSolutions checks without an acknowledgement."""

from __future__ import annotations

import os
from typing import Any

import boto3
import pytest

aws_cdk = pytest.importorskip("aws_cdk")
from aws_cdk import assertions  # noqa: E402
from aws_cdk import aws_iam as iam  # noqa: E402
from cdk_nag import AwsSolutionsChecks  # noqa: E402

from deploy import least_privilege as lp  # noqa: E402
from sandbox_ledger import keys as k  # noqa: E402
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter  # noqa: E402
from sandbox_ledger.models import LedgerEvent  # noqa: E402
from sandbox_ledger.testing._build import entry  # noqa: E402
from sandbox_ledger_cdk import LedgerConfig, LedgerTable  # noqa: E402


@pytest.fixture(scope="module")
def watcher_stack() -> dict[str, Any]:
    """A user's stack: a table (customer-managed key) and a role granted the change feed,
    synthesized under cdk-nag (an unacknowledged finding fails the synth)."""
    app = aws_cdk.App()
    stack = aws_cdk.Stack(app, "Watching")
    ledger = LedgerTable(stack, "Ledger", config=LedgerConfig(kms="create"))
    role = iam.Role(stack, "Watcher", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
    ledger.grant_changes(role)
    aws_cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    app.synth()
    return assertions.Template.from_stack(stack).to_json()


@pytest.fixture(scope="module")
def changes_calls(moto_endpoint: str) -> lp.CallRecorder:
    """Every call ``changes()`` makes: from the start, waiting, and resumed."""
    table = f"ledger-changes-lp-{os.getpid()}"
    with SyncDynamoDBAdapter(table, endpoint_url=moto_endpoint) as admin:
        admin.create_table()  # an operator's call: not recorded
        admin.append(entry("w", "s", LedgerEvent.SandboxCreated, 1))
        admin.append(entry("w", "s", LedgerEvent.SandboxClosed, 2))
    recorder, session = lp.CallRecorder(), boto3.session.Session()
    recorder.watch_session(session)
    with SyncDynamoDBAdapter(table, endpoint_url=moto_endpoint, session=session) as reader:
        stream = reader.changes()
        first = next(stream)
        next(stream)
        stream.close()
        resumed = reader.changes(after=first.position)
        assert next(resumed).kind.value == "session.closed"
        resumed.close()
    return recorder


def _table_arn(raw: dict[str, Any]) -> str:
    [table_id] = [n for n, r in raw["Resources"].items() if r["Type"] == "AWS::DynamoDB::Table"]
    return lp.resolve({"Fn::GetAtt": [table_id, "Arn"]}, raw)


def test_the_watcher_role_allows_exactly_what_changes_sends(
    watcher_stack: dict[str, Any], changes_calls: lp.CallRecorder
) -> None:
    raw = watcher_stack
    statements, table_arn = lp.role_statements(raw, "Watcher"), _table_arn(raw)
    for request in changes_calls.requests:
        target = lp.arn(table_arn, request.resource)
        assert lp.allows(statements, request.action, target, request.keys, raw), request
    sent, allowed = changes_calls.triples(), lp.allowed_triples(statements, raw, table_arn)
    assert allowed == sent
    assert allowed == {
        *(("dynamodb:" + a, lp.STREAM, lp.NO_KEY) for a in lp.STREAM_OPERATIONS - {"ListStreams"}),
        ("dynamodb:DescribeTable", lp.TABLE, lp.NO_KEY),
        ("dynamodb:GetItem", lp.TABLE, k.DESCRIPTOR_PK),
    }
    assert not {a for a, _, _ in allowed} & lp.WRITE_ACTIONS
    kms = {a for s in statements for a in _listed(s["Action"]) if a.startswith("kms:")}
    assert kms == {"kms:Decrypt", "kms:DescribeKey"}


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value
