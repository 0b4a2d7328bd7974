"""The sessions the library makes for its clients: botocore's built-in handlers, in the same
order as a session botocore makes itself, each session with handlers of its own."""

from __future__ import annotations

from typing import Any

import boto3
import botocore
import botocore.session
import pytest
from aiobotocore.session import AioSession
from botocore import handlers

from sandbox_ledger.dynamodb import SyncDynamoDBAdapter
from sandbox_ledger.sdk import client

EVENTS = sorted(
    {spec[0] for spec in handlers.BUILTIN_HANDLERS}
    | {
        "before-parameter-build.dynamodb.Query",
        "before-call.dynamodb.TransactWriteItems",
        "needs-retry.dynamodb.PutItem",
        "after-call.dynamodb.GetItem",
        "creating-client-class.dynamodb",
        "before-sign.dynamodbstreams.GetRecords",
        "choose-signer.events",
    }
)


def handler_lists(session: Any) -> dict[str, list[str]]:
    """Every handler each event calls, in the order it calls them, by name (boto3 makes a
    closure per session for some)."""
    emitter = session._original_handler
    return {
        event: [_name(handler) for handler in emitter._handlers.prefix_search(event)]
        for event in EVENTS
    }


def _name(handler: Any) -> str:
    kind = handler if hasattr(handler, "__qualname__") else type(handler)
    return f"{kind.__module__}.{kind.__qualname__}"


@pytest.mark.parametrize("cls", [botocore.session.Session, AioSession])
def test_a_session_has_botocores_built_in_handlers_in_order(cls: type) -> None:
    made = client._new_botocore_session(cls)
    assert type(made) is cls and type(made._original_handler) is type(cls()._original_handler)
    assert handler_lists(made) == handler_lists(cls())
    assert sum(map(len, handler_lists(made).values())) > 100


def ping(**_: Any) -> None:
    """A handler that an initializer registers on every new session (as Powertools does)."""


@pytest.mark.parametrize("cls", [botocore.session.Session, AioSession])
def test_an_initializers_handlers_are_registered_once_as_on_any_session(
    cls: type, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whether the initializer came before the process's first session or after it."""

    def initializer(session: Any) -> None:
        session.register("request-created", ping)

    monkeypatch.setattr(client, "_templates", {})
    botocore.register_initializer(initializer)
    try:
        made, own = client._new_botocore_session(cls), cls()
    finally:
        botocore.unregister_initializer(initializer)
    assert handler_lists(made) == handler_lists(own)
    assert handler_lists(made)["request-created"].count(f"{__name__}.ping") == 1
    assert "ping" not in str(handler_lists(client._new_botocore_session(cls)))


def test_a_handler_registered_on_one_session_is_not_seen_by_another() -> None:
    first, second = client.sync_session(), client.sync_session()
    calls: list[str] = []
    first._session.register("sandbox-ledger-test.ping", lambda **_: calls.append("first"))
    second._session.emit("sandbox-ledger-test.ping")
    assert calls == []
    first._session.emit("sandbox-ledger-test.ping")
    assert calls == ["first"]
    assert handler_lists(client.sync_session()._session) == handler_lists(
        boto3.session.Session()._session
    )


def test_clients_of_those_sessions_work_each_with_its_own_hooks(
    moto_endpoint: str, sync_table: str
) -> None:
    """Two adapters at once, one with a hook on its client: the other's requests skip it."""
    seen: list[str] = []
    with (
        SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as watched,
        SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint) as other,
    ):
        watched.client().meta.events.register(
            "before-call.dynamodb", lambda model, **_: seen.append(model.name)
        )
        assert other.list_environments() == []
        assert seen == []
        assert watched.list_environments() == []
        assert seen and set(seen) <= {"Query", "Scan", "GetItem"}
