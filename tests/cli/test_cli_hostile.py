"""Stored text never drives the operator's terminal (issue 42, items 3 and 4): every command,
in every output format, against a store full of hostile names, sandbox ids, events,
payloads, errors, environment records and resource records. Text and table output (and
prompts, errors, summaries, progress) show control characters and escape sequences as
visible escapes and square brackets literally; JSON output is exact."""

from __future__ import annotations

import functools
import io
import json
import shutil
import subprocess
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from resources.resource_fixtures import TS_RECORD, observed_earlier, record
from sandbox_ledger import EnvironmentRecord, LedgerEntry
from sandbox_ledger.blocking import BlockingAdapter, open_blocking_store
from sandbox_ledger.cli import app
from sandbox_ledger.cli.output import json_text, shell_word, visible
from sandbox_ledger.resources import SyncResourceRecordStore

from .test_cli_scripting import commands

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from click.testing import Result

HOSTILE = {
    "osc8": "\x1b]8;;http://evil\x1b\\x\x1b]8;;\x1b\\",
    "bel-cr": "ok\x07\rFAKE",
    "clear": "\x1b[2J\x1b[H",
    "c1": "a\x9b31mb",
    "bidi": "x\u202eevil\u2066y\u2069",
    "markup": "[bold]x[/bold]",
    "link": "[link=http://evil]y[/link]",
    "emoji": ":smile:",
    "tab-lf": "a\tb\nc",
}
"""Each a part of stored names, ids, events, payloads, errors, fields."""

RAW = ("\x1b", "\x07", "\r", "\x9b", "\u202e", "\u2066", "\u2069")
"""What no text or table output may hold: rich writes no escape sequence when it writes to
no terminal, so any of these would be the store's."""

LITERAL = ("[bold]x[/bold]", "[link=http://evil]y[/link]", ":smile:")
"""Shown as stored: never read as markup or emoji codes."""

SESSIONS = [(f"team{h}", f"sb{h}") for h in HOSTILE.values()]
CLOSED = SESSIONS[0]
"""Its session is closed: ``tail --follow`` ends there."""
ENVIRONMENTS = [f"env{h}" for h in HOSTILE.values()]


def entries() -> list[LedgerEntry]:
    made = []
    for i, ((name, sid), h) in enumerate(zip(SESSIONS, HOSTILE.values(), strict=True)):
        at = functools.partial(_entry, name, sid, 1_796_119_200_000 + i * 1000)

        made += [
            at(0, "sandbox.created", payload={"environment": f"env{h}", h: h}),
            at(1, f"exec{h}", step=0, payload=h, error=f"boom {h}"),
            at(2, "exec.complete", step=0, payload={"out": h}, error=h),
            at(3, "sandbox.checkpoint_created", payload={"snapshotId": f"s{h}", "name": h}),
        ]
        if (name, sid) == CLOSED:
            made.append(at(4, "sandbox.closed"))
    return made


def _entry(
    name: str, sid: str, base: int, offset: int, event: str, step: int = -1, **kw: Any
) -> LedgerEntry:
    return LedgerEntry(
        ts=base + offset, name=name, sandbox_id=sid, step_index=step, event=event, **kw
    )


def environments() -> list[EnvironmentRecord]:
    return [
        EnvironmentRecord.model_validate(
            {"name": f"env{h}", "builtAt": 5 + i, "snapshotId": h, h: [h, {"k": h}]}
        )
        for i, h in enumerate(HOSTILE.values())
    ]


@pytest.fixture(scope="module")
def hostile_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("hostile") / "ledger.db"
    with open_blocking_store(f"sqlite:///{db}") as ledger:
        for entry in entries():
            ledger.append(entry)
        for environment in environments():
            ledger.save_environment(environment)
    return db


