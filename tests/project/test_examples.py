"""The examples in examples/ run as documented."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

ROOT = Path(__file__).resolve().parents[2]


def _load(path: Path) -> ModuleType:
    # The worker is a file a user copies into their own function, not part of a package.
    spec = importlib.util.spec_from_file_location("example_worker", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_worker_example_appends_and_reports(
    moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TABLE_NAME", sync_table)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    worker = _load(ROOT / "examples" / "worker" / "handler.py")
    created = {"ts": 1, "name": "build", "sandboxId": "sb-1", "stepIndex": -1,
               "event": "sandbox.created"}  # fmt: skip
    done = {"ts": 2, "name": "build", "sandboxId": "sb-1", "stepIndex": 0,
            "event": "exec.complete", "payload": {"exitCode": 0}}  # fmt: skip
    assert worker.handler(created, None)["ok"] is True
    result = worker.handler(done, None)
    assert result == {
        "ok": True,
        "stored": True,
        "session": {"name": "build", "sandboxId": "sb-1", "status": "running",
                    "startedAt": 1, "execCount": 1},
    }  # fmt: skip
    json.dumps(result)  # a Lambda response must serialize
    bad = worker.handler({"ts": "soon", "name": "build"}, None)
    assert bad["ok"] is False and "ts" in bad["error"]
    too_long = worker.handler({**done, "name": "n" * 3000}, None)  # refused before writing
    assert too_long["ok"] is False and "too long" in too_long["error"]
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    assert [e.event for e in ledger.read_all("build", "sb-1")] == [
        "sandbox.created",
        "exec.complete",
    ]
    sys.modules.pop("example_worker", None)


def test_worker_example_requirements_name_this_package() -> None:
    import tomllib

    name = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["name"]
    lines = (ROOT / "examples" / "worker" / "requirements.txt").read_text().split()
    assert any(line.startswith(name) for line in lines)


class Context:
    """What Lambda passes: a retried asynchronous invocation keeps its request id."""

    def __init__(self, request_id: str) -> None:
        self.aws_request_id = request_id


def test_worker_example_writes_once_when_lambda_retries(
    moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TABLE_NAME", sync_table)
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    worker = _load(ROOT / "examples" / "worker" / "handler.py")
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    created = {"ts": 1, "name": "retry", "sandboxId": "sb-1", "stepIndex": -1,
               "event": "sandbox.created"}  # fmt: skip
    done = {"ts": 2, "name": "retry", "sandboxId": "sb-1", "stepIndex": 0,
            "event": "exec.complete", "payload": {"exitCode": 0}}  # fmt: skip
    worker.handler(created, Context("req-1"))

    # The first delivery appends, then fails before answering (as a timeout would): Lambda
    # retries the same event with the same request id.
    real = worker.LEDGER.get_sandbox_details
    calls = 0

    def fail_once(name: str, sandbox_id: str) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise TimeoutError("the function timed out after appending")
        return real(name, sandbox_id)

    monkeypatch.setattr(worker.LEDGER, "get_sandbox_details", fail_once)
    with pytest.raises(TimeoutError):
        worker.handler(done, Context("req-2"))
    retried = worker.handler(done, Context("req-2"))
    again = worker.handler(done, Context("req-2"))  # the second of Lambda's two retries
    # A client resending the same entry under a new request id is a retry too.
    resent = worker.handler(done, Context("req-3"))
    assert [e.event for e in ledger.read_all("retry", "sb-1")] == [
        "sandbox.created",
        "exec.complete",
    ]
    assert ledger.get_sandbox_details("retry", "sb-1").exec_count == 1  # type: ignore[union-attr]
    assert retried["ok"] is True and retried["session"]["execCount"] == 1
    assert [retried["stored"], again["stored"], resent["stored"]] == [False, False, False]
    # A different entry of the session (another step) is stored.
    later = worker.handler({**done, "ts": 3, "stepIndex": 1}, Context("req-4"))
    assert later["stored"] is True and later["session"]["execCount"] == 2
    sys.modules.pop("example_worker", None)
