"""A new user's first day (issue 43), as real processes in a shell with nothing set (as
``env -i`` gives: a plain PATH and HOME): one meaning per option, JSON spellings in text,
one-line errors, empty listings that say so, and tables that fit an 80-column terminal."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.text import Text
from typer.main import get_command

from sandbox_ledger.cli import app

from .processes import ROOT, popen, run

EXAMPLES = ROOT / "examples" / "ledger.jsonl"


def clean_env(home: Path, **extra: str) -> dict[str, str]:
    """What ``env -i HOME=... PATH=/usr/bin:/bin`` gives (and this checkout's PYTHONPATH,
    where the tests import the code from one)."""
    env = {"HOME": str(home), "PATH": "/usr/bin:/bin", **extra}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


@pytest.fixture
def store(tmp_path: Path) -> str:
    """A SQLite store holding examples/ledger.jsonl (build/sb-1 completed, build/sb-2
    running) and no environment record."""
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    done = run(["--store", url, "import", str(EXAMPLES)], clean_env(tmp_path))
    assert done.returncode == 0, done.stderr
    return url


# -- 3. One meaning per option ------------------------------------------------------------------


def test_export_output_json_is_the_format_not_a_file_named_json(store: str, tmp_path: Path) -> None:
    for option in (["--output", "json"], ["--json"], ["--json", "--output", "json"]):
        done = run(["--store", store, "export", *option], clean_env(tmp_path), cwd=tmp_path)
        assert done.returncode == 0, (option, done.stderr)
        lines = [json.loads(line) for line in done.stdout.splitlines()]
        assert len(lines) == 6 and lines[0]["event"] == "sandbox.created", option
        assert done.stderr.splitlines() == ["exported 6 entries of 2 session(s)"], option
        assert not (tmp_path / "json").exists(), option


def test_export_refuses_text_and_table_in_one_line_naming_the_file_option(
    store: str, tmp_path: Path
) -> None:
    for option in (["--output", "text"], ["--output", "table"], ["--json", "--output", "text"]):
        done = run(["--store", store, "export", *option], clean_env(tmp_path), cwd=tmp_path)
        assert done.returncode == 2, (option, done.stderr)
        [line] = done.stderr.splitlines()
        assert line.startswith("error: --"), line
        assert done.stdout == "" and sorted(p.name for p in tmp_path.iterdir()) == ["ledger.db"]
    text = run(["--store", store, "export", "--output", "text"], clean_env(tmp_path))
    assert "-o FILE" in text.stderr and "JSON lines" in text.stderr, text.stderr


def test_export_writes_a_file_with_o_or_file_and_still_with_an_older_output_file(
    store: str, tmp_path: Path
) -> None:
    env = clean_env(tmp_path)
    for option, name in ((["-o"], "a.jsonl"), (["--file"], "b.jsonl")):
        done = run(["--store", store, "export", *option, name], env, cwd=tmp_path)
        assert done.returncode == 0 and done.stdout == "", done.stderr
        assert len((tmp_path / name).read_text().splitlines()) == 6
    # An older script's `--output FILE` (no format by that name) still writes FILE, told of -o.
    done = run(["--store", store, "export", "--output", "c.jsonl"], env, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout == "", done.stderr
    assert (tmp_path / "c.jsonl").read_bytes() == (tmp_path / "a.jsonl").read_bytes()
    note, summary = done.stderr.splitlines()
    assert note.startswith("note: --output c.jsonl is the old spelling of -o c.jsonl"), note
    assert summary == "exported 6 entries of 2 session(s)"
    both = run(["--store", store, "export", "-o", "d.jsonl", "--output", "e.jsonl"], env)
    assert both.returncode == 2 and len(both.stderr.splitlines()) == 1, both.stderr


def test_every_option_has_one_meaning_across_the_commands() -> None:
    """An option string (long or short) names the same parameter on every command that
    has it: `-o` is export's file and nothing else's, `--output` the format everywhere."""
    meanings: dict[str, set[str]] = {}

    def walk(command: object, path: str) -> None:
        for param in getattr(command, "params", []):
            for opt in [*param.opts, *param.secondary_opts]:
                if opt.startswith("-"):
                    meanings.setdefault(opt, set()).add(str(param.name))
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, f"{path} {name}")

    walk(get_command(app), "sandbox-ledger")
    clashes = {opt: names for opt, names in meanings.items() if len(names) > 1}
    assert clashes == {}
    assert meanings["-o"] == {"file"} and meanings["--output"] == {"output"}


def test_a_query_result_prints_json_spellings_in_text(store: str, tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    query = "[cursor, `true`, `false`, sessions[?sandboxId=='sb-2'] | [0].completedAt]"
    done = run(["--store", store, "ls", "--query", query, "--output", "text"], env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "null\ttrue\tfalse\tnull\n"
    single = run(["--store", store, "ls", "--query", "cursor"], env)
    assert single.stdout == "null\n", single.stdout
    rows = run(["--store", store, "ls", "--query", "sessions[].[sandboxId, completedAt]"], env)
    assert rows.stdout.splitlines() == ["sb-2\tnull", "sb-1\t1796119207000"]
    as_json = run(["--store", store, "ls", "--query", "cursor", "--json"], env)
    assert as_json.stdout == "null\n"


def test_importing_a_missing_file_or_a_directory_is_one_error_line(tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    store = f"sqlite:///{tmp_path / 'ledger.db'}"
    (tmp_path / "folder").mkdir()
    for path, line in (
        ("nope.jsonl", "error: nope.jsonl: no such file"),
        ("folder", "error: folder: is a directory, not a file"),
    ):
        done = run(["--store", store, "import", path], env, cwd=tmp_path)
        assert (done.returncode, done.stderr.splitlines()) == (2, [line])
        assert done.stdout == ""
    assert not (tmp_path / "ledger.db").exists()  # refused before the store is opened


def test_no_command_reports_its_own_checks_as_a_click_usage_block() -> None:
    """The class of `import nope.jsonl`: a command's own checks raise CommandError or
    InvalidInputError (one `error:` line), never click's BadParameter (a usage block)."""
    folder = ROOT / "adapter" / "sandbox_ledger" / "cli"
    raising = [p.name for p in folder.glob("*.py") if "BadParameter" in p.read_text()]
    assert raising == []