@pytest.fixture
def store(hostile_db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A copy of the hostile store (``rm`` deletes from it)."""
    for name in ("SANDBOX_LEDGER_TABLE", "SANDBOX_LEDGER_STORE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("COLUMNS", "200")
    copy = tmp_path / "ledger.db"
    shutil.copy(hostile_db, copy)
    return f"sqlite:///{copy}"


def check_shown(result: Result) -> str:
    """stdout and stderr of a text or table run, checked: nothing raw, markup literal."""
    both = result.stdout + result.stderr
    for raw in RAW:
        assert raw not in both, (repr(raw), both)
    return both


def wire_entries() -> list[dict[str, Any]]:
    return [e.wire() for e in entries()]


def json_lines(text: str) -> list[Any]:
    return [json.loads(line) for line in text.splitlines()]


# --- the rule --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("plain name-1.2_3 é 日本", "plain name-1.2_3 é 日本"),
        ("a\tb\nc\rd", "a\\tb\\nc\\rd"),
        ("\x1b[2J\x07\x00\x7f", "\\x1b[2J\\x07\\x00\\x7f"),
        ("\x9b31m\x85", "\\x9b31m\\x85"),
        ("x\u202ey\u2066z\u2069\u200f", "x\\u202ey\\u2066z\\u2069\\u200f"),
        ("a\u200bb\ufeff\u2028\u2029", "a\\u200bb\\ufeff\\u2028\\u2029"),
        ("tag\U000e0041", "tag\\U000e0041"),
        ("lone\udc80", "lone\\udc80"),
        # Kept: the joiners emoji and scripts need; brackets, colons, backslashes as text.
        (
            "\U0001f468\u200d\U0001f469 \u0646\u200c\u0627",
            "\U0001f468\u200d\U0001f469 \u0646\u200c\u0627",
        ),
        ("[bold]x[/bold] :smile: C:\\x1b", "[bold]x[/bold] :smile: C:\\x1b"),
    ],
)
def test_visible_escapes_what_drives_or_hides_and_keeps_the_rest(stored: str, shown: str) -> None:
    assert visible(stored) == shown
    assert visible(shown) == shown  # idempotent: nothing it writes is escaped again
    assert json.loads(json_text(stored)) == stored  # JSON stays exact...
    if stored != shown:  # ...with no character visible() escapes written raw
        assert visible(json_text(stored)) == json_text(stored)


def test_a_suggested_command_names_the_stored_text_when_pasted() -> None:
    for stored in ("plain", "a b", "ok\x07\rFAKE", "x\\y'z\x1b[2J\u202e"):
        word = shell_word(stored)
        assert visible(word) == word
        pasted = subprocess.run(["bash", "-c", f"printf %s {word}"], capture_output=True)
        assert pasted.stdout.decode() == stored


# --- every command is covered --------------------------------------------------------------


@dataclass(frozen=True)
class Case:
    """A run of a command against the hostile store, and what its JSON output must equal."""

    argv: list[str]
    json: Callable[[str], bool] | None = None
    """Given the run's stdout with --output json: is it exact? (None: no JSON run.)"""
    code: int = 0
    input: str | None = None
    shows: tuple[str, ...] = ()
    """Stored text the text and table output show (visible)."""


EVERY = tuple(HOSTILE.values())
name, sid = SESSIONS[1]
closed_name, closed_sid = CLOSED


def _session_wire(doc: Any) -> bool:
    return sorted((s["name"], s["sandboxId"]) for s in doc["sessions"]) == sorted(SESSIONS)


LEDGER_CASES: dict[str, list[Case]] = {
    "ls": [
        Case(["ls"], lambda out: _session_wire(json.loads(out)), shows=EVERY),
        Case(
            ["ls", "--name", name],
            lambda out: json.loads(out)["sessions"][0]["name"] == name,
            shows=(name, sid),
        ),
    ],
    "show": [
        Case(
            ["show", name, sid],
            lambda out: (
                json_lines(out)
                == [w for w in wire_entries() if (w["name"], w["sandboxId"]) == (name, sid)]
            ),
            shows=(f"exec{HOSTILE['bel-cr']}", f"boom {HOSTILE['bel-cr']}"),
        ),
        Case(["show", name, "missing" + sid], code=3, shows=(name, "missing" + sid)),
    ],
    "tail": [
        Case(
            ["tail", name, sid],
            lambda out: (
                json_lines(out)
                == [w for w in wire_entries() if (w["name"], w["sandboxId"]) == (name, sid)]
            ),
            shows=(f"exec{HOSTILE['bel-cr']}", f"boom {HOSTILE['bel-cr']}"),
        ),
        Case(
            ["tail", closed_name, closed_sid, "--follow"],
            lambda out: json_lines(out) == [w for w in wire_entries() if w["name"] == closed_name],
            shows=(f"exec{HOSTILE['osc8']}", f"boom {HOSTILE['osc8']}"),
        ),
    ],
    "checkpoints": [
        Case(
            ["checkpoints", name, sid],
            lambda out: [c["snapshotId"] for c in json.loads(out)] == [f"s{HOSTILE['bel-cr']}"],
            shows=(f"s{HOSTILE['bel-cr']}",),
        )
    ],
    "envs": [
        Case(
            ["envs"],
            lambda out: (
                sorted(json.loads(out), key=lambda r: r["name"])
                == sorted((r.wire() for r in environments()), key=lambda r: r["name"])
            ),
            shows=EVERY,
        ),
        Case(
            ["envs", ENVIRONMENTS[0]],
            lambda out: json.loads(out) == [environments()[0].wire()],
            shows=(ENVIRONMENTS[0],),
        ),
        Case(["envs", "missing" + ENVIRONMENTS[1]], code=3, shows=("missing" + ENVIRONMENTS[1],)),
        # The query's result as a table: its columns are the records' (hostile) field names.
        Case(["envs", "--query", "[*]"], lambda out: len(json.loads(out)) == len(HOSTILE)),
    ],
    "rm": [
        Case(
            ["rm", name, sid, "--yes"],
            lambda out: json.loads(out) == {"name": name, "sandboxId": sid, "deleted": True},
        ),
        Case(["rm", name, sid], code=1, input="n\n"),  # the prompt, answered no
        Case(["rm", name, "missing" + sid, "--yes"], code=3, shows=(name, "missing" + sid)),
    ],
    "export": [Case(["export"])],  # JSON lines whatever the format: checked below
    "import": [],  # reads a file, not the store: checked below
    "watch": [],  # runs until stopped: checked below
}
OTHER_TESTS = {
    "import": "test_import_shows_hostile_lines_and_file_names_visibly",
    "export": "test_export_is_exact_and_its_summary_visible",
    "watch": "test_watch_shows_hostile_changes_visibly",
    "resources ls": "test_resource_commands_show_hostile_records_visibly",
    "resources show": "test_resource_commands_show_hostile_records_visibly",
    "resources sweep": "test_resource_commands_show_hostile_records_visibly",
    "resources export": "test_resource_commands_show_hostile_records_visibly",
    "resources import": "test_resource_commands_show_hostile_records_visibly",
    "demo": "test_the_demo_report_shows_stored_text_visibly",
    "ui": "test_the_console_shows_stored_text_visibly",
}
NOTHING_STORED = {
    "local": "serves a DynamoDB; prints only its own endpoint, table and file",
    "table create": "prints only the table's name and settings, as the operator gave them",
}


def test_every_command_is_run_against_hostile_data() -> None:
    leaves = {" ".join(path) for path, command in commands() if not hasattr(command, "commands")}
    covered = {c for c, cases in LEDGER_CASES.items() if cases} | set(OTHER_TESTS)
    assert leaves == covered | set(NOTHING_STORED), "a new command: add it here"
    assert not covered & set(NOTHING_STORED)
    tests = {n for n in globals() if n.startswith("test_")}
    assert set(OTHER_TESTS.values()) <= tests


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, id=f"{command}-{i}")
        for command, cases in LEDGER_CASES.items()
        for i, case in enumerate(cases)
    ],
)
@pytest.mark.parametrize("fmt", ["text", "table", "json"])
def test_ledger_commands_show_stored_text_visibly(case: Case, fmt: str, store: str) -> None:
    if case.argv[0] == "export" and fmt != "json":
        pytest.skip("export writes JSON lines only")
    if case.argv[0] == "tail" and fmt == "table":
        pytest.skip("tail prints text or JSON lines")
    output = [] if case.argv[0] == "export" else ["--output", fmt]
    result = CliRunner().invoke(
        app, ["--store", store, *case.argv, *output], input=case.input, catch_exceptions=False
    )
    assert result.exit_code == case.code, result.output
    if fmt == "json":
        for raw in RAW:  # exact, yet no raw C1 or bidi character (escaped as \\uXXXX)
            assert raw not in result.stdout
        if case.json is not None:
            assert case.json(result.stdout), result.stdout
        return
    shown = check_shown(result)
    for stored in case.shows:
        assert visible(stored) in shown, (visible(stored), shown)
    if case.shows is EVERY:
        for literal in LITERAL:
            assert literal in shown
    if case.input is not None:  # the prompt names the session as the operator sees it
        assert f"Delete {visible(f'{name}/{sid}')} and all its entries?" in result.stdout
    if case.code == 3:  # the error names what was asked for, and how to list what there is
        assert result.stderr.startswith("error: no ")
        assert "\\r" in result.stderr  # the carriage return asked for, shown
    if case.code == 3 and case.argv[0] != "envs":
        assert "ls --name $'team" in result.stderr  # pastable: names the stored name
    if case.argv[0] == "rm" and case.code == 0:
        assert f"deleted {visible(f'{name}/{sid}')}" in shown


