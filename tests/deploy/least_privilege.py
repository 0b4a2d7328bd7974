"""What a role's code sends to DynamoDB, and what its policy in a synthesized template allows.

:class:`CallRecorder` is a botocore ``provide-client-params`` hook on a client: it turns each
call the code makes into the IAM requests DynamoDB authorizes it as (one action on the table
or an index, with the partition key values ``dynamodb:LeadingKeys`` holds: for a Query on a
GSI, the index's partition key value). :func:`allows` evaluates a policy's statements for one
such request. Both know only what the stack uses: an element they do not model raises, so a
policy can never pass by being misread.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from sandbox_ledger import keys as k

TABLE = "table"
"""The resource name of the table itself (else a request names one of its indexes)."""

# Every key family of the table's and the indexes' partition keys (keys.py's layout): a
# prefix family is written "<prefix>*", an exact one by its value.
PREFIX_FAMILIES = (
    k.SESSION_PREFIX,
    k.RESOURCE_PREFIX,
    k.BY_NAME_PREFIX,
    k.BY_NAME_STATUS_PREFIX,
    k.ALL_PREFIX,
    k.ALL_STATUS_PREFIX,
    k.RESOURCE_PHASE_PREFIX,
    k.RESOURCE_PROVIDER_PREFIX,
)
EXACT_FAMILIES = (k.ENVIRONMENT_PK, k.DESCRIPTOR_PK)
FAMILIES = (*(f"{p}*" for p in PREFIX_FAMILIES), *EXACT_FAMILIES)
NO_KEY = "(no key)"
"""The family of a request that carries no partition key (a Scan, a table-level call)."""

# Keys of no family, each one character off a real one: a policy that lets them through
# allows more than the families it names.
FOREIGN_KEYS = ("Z#x", f"{k.ENVIRONMENT_PK}#x", f"{k.DESCRIPTOR_PK}x", "s#x", "")

# Every DynamoDB action a policy could grant on a table, its indexes or its stream: those
# that carry ``dynamodb:LeadingKeys`` are probed with a key of each family, the others (a
# Scan, PartiQL, table and stream calls) without one, as DynamoDB authorizes them.
KEYED_ACTIONS = tuple(
    f"dynamodb:{a}"
    for a in (
        "GetItem",
        "PutItem",
        "UpdateItem",
        "DeleteItem",
        "ConditionCheckItem",
        "Query",
        "BatchGetItem",
        "BatchWriteItem",
    )
)
UNKEYED_ACTIONS = tuple(
    f"dynamodb:{a}"
    for a in (
        "Scan",
        "PartiQLSelect",
        "PartiQLInsert",
        "PartiQLUpdate",
        "PartiQLDelete",
        "DescribeTable",
        "DescribeTimeToLive",
        "CreateTable",
        "UpdateTable",
        "DeleteTable",
        "UpdateTimeToLive",
        "DescribeStream",
        "GetRecords",
        "GetShardIterator",
        "ListStreams",
        "ExportTableToPointInTime",
        "RestoreTableToPointInTime",
    )
)
FOREIGN = "(foreign key)"
WRITE_ACTIONS = frozenset(
    f"dynamodb:{a}"
    for a in ("PutItem", "UpdateItem", "DeleteItem", "ConditionCheckItem", "BatchWriteItem")
)


def family(key: str | None) -> str:
    """The family of a partition key value (``AssertionError`` for a key of none)."""
    if key is None:
        return NO_KEY
    if key in EXACT_FAMILIES:
        return key
    prefixes = [p for p in PREFIX_FAMILIES if key.startswith(p)]
    assert prefixes, f"a key of no known family: {key!r}"
    return f"{max(prefixes, key=len)}*"


def sample(family_name: str) -> str:
    """A partition key value of the family."""
    return family_name[:-1] + "x" if family_name.endswith("*") else family_name


@dataclass(frozen=True)
class Request:
    """One IAM authorization: an action on the table or an index, with its leading keys
    (None: the request carries no ``dynamodb:LeadingKeys``)."""

    action: str
    resource: str
    keys: frozenset[str] | None

    def triples(self) -> set[tuple[str, str, str]]:
        """(action, table-or-index, family) of each of its keys."""
        if self.keys is None:
            return {(self.action, self.resource, NO_KEY)}
        return {(self.action, self.resource, family(key)) for key in self.keys}


_TRANSACT_ACTIONS = {
    "Put": "PutItem",
    "Update": "UpdateItem",
    "Delete": "DeleteItem",
    "ConditionCheck": "ConditionCheckItem",
    "Get": "GetItem",
}


def _pk(key: dict[str, Any], attribute: str = k.PARTITION_KEY) -> str:
    value: str = key[attribute]["S"]
    return value


def _query_key(params: dict[str, Any], attribute: str) -> str:
    """The partition key value a Query's key condition sets."""
    names = params.get("ExpressionAttributeNames", {})
    for name, placeholder in re.findall(r"([#\w]+)\s*=\s*(:\w+)", params["KeyConditionExpression"]):
        if names.get(name, name) == attribute:
            return _pk({attribute: params["ExpressionAttributeValues"][placeholder]}, attribute)
    raise AssertionError(f"a Query without an equality on {attribute}: {params}")


