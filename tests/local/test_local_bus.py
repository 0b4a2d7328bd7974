"""The local event bus of ``sandbox-ledger local --deployment``: EventBridge's PutEvents
answers and limits, and delivery to stdout, a file or a URL in the shape a rule's target
receives, retried, then kept as a dead letter."""

from __future__ import annotations

import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from sandbox_ledger.local.bus import DELIVERY_ATTEMPTS, LocalBus
from sandbox_ledger.resources.events import DETAIL_TYPE, SOURCE


def _entry(n: int, size: int = 10) -> dict[str, Any]:
    return {
        "Source": SOURCE,
        "DetailType": DETAIL_TYPE,
        "Detail": json.dumps({"n": n, "pad": "x" * size}),
        "EventBusName": "sandbox-ledger",
    }


def test_a_request_over_eventbridges_limits_is_refused_whole(tmp_path: Path) -> None:
    """More than 10 entries, or more than 256 KB, is a ValidationException: nothing of the
    request is accepted (the publisher splits its batches within the limits)."""
    target = tmp_path / "events.jsonl"
    bus = LocalBus(str(target))
    for entries in ([_entry(n) for n in range(11)], [_entry(n, 90_000) for n in range(3)], []):
        with pytest.raises(ClientError) as refused:
            bus.put_events(Entries=entries)
        assert refused.value.response["Error"]["Code"] == "ValidationException"
    bus.close()
    assert bus.accepted == 0 and not target.exists()


def test_a_malformed_entry_fails_alone_and_the_others_arrive_as_a_target_sees_them(
    tmp_path: Path,
) -> None:
    target = tmp_path / "events.jsonl"
    bus = LocalBus(str(target), region="eu-west-1")
    answer = bus.put_events(Entries=[_entry(1), {**_entry(2), "Detail": "[1]"}, _entry(3)])
    bus.close()
    assert answer["FailedEntryCount"] == 1
    assert [("EventId" in a, a.get("ErrorCode")) for a in answer["Entries"]] == [
        (True, None),
        (False, "MalformedDetail"),
        (True, None),
    ]
    events = [json.loads(line) for line in target.read_text().splitlines()]
    assert [e["detail"]["n"] for e in events] == [1, 3]
    assert [e["id"] for e in events] == [a["EventId"] for a in answer["Entries"] if "EventId" in a]
    assert set(events[0]) == {
        "version",
        "id",
        "detail-type",
        "source",
        "account",
        "time",
        "region",
        "resources",
        "detail",
    }
    assert (events[0]["source"], events[0]["detail-type"], events[0]["region"]) == (
        SOURCE,
        DETAIL_TYPE,
        "eu-west-1",
    )


def test_stdout_gets_one_line_an_event() -> None:
    out = io.StringIO()
    bus = LocalBus("stdout", out=out)
    bus.put_events(Entries=[_entry(1), _entry(2)])
    bus.close()
    assert [json.loads(line)["detail"]["n"] for line in out.getvalue().splitlines()] == [1, 2]


class _Receiver:
    """An HTTP server that refuses the first ``refuse`` POSTs (500), then takes each body."""

    def __init__(self, refuse: int) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.refused = 0
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.refused < refuse:
                    receiver.refused += 1
                    self.send_response(500)
                else:
                    receiver.bodies.append(json.loads(body))
                    self.send_response(204)
                self.end_headers()

            def log_message(self, *_: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/events"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def receiver() -> Iterator[_Receiver]:
    made = _Receiver(refuse=2)
    yield made
    made.server.shutdown()


def test_a_url_gets_each_event_once_after_its_refusals(receiver: _Receiver) -> None:
    """A target that answers 500 twice gets the event on the third try, once."""
    bus = LocalBus(receiver.url, first_wait=0.01)
    answer = bus.put_events(Entries=[_entry(1)])
    bus.close()
    assert [b["id"] for b in receiver.bodies] == [answer["Entries"][0]["EventId"]]
    assert receiver.refused == 2 and bus.delivered == 1 and bus.dead == 0


def test_an_event_no_try_delivers_is_kept_as_a_dead_letter(tmp_path: Path) -> None:
    refusing = _Receiver(refuse=10**6)
    err, kept = io.StringIO(), tmp_path / "dead.jsonl"
    try:
        bus = LocalBus(refusing.url, dead_letters=kept, err=err, first_wait=0.001)
        answer = bus.put_events(Entries=[_entry(7)])
        bus.close()
    finally:
        refusing.server.shutdown()
    assert refusing.refused == DELIVERY_ATTEMPTS
    [dead] = [json.loads(line) for line in kept.read_text().splitlines()]
    assert dead["id"] == answer["Entries"][0]["EventId"] and dead["detail"]["n"] == 7
    assert f"kept in {kept}" in err.getvalue()


def test_the_library_publishes_expiries_through_it(tmp_path: Path) -> None:
    """The sweeper's and the TTL reporter's publisher, over the local bus: each expiry one
    event, its detail the expiry's."""
    from resources.resource_fixtures import record
    from sandbox_ledger.resources.events import EventPublisher, Expiry

    target = tmp_path / "events.jsonl"
    bus = LocalBus(str(target))
    expiries = [
        Expiry(record(), "stale", "sweeper", 1, "2026-12-07T00:00:00.000Z") for _ in range(12)
    ]
    assert EventPublisher(bus, "sandbox-ledger").publish(expiries) == set()
    bus.close()
    events = [json.loads(line) for line in target.read_text().splitlines()]
    assert [e["detail"] for e in events] == [x.detail() for x in expiries]