def test_a_mistyped_option_command_or_value_is_one_error_line(store: str, tmp_path: Path) -> None:
    """click's own usage errors too, as the docs promise every error: one `error:` line
    naming the help to read, exit code 2; with no arguments at all, the help."""
    env = clean_env(tmp_path)
    for argv, said, help_of in (
        (["ls", "--bogus"], "No such option: --bogus", "sandbox-ledger ls"),
        (["ls", "--output", "yaml"], "'yaml'", "sandbox-ledger ls"),
        (["show", "build"], "Missing argument 'SANDBOX_ID'", "sandbox-ledger show"),
        (["lss"], "No such command 'lss'", "sandbox-ledger"),
    ):
        done = run(["--store", store, *argv], env)
        [line] = done.stderr.splitlines()
        assert done.returncode == 2 and line.startswith("error: ") and said in line, line
        assert line.endswith(f"(`{help_of} --help` lists what it takes)"), line
    bare = run([], env)
    assert bare.returncode == 2 and bare.stderr.startswith("Usage: sandbox-ledger [OPTIONS]")
    declined = run(["--store", store, "rm", "build", "sb-1"], env, stdin="n\n")
    assert declined.returncode == 1 and declined.stderr.splitlines()[-1] == "Aborted!"


def test_envs_on_a_store_without_records_says_there_are_none(store: str, tmp_path: Path) -> None:
    env = clean_env(tmp_path)
    text = run(["--store", store, "envs"], env)
    assert (text.returncode, text.stdout) == (0, "")  # stdout stays rows only
    assert text.stderr.splitlines() == ["0 environment record(s)"]
    table = run(["--store", store, "envs", "--output", "table"], env)
    assert table.returncode == 0 and table.stdout.splitlines()[-1] == "0 environment record(s)"
    assert run(["--store", store, "envs", "--json"], env).stdout == "[]\n"


# -- 5. Output that fits a terminal ---------------------------------------------------------------