def test_an_error_quoting_stored_text_is_one_visible_line(
    store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever a failure's message quotes (a driver's error, a damaged row), the one line
    ``handled`` prints is visible."""
    from sandbox_ledger.sqlite import SQLiteAdapter

    hostile = "".join(HOSTILE.values())

    async def broken(self: object, *args: object) -> list[LedgerEntry]:
        raise ValueError(f"row {hostile} is damaged")

    monkeypatch.setattr(SQLiteAdapter, "read_all", broken)
    result = CliRunner().invoke(app, ["--store", store, "show", name, sid])
    assert result.exit_code == 1, result.output
    check_shown(result)
    assert result.stderr.count("\n") == 1 and "[bold]x[/bold]" in result.stderr
    assert visible(HOSTILE["osc8"]) in result.stderr


def test_export_is_exact_and_its_summary_visible(store: str, tmp_path: Path) -> None:
    runner = CliRunner()
    exported = runner.invoke(app, ["--store", store, "export"], catch_exceptions=False)
    assert exported.exit_code == 0, exported.output
    lines = json_lines(exported.stdout)
    exact = sorted(json.dumps(line) for line in lines if "kind" not in line)
    assert exact == sorted(json.dumps(w) for w in wire_entries())
    records = sorted((line["record"] for line in lines if "kind" in line), key=str)
    assert records == sorted((r.wire() for r in environments()), key=str)
    hostile_name = f"none{HOSTILE['bel-cr']}"
    missing = runner.invoke(app, ["--store", store, "export", "--name", hostile_name])
    assert missing.exit_code == 3
    check_shown(missing)
    assert visible(hostile_name) in missing.stderr


def test_import_shows_hostile_lines_and_file_names_visibly(store: str, tmp_path: Path) -> None:
    source = tmp_path / f"in{HOSTILE['clear']}[bold]x.jsonl"
    good = {"ts": 1, "name": "n", "sandboxId": "s", "stepIndex": -1, "event": "sandbox.created"}
    bad = [
        {**good, "ts": HOSTILE["osc8"]},
        {**good, "stepIndex": HOSTILE["bel-cr"]},
        {**good, "name": ""},
        {"kind": HOSTILE["c1"] + HOSTILE["link"], "record": {}},
    ]
    source.write_text("\n".join(json.dumps(v) for v in [good, *bad]) + "\n" + HOSTILE["clear"])
    for fmt in ("text", "table", "json"):
        result = CliRunner().invoke(app, ["--store", store, "import", str(source), "--output", fmt])
        assert result.exit_code == 4, result.output
        stderr = result.stderr
        for raw in RAW:
            assert raw not in stderr, stderr
        assert f"{visible(str(source))}:2: " in stderr
        assert "[bold]x" in stderr
        if fmt == "json":
            assert [f["line"] for f in json.loads(result.stdout)["failed"]] == [2, 3, 4, 5, 6]
        else:
            check_shown(result)


def test_watch_shows_hostile_changes_visibly(store: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The feed of the store, cut (as by Ctrl-C) once each session's creation came: the
    resume hint on stderr names the position."""
    real = BlockingAdapter.changes

    def until_all_seen(self: BlockingAdapter, *, after: str | None = None) -> Iterator[Any]:
        waiting = set(SESSIONS)
        for change in real(self, after=after):
            yield change
            waiting.discard((change.name, change.sandbox_id))
            if not waiting:
                raise KeyboardInterrupt

    monkeypatch.setattr(BlockingAdapter, "changes", until_all_seen)
    for fmt in ("text", "table", "json"):
        result = CliRunner().invoke(app, ["--store", store, "watch", "--output", fmt])
        assert result.exit_code == 130, result.output
        assert "resume with:" in result.stderr
        if fmt == "json":
            assert not any(raw in result.stdout for raw in RAW)
            seen = {(c["name"], c["sandboxId"]) for c in json_lines(result.stdout)}
            assert seen == set(SESSIONS)
            continue
        shown = check_shown(result)
        for session_name, session_id in SESSIONS:
            assert visible(session_name) in shown and visible(session_id) in shown
        for literal in LITERAL:
            assert literal in shown


