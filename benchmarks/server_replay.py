"""The embedded server's CPU for the demo's own requests, with and without the hot-path
patches of ``sandbox_ledger.local`` (parsed update expressions, static checks, the
serializer's keys), in one process and one run.

First the demo runs once against an embedded server that records every request it serves
(headers and body). Then this process replays that recording into moto's WSGI application
directly (no sockets, no client), ``--rounds`` times per side, alternating: the server as
``LocalDynamoDB`` adjusts it, and the same with moto's own parser, validator and serializer
(the adjustments of ``sandbox_ledger.local.adjustments.HOT_PATH`` left off). moto
is reset before each replay, so every replay serves the same requests on the same data.
It reports each side's CPU time (the smallest of its rounds, then per request of each
operation) and how many responses differ between the sides (those with a creation time or
a random id in them, nothing else).

    .venv/bin/python benchmarks/server_replay.py             # records the demo, replays 5 + 5
    .venv/bin/python benchmarks/server_replay.py --rounds 3 --keep /tmp/demo-requests.json
    .venv/bin/python benchmarks/server_replay.py --requests /tmp/demo-requests.json
"""

from __future__ import annotations

import argparse
import base64
import collections
import contextlib
import io
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The embedded server's child, recording each request before serving it.
RECORDER = """
import base64, io, json, os, sys, threading
import sandbox_ledger.local.dynamodb as server_module
from sandbox_ledger.local import LocalDynamoDB, adjustments
log = []
KEEP = ("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "CONTENT_TYPE", "CONTENT_LENGTH",
        "SERVER_NAME", "SERVER_PORT", "SERVER_PROTOCOL", "SCRIPT_NAME", "REMOTE_ADDR",
        "wsgi.url_scheme")

def _serialized(app, settings, *_):  # the server's own lock and observers: unused here
    lock = threading.Lock()
    def handle(environ, start_response):
        with lock, adjustments.serving(settings):
            body = environ["wsgi.input"].read()
            environ["wsgi.input"] = io.BytesIO(body)
            kept = {k: v for k, v in environ.items()
                    if isinstance(v, str) and (k.startswith("HTTP_") or k in KEEP)}
            log.append([kept, base64.b64encode(body).decode()])
            return list(app(environ, start_response))
    return handle

server_module._serialized = _serialized
server = LocalDynamoDB("127.0.0.1", 0)
print(server.start())
print(flush=True)  # no adjustment left off (see LocalDynamoDBProcess.start)
sys.stdin.read()
with open(sys.argv[1], "w") as out:
    json.dump(log, out)
sys.stdout.flush()
os._exit(0)
"""


def record(path: Path) -> None:
    """Run ``sandbox-ledger demo`` once, its embedded server writing its requests to ``path``."""
    import sandbox_ledger.local.dynamodb as server_module
    from sandbox_ledger.cli.app import main as cli

    script = path.with_suffix(".recorder.py")
    script.write_text(RECORDER)
    real = subprocess.Popen

    def popen(command: list[str], *a: Any, **kw: Any) -> Any:
        if "sandbox_ledger.local" in command:
            command = [sys.executable, str(script), str(path)]
        return real(command, *a, **kw)

    module: Any = server_module
    module.subprocess.Popen = popen
    sys.argv = ["sandbox-ledger", "demo", "--json"]
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.suppress(SystemExit):
            cli()
    finally:
        module.subprocess.Popen = real
    for _ in range(100):  # the child writes the recording as it ends
        if path.exists() and path.stat().st_size:
            break
        time.sleep(0.1)


def replay(
    app: Any, settings: Any, requests: list[Any]
) -> tuple[dict[str, float], list[tuple[str, bytes]]]:
    """Serve every request with ``settings``; CPU seconds per operation, each (status, body)."""
    from moto.moto_api._internal.models import moto_api_backend

    from sandbox_ledger.local import adjustments

    moto_api_backend.reset()
    cpu: dict[str, float] = collections.Counter()
    answers = []
    for kept, body in requests:
        environ = dict(kept)
        environ.update(
            {
                "wsgi.input": io.BytesIO(base64.b64decode(body)),
                "wsgi.errors": sys.stderr,
                "wsgi.version": (1, 0),
                "wsgi.multithread": False,
                "wsgi.multiprocess": False,
                "wsgi.run_once": False,
                "wsgi.input_terminated": True,
            }
        )
        status: list[str] = []
        start = time.process_time()
        with adjustments.serving(settings):
            chunks = list(app(environ, lambda s, h, *_: status.append(s)))
        operation = kept.get("HTTP_X_AMZ_TARGET", "?").rpartition(".")[2]
        cpu[operation] += time.process_time() - start
        answers.append((status[0], b"".join(chunks)))
    return cpu, answers


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5, help="replays per side")
    parser.add_argument("--requests", type=Path, help="replay this recording (no demo run)")
    parser.add_argument("--keep", type=Path, help="where to keep the recording")
    args = parser.parse_args()

    path = args.requests or args.keep or Path(tempfile.mkdtemp()) / "demo-requests.json"
    if args.requests is None:
        record(path)
    requests = json.loads(path.read_text())

    import logging

    from moto.moto_server.werkzeug_app import DomainDispatcherApplication, create_backend_app

    from sandbox_ledger.local import adjustments
    from sandbox_ledger.local.adjustments.dispatch import _DynamoDBFirst
    from sandbox_ledger.local.dynamodb import DEFAULT_STREAM_RECORDS, _local_credentials

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    _local_credentials()
    on, _ = adjustments.prepare()
    sides = {
        "patched": adjustments.Settings(on=on, stream_records=DEFAULT_STREAM_RECORDS),
        "moto's own": adjustments.Settings(
            on=on - adjustments.HOT_PATH, stream_records=DEFAULT_STREAM_RECORDS
        ),
    }
    app = _DynamoDBFirst(DomainDispatcherApplication(create_backend_app))
    replay(app, sides["patched"], requests)  # warm up: moto loads its service models

    best: dict[str, tuple[float, dict[str, float]]] = {}
    answers: dict[str, list[tuple[str, bytes]]] = {}
    for _ in range(args.rounds):
        for side, settings in sides.items():
            cpu, answers[side] = replay(app, settings, requests)
            total = sum(cpu.values())
            if side not in best or total < best[side][0]:
                best[side] = (total, cpu)

    counts = collections.Counter(
        kept.get("HTTP_X_AMZ_TARGET", "?").rpartition(".")[2] for kept, _ in requests
    )
    shown = [op for op, _ in counts.most_common() if counts[op] >= 30]
    print(f"{len(requests)} requests of one demo run, {args.rounds} replays per side")
    print("| side | CPU s (least of the rounds) | " + " | ".join(f"{op} ms" for op in shown) + " |")
    print("|---|---:|" + "---:|" * len(shown))
    for side, (total, cpu) in best.items():
        per = " | ".join(f"{cpu[op] / counts[op] * 1000:.2f}" for op in shown)
        print(f"| {side} | {total:.2f} | {per} |")
    differing = [
        requests[i][0].get("HTTP_X_AMZ_TARGET", "?")
        for i, (a, b) in enumerate(zip(answers["patched"], answers["moto's own"], strict=True))
        if a != b
    ]
    print(f"responses that differ between the sides: {len(differing)} {sorted(set(differing))}")


if __name__ == "__main__":
    main()