def on_a_terminal(argv: list[str], env: dict[str, str], columns: int) -> tuple[int, str]:
    """Run with stdout on a pseudo-terminal ``columns`` wide: exit code, what it showed
    (without its colours)."""
    leader, follower = pty.openpty()
    process = popen(
        argv,
        {**env, "TERM": "xterm", "COLUMNS": str(columns)},
        stdout=follower,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    os.close(follower)
    seen = bytearray()
    while True:
        ready, _, _ = select.select([leader], [], [], 60)
        assert ready, "no output for 60 s"
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the terminal closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(leader)
    shown = re.sub(r"\x1b\[[0-9;]*m", "", seen.decode("utf-8", "replace"))
    return process.wait(timeout=60), shown.replace("\r\n", "\n")


TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


@pytest.mark.parametrize("columns", [80, 60])
def test_an_80_column_table_never_cuts_a_name_an_id_or_a_time(
    store: str, tmp_path: Path, columns: int
) -> None:
    env = clean_env(tmp_path)
    code, shown = on_a_terminal(["--store", store, "ls"], env, columns)
    assert code == 0, shown
    lines = shown.splitlines()
    assert all(cell_len(line) <= columns for line in lines), shown
    assert "…" not in shown, shown
    assert "│ build │ sb-2      │ 2026-12-01T11:00:00.000Z │" in shown, shown
    note = shown[shown.index("left out to fit") :].replace("\n", " ")
    assert note.startswith(f"left out to fit {columns} columns: status, ") and "execs" in note
    code, shown = on_a_terminal(["--store", store, "show", "build", "sb-1"], env, columns)
    assert code == 0 and "…" not in shown, shown
    assert all(cell_len(line) <= columns for line in shown.splitlines()), shown
    assert len(TIME.findall(shown)) == 5 and "sandbox.checkpoint_created" in shown, shown
    code, shown = on_a_terminal(["--store", store, "checkpoints", "build", "sb-1"], env, columns)
    assert code == 0 and "2026-12-01T10:00:06.000Z" in shown and "snap-1" in shown, shown


def test_the_demo_on_an_80_column_terminal_never_cuts_a_record_id(tmp_path: Path) -> None:
    code, shown = on_a_terminal(
        ["demo", "--sandboxes", "4", "--execs", "1"], clean_env(tmp_path), 80
    )
    assert code == 0, shown
    start = shown.index("Expired resource records")
    table = shown[start : shown.index("┘", start) + 1]
    ids = re.findall(r"^│ ([0-9a-f-]+) ", table, re.M)
    assert ids and all(len(i) == 36 for i in ids), table  # UUIDs, whole
    assert "…" not in table and all(cell_len(line) <= 80 for line in table.splitlines())


def test_a_table_that_fits_is_left_as_it_is(store: str, tmp_path: Path) -> None:
    code, shown = on_a_terminal(["--store", store, "ls"], clean_env(tmp_path), 120)
    assert code == 0 and "left out" not in shown and "│ execs │" not in shown, shown
    assert "┃ name  ┃ sandboxId ┃ status    ┃ started" in shown, shown


def test_fit_keeps_the_columns_naming_a_row_and_folds_free_text() -> None:
    from sandbox_ledger.cli.render import fit

    uuid = "0b7f6f4e-2f7a-4c55-9a59-3f1d7c2f8e10"
    columns = ("id", "phase", "provider", "pid", "updated", "operations", "workspace")
    row = [uuid, "running", "docker", "4242", "2026-12-01T11:00:00.000Z", "exec x3", "/w" * 30]
    fitted = fit(columns, [[Text(c) for c in row]], 80, ("pid", "provider"))
    kept = {c: w for c, w in zip(columns, fitted.widths, strict=True) if w is not None}
    assert kept["id"] == len(uuid) and kept["updated"] == 24
    assert sum(kept.values()) + 3 * len(kept) + 1 <= 80
    assert fitted.dropped[:2] == ["provider", "pid"] or fitted.dropped[:2] == ["pid", "provider"]
    # Nothing left but what names a row: never dropped (rich cuts it only then).
    narrow = fit(("name", "sandboxId"), [[Text("n" * 30), Text("s" * 30)]], 40)
    assert narrow.dropped == []