# --- resource records (a DynamoDB table) ---------------------------------------------------


def test_resource_commands_show_hostile_records_visibly(
    moto_endpoint: str,
    sync_table: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    wait_for_indexes: Callable[[], None],
) -> None:
    import boto3

    from sandbox_ledger import keys as k
    from sandbox_ledger.resources import _items as ri

    for variable in ("SANDBOX_LEDGER_TABLE", "SANDBOX_LEDGER_STORE", "AWS_ENDPOINT_URL"):
        monkeypatch.delenv(variable, raising=False)
    resources = SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)
    hostile = "".join(HOSTILE.values())
    failure = {"kind": f"x{HOSTILE['emoji']}", "outcome": "failed", "at": TS_RECORD["createdAt"]}
    # One hostile part a field: short cells, so a table shows them whole.
    stale = record(
        age=timedelta(hours=2),
        provider=f"d{HOSTILE['markup']}",
        workspace=f"/w/{HOSTILE['osc8']}",
        operations=[{"kind": f"op{HOSTILE['clear']}{HOSTILE['link']}", "count": 1}],
        identity={**TS_RECORD["identity"], "host": HOSTILE["c1"]},
        lastFailure={**failure, "error": HOSTILE["bel-cr"] + HOSTILE["bidi"]},
        lastOperation={**failure, "outcome": "completed"},
    )
    observed_earlier(resources, resources.put(stale), timedelta(minutes=16))  # due now
    # Unreadable by this version: a field it does not know, shown as stored.
    twin = record(age=timedelta(hours=2))
    odd_id = twin.id.upper()  # as an older version took it
    item = {**ri.record_key(twin.id), k.REVISION: {"N": "1"}}
    item.update(ri.write_values(twin, expires_at=2**31, shard_count=4))
    item[k.PARTITION_KEY] = {"S": k.RESOURCE_PREFIX + odd_id}
    body = {**json.loads(item[k.RECORD_BODY]["S"]), "id": odd_id, "x": hostile}
    item[k.RECORD_BODY] = {"S": json.dumps(body)}
    boto3.client("dynamodb", endpoint_url=moto_endpoint).put_item(TableName=sync_table, Item=item)
    wait_for_indexes()  # settled listings (index lag waited out)

    where = ["--table", sync_table, "--endpoint-url", moto_endpoint, "--region", "us-east-1"]
    sweep = ["--dry-run", "--event-bus", "default", "--stale-after", "900"]
    runs = [
        (["resources", "ls"], 0),
        (["resources", "show", stale.id], 0),
        (["resources", "show", odd_id], 4),
        (["resources", "sweep", *sweep, "--retain-failed", "0"], 4),  # the unreadable one
        (["resources", "export", str(tmp_path / "out")], 4),
    ]
    runner = CliRunner()
    for argv, code in runs:
        for fmt in ("text", "table", "json"):
            result = runner.invoke(app, [*where, *argv, "--output", fmt])
            assert result.exit_code == code, (argv, fmt, result.output)
            if fmt == "json":
                assert not any(raw in result.stdout for raw in RAW)
                doc = json.loads(result.stdout)
                if argv[:2] == ["resources", "ls"]:
                    assert doc["records"] == [stale.wire()]
                    assert [u["id"] for u in doc["unreadable"]] == [odd_id]
                elif argv[1:] == ["show", stale.id]:
                    assert doc == stale.wire()
                elif argv[1:] == ["show", odd_id]:
                    assert doc["id"] == odd_id and json.loads(doc["stored"]) == body
                continue
            shown = check_shown(result)
            if argv[1] == "ls" or argv[1:] == ["show", stale.id]:
                assert HOSTILE["markup"] in shown and HOSTILE["link"] in shown
                assert visible(HOSTILE["osc8"]) in shown
            if argv[1:] == ["show", stale.id]:
                assert visible(HOSTILE["clear"]) in shown and HOSTILE["emoji"] in shown
                assert fmt == "table" or "\\u202e" in shown  # the last failure (JSON, clipped)
            if argv[1:] == ["show", odd_id] and fmt == "text":  # a table clips the body
                assert HOSTILE["markup"] in shown and HOSTILE["link"] in shown
    # The records as files, back in (a hostile file name, a hostile reason).
    directory = tmp_path / "in"
    directory.mkdir()
    (directory / f"{stale.id}.json").write_text(json.dumps(stale.wire()))
    (directory / f"bad{HOSTILE['clear']}[bold]y.json").write_text(
        json.dumps({**stale.wire(), "phase": hostile})
    )
    for fmt in ("text", "table", "json"):
        result = runner.invoke(
            app, [*where, "resources", "import", str(directory), "--output", fmt]
        )
        assert result.exit_code == 4, result.output
        for raw in RAW:
            assert raw not in result.stderr, result.stderr
        assert f"bad{visible(HOSTILE['clear'])}[bold]y.json" in result.stderr
        if fmt != "json":
            check_shown(result)