def requests(operation: str, params: dict[str, Any]) -> list[Request]:
    """The IAM requests DynamoDB authorizes one API call as (the Service Authorization
    Reference's operation table): a transaction as each of its items' own actions; a batch
    as its own action (``dynamodb:BatchWriteItem``), conditioned on the keys of all its
    items at once, so one statement must allow every key of the batch."""
    if operation in ("GetItem", "UpdateItem", "DeleteItem"):
        return [Request(f"dynamodb:{operation}", TABLE, frozenset({_pk(params["Key"])}))]
    if operation == "PutItem":
        return [Request("dynamodb:PutItem", TABLE, frozenset({_pk(params["Item"])}))]
    if operation == "Query":
        index = params.get("IndexName")
        attribute = (
            next(i.partition_key for i in k.INDEXES if i.name == index)
            if index
            else k.PARTITION_KEY
        )
        return [
            Request("dynamodb:Query", index or TABLE, frozenset({_query_key(params, attribute)}))
        ]
    if operation in ("TransactWriteItems", "TransactGetItems"):
        out = []
        for item in params["TransactItems"]:
            [(kind, body)] = item.items()
            out.append(
                Request(
                    f"dynamodb:{_TRANSACT_ACTIONS[kind]}",
                    TABLE,
                    frozenset({_pk(body["Key"] if "Key" in body else body["Item"])}),
                )
            )
        return out
    if operation == "BatchGetItem":
        [(_, body)] = params["RequestItems"].items()
        return [Request("dynamodb:BatchGetItem", TABLE, frozenset(map(_pk, body["Keys"])))]
    if operation == "BatchWriteItem":
        [(_, items)] = params["RequestItems"].items()
        keys = {
            _pk(i["PutRequest"]["Item"]) if "PutRequest" in i else _pk(i["DeleteRequest"]["Key"])
            for i in items
        }
        return [Request("dynamodb:BatchWriteItem", TABLE, frozenset(keys))]
    if operation in STREAM_OPERATIONS:
        return [Request(f"dynamodb:{operation}", STREAM, None)]
    return [Request(f"dynamodb:{operation}", TABLE, None)]


STREAM_OPERATIONS = frozenset({"DescribeStream", "GetShardIterator", "GetRecords", "ListStreams"})
"""DynamoDB Streams calls: authorized on the table's stream (``ListStreams`` only on ``*``)."""


class CallRecorder:
    """Records the IAM requests of every DynamoDB call made through the clients it watches."""

    def __init__(self) -> None:
        self.requests: list[Request] = []

    def watch(self, client: Any) -> None:
        """Record ``client``'s calls from now on."""
        client.meta.events.register("provide-client-params.dynamodb", self._hook)

    def watch_session(self, session: Any) -> None:
        """Record the calls of every DynamoDB and DynamoDB Streams client made from the boto3
        ``session`` from now on."""
        session.events.register("provide-client-params.dynamodb", self._hook)
        session.events.register("provide-client-params.dynamodbstreams", self._hook)

    def _hook(self, params: dict[str, Any], model: Any, **_: Any) -> None:
        self.requests.extend(requests(model.name, params))

    def triples(self) -> set[tuple[str, str, str]]:
        """(action, table-or-index, family) of everything recorded."""
        return {t for r in self.requests for t in r.triples()}


# Policy evaluation.


def resolve(value: Any, template: dict[str, Any]) -> str:
    """A resource ARN of a synthesized template as a string (another resource's ARN is
    ``arn:<its logical id>``)."""
    if isinstance(value, str):
        return value
    [(function, arg)] = value.items()
    if function == "Fn::GetAtt" and arg[1] == "Arn":
        return f"arn:{arg[0]}"
    if function == "Fn::GetAtt" and arg[1] == "StreamArn":
        return f"arn:{arg[0]}/stream/{STREAM_LABEL}"
    if function == "Fn::Join":
        return arg[0].join(resolve(part, template) for part in arg[1])
    if function == "Ref":
        return f"ref:{arg}"
    raise NotImplementedError(f"an intrinsic the evaluator does not model: {value}")


