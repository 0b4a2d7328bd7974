"""The examples in examples/ run as documented."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

ROOT = Path(__file__).resolve().parent.parent


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