# --- the demo's report and progress lines (rendered for a terminal) ------------------------


def terminal() -> Any:
    from rich.console import Console

    return Console(file=io.StringIO(), force_terminal=True, width=2000)


def test_the_demo_report_shows_stored_text_visibly() -> None:
    from sandbox_ledger.cli.demo import Report
    from sandbox_ledger.cli.demo_report import render

    hostile = "".join(HOSTILE.values())
    report = Report(sweep={"expired": [f"r{hostile}"], "reasons": {f"r{hostile}": hostile}})
    report.latencies[f"op{hostile}"].append(0.01)
    report.calls[f"op{hostile}"] = 1
    report.records[f"r{hostile}"] = (f"p{hostile}", f"ph{hostile}")
    console = terminal()
    render(report, console)
    shown = console.file.getvalue()
    for raw in ("\x1b]8;", "\x1b[2J", "\x07", "\r", "\x9b", "\u202e"):
        assert raw not in shown
    assert visible(HOSTILE["osc8"]) in shown and visible(HOSTILE["c1"]) in shown
    for literal in LITERAL:
        assert literal in shown


def test_progress_lines_show_their_labels_visibly(tmp_path: Path) -> None:
    from sandbox_ledger.cli.progress import per_file, reading
    from sandbox_ledger.cli.transfer import import_from

    label = "".join(HOSTILE.values())
    lines = "".join(json.dumps(w) + "\n" for w in wire_entries()).encode()
    console = terminal()
    with open_blocking_store(f"sqlite:///{tmp_path / 'in.db'}") as ledger:
        report = import_from(ledger, io.BytesIO(lines), label=label, err=console)
    assert report.new == len(wire_entries())
    shown = console.file.getvalue()
    assert f"importing {visible(label)}" in shown
    for raw in ("\x1b]8;", "\x1b[2J", "\x07", "\x9b", "\u202e"):
        assert raw not in shown, repr(shown)
    for progress, step in (
        (lambda c: reading(label, c, 3), 1),
        (lambda c: per_file(label, c, 3), "a.json"),
        (lambda c: per_file(label, c, None), "a.json"),
    ):
        console = terminal()
        with progress(console) as advance:
            assert advance is not None
            advance(step)
        shown = console.file.getvalue()
        for raw in ("\x1b]8;", "\x1b[2J", "\x07", "\x9b", "\u202e"):
            assert raw not in shown, repr(shown)
        assert "[bold]x[/bold]" in shown and "[link=http://evil]y[/link]" in shown


def test_the_console_shows_stored_text_visibly(hostile_db: Path) -> None:
    """`sandbox-ledger ui`'s pages over the hostile store: every stored text is text (no
    raw control, C1 or bidirectional character: shown as its escape), markup-looking text as
    stored, and no tag the store's text could have made."""
    from urllib.parse import urlencode

    from starlette.testclient import TestClient

    from sandbox_ledger.ui.app import build

    with open_blocking_store(f"sqlite:///{hostile_db}", read_only=True) as ledger:
        browser = TestClient(build(ledger, token="t", host="testserver", source="hostile"))
        assert browser.get("/?token=t").status_code == 200
        pages = [browser.get("/").text, browser.get("/environments").text]
        pages += [
            browser.get("/session?" + urlencode({"name": name, "id": sid})).text
            for name, sid in SESSIONS
        ]
    for page in pages:
        assert not any(raw in page for raw in RAW), [raw for raw in RAW if raw in page]
        assert '<a href="http' not in page
    assert all(literal in pages[0] for literal in LITERAL)
    assert "\\u202e" in pages[0] and "\\u001b" in pages[0]