def _glob(pattern: str, value: str) -> bool:
    """IAM's wildcard match: ``*`` any run of characters, ``?`` one, everything else literal."""
    regex = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(regex, value, re.DOTALL) is not None


def _listed(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else list(value)


def _condition_holds(
    operator: str, key: str, values: list[str], keys: frozenset[str] | None
) -> bool:
    if key != "dynamodb:LeadingKeys":
        raise NotImplementedError(f"a condition key the evaluator does not model: {key}")
    qualifier, _, test = operator.rpartition(":")
    match = {"StringEquals": lambda p, v: p == v, "StringLike": _glob}.get(test)
    if match is None or qualifier not in ("ForAllValues", "ForAnyValue"):
        # A single-valued operator on the multivalued LeadingKeys is a known IAM trap.
        raise NotImplementedError(f"an operator the evaluator does not model: {operator}")
    present = keys or frozenset()

    def matched(v: str) -> bool:
        return any(match(p, v) for p in values)

    if qualifier == "ForAllValues":  # true of an absent or empty key: no value fails it
        return all(matched(v) for v in present)
    return any(matched(v) for v in present)


def _statement_matches(
    statement: dict[str, Any],
    action: str,
    resource: str,
    keys: frozenset[str] | None,
    template: dict[str, Any],
) -> bool:
    unknown = set(statement) - {"Effect", "Action", "Resource", "Condition", "Sid"}
    if unknown:
        raise NotImplementedError(f"statement elements the evaluator does not model: {unknown}")
    if not any(_glob(a.lower(), action.lower()) for a in _listed(statement["Action"])):
        return False
    resources = statement["Resource"]
    resources = resources if isinstance(resources, list) else [resources]
    if not any(_glob(resolve(r, template), resource) for r in resources):
        return False
    return all(
        _condition_holds(operator, key, _listed(values), keys)
        for operator, block in statement.get("Condition", {}).items()
        for key, values in block.items()
    )


def allows(
    statements: list[dict[str, Any]],
    action: str,
    resource: str,
    keys: frozenset[str] | None,
    template: dict[str, Any],
) -> bool:
    """True if the statements allow the request: some Allow matches it and no Deny does."""
    matching = [s for s in statements if _statement_matches(s, action, resource, keys, template)]
    if any(s["Effect"] == "Deny" for s in matching):
        return False
    return any(s["Effect"] == "Allow" for s in matching)


STREAM = "stream"
STREAM_LABEL = "2026-01-01T00:00:00.000"


def arn(table_arn: str, resource: str) -> str:
    """The ARN of the table, one of its indexes or its stream."""
    if resource == TABLE:
        return table_arn
    if resource == STREAM:
        return f"{table_arn}/stream/{STREAM_LABEL}"
    return f"{table_arn}/index/{resource}"


def allowed_triples(
    statements: list[dict[str, Any]], template: dict[str, Any], table_arn: str
) -> set[tuple[str, str, str]]:
    """Every (action, table-or-index-or-stream, family) the statements allow: a keyed action
    probed with one key of each family and with keys of none (:data:`FOREIGN`)."""
    out = set()
    for name in (TABLE, *(i.name for i in k.INDEXES), STREAM):
        target = arn(table_arn, name)
        for action in KEYED_ACTIONS:
            for fam in FAMILIES:
                if allows(statements, action, target, frozenset({sample(fam)}), template):
                    out.add((action, name, fam))
            if any(
                allows(statements, action, target, frozenset({key}), template)
                for key in FOREIGN_KEYS
            ):
                out.add((action, name, FOREIGN))
        for action in UNKEYED_ACTIONS:
            if allows(statements, action, target, None, template):
                out.add((action, name, NO_KEY))
    return out


def role_statements(template: dict[str, Any], role_prefix: str) -> list[dict[str, Any]]:
    """Every statement of the policies attached to the role whose logical id starts with
    ``role_prefix`` (inline policies, AWS::IAM::Policy and customer-managed policies)."""
    resources = template["Resources"]
    [role_id] = [
        n
        for n, r in resources.items()
        if r["Type"] == "AWS::IAM::Role" and n.startswith(role_prefix)
    ]
    role = resources[role_id]["Properties"]
    assert "ManagedPolicyArns" not in role
    statements = [s for p in role.get("Policies", []) for s in p["PolicyDocument"]["Statement"]]
    for resource in resources.values():
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy") and {
            "Ref": role_id
        } in resource["Properties"].get("Roles", []):
            statements.extend(resource["Properties"]["PolicyDocument"]["Statement"])
    return statements
