"""Store URLs (open_store) and the CLI on every store: export | import between each pair."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from typer.testing import CliRunner

from sandbox_ledger import (
    EnvironmentRecord,
    InvalidInputError,
    LedgerEntry,
    LedgerEvent,
    MemoryAdapter,
    open_store,
)
from sandbox_ledger.cli import app
from sandbox_ledger.dynamodb import DynamoDBAdapter
from sandbox_ledger.postgres import PostgresAdapter
from sandbox_ledger.sqlite import SQLiteAdapter
from sandbox_ledger.stores import parse_store_url
from sandbox_ledger.testing import EXOTIC_PAYLOADS
from sandbox_ledger.transfer import entry_line


@pytest.mark.parametrize(
    ("url", "kind", "kwargs"),
    [
        ("memory://", "memory", {}),
        ("sqlite:///ledger.db", "sqlite", {"path": "ledger.db"}),
        ("sqlite:////var/data/ledger.db", "sqlite", {"path": "/var/data/ledger.db"}),
        ("sqlite:///:memory:", "sqlite", {"path": ":memory:"}),
        ("sqlite:///a%20b.db?busy_timeout=2", "sqlite", {"path": "a b.db", "busy_timeout": 2.0}),
        ("postgresql://u@h:5432/db", "postgresql", {"dsn": "postgresql://u@h:5432/db"}),
        (
            "postgres://u:pw@h/db?schema=ledger_a&sslmode=require",
            "postgresql",
            {"dsn": "postgresql://u:pw@h/db?sslmode=require", "schema": "ledger_a"},
        ),
        ("dynamodb://my-table", "dynamodb", {"table_name": "my-table"}),
        (
            "dynamodb://t1?region=eu-west-1&endpoint_url=http%3A%2F%2F127.0.0.1%3A4566",
            "dynamodb",
            {
                "table_name": "t1",
                "region_name": "eu-west-1",
                "endpoint_url": "http://127.0.0.1:4566",
            },
        ),
    ],
)
def test_store_urls(url: str, kind: str, kwargs: dict[str, Any]) -> None:
    assert parse_store_url(url) == (kind, kwargs)


@pytest.mark.parametrize(
    "url",
    [
        "postgresql://",  # libpq's defaults (PGHOST, PGDATABASE, ...)
        "postgresql:///ledger",  # a Unix socket in libpq's default folder
        "postgresql:///ledger?host=%2Fvar%2Frun%2Fpostgresql&schema=x1",
        "postgresql://u@h/db?application_name=nightly%20import",
        "postgresql://u:p%40ss@h:5432/db?options=-c%20statement_timeout%3D5000&retention_days=3",
        "postgresql://u@h/db?password=p+q&application_name=a+b%2Bc",  # '+' is a plus to libpq
    ],
)
def test_postgres_urls_reach_libpq_with_their_meaning(url: str) -> None:
    """What libpq reads from the store's DSN is what it reads from the URL (the adapter's own
    options aside): no host is not a broken string, a space is not a '+'."""
    from psycopg.conninfo import conninfo_to_dict

    _, kwargs = parse_store_url(url)
    own = {"schema", "retention_days"}
    bare = url.split("?")[0]
    rest = [p for p in url.partition("?")[2].split("&") if p and p.split("=")[0] not in own]
    expected = conninfo_to_dict(bare + ("?" + "&".join(rest) if rest else ""))
    assert conninfo_to_dict(kwargs["dsn"]) == expected


def test_open_store_gives_each_adapter() -> None:
    assert isinstance(open_store("memory://"), MemoryAdapter)
    assert isinstance(open_store("sqlite:///:memory:"), SQLiteAdapter)
    pg = open_store("postgresql://u@127.0.0.1/db?schema=x1")
    assert isinstance(pg, PostgresAdapter) and pg.schema == "x1"
    assert isinstance(open_store("dynamodb://tbl?region=us-east-1"), DynamoDBAdapter)
    retained = open_store("dynamodb://tbl?region=us-east-1&retention_days=30")
    assert isinstance(retained, DynamoDBAdapter) and retained.retention == timedelta(days=30)
    assert open_store("dynamodb://tbl?region=us-east-1").retention is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("ledger.db", "not a store URL"),
        ("mysql://h/db", "unknown scheme 'mysql'"),
        ("sqlite://", "no database path"),
        ("sqlite://host/x.db", "no host"),
        ("sqlite:///x.db?journal=off", "unknown option"),
        ("sqlite:///x.db?busy_timeout=soon", "busy_timeout must be a number"),
        ("sqlite:///x.db?busy_timeout=nan", "busy_timeout must be a finite number"),
        ("sqlite:///x.db?busy_timeout=-5", "busy_timeout must be a finite number of at least 0"),
        ("dynamodb://t?shard_count=inf", "shard_count must be a finite number"),
        ("dynamodb://t?shard_count=2.9", "shard_count must be a whole number"),
        ("dynamodb://t?shard_count=0", "shard_count must be a whole number of at least 1"),
        ("dynamodb://t?retention_days=0", "retention_days must be a whole number of at least 1"),
        ("dynamodb://", "no table name"),
        ("dynamodb://t/extra", "table name only"),
        ("dynamodb://t?colour=red", "unknown option"),
        ("memory://x", "takes no name"),
        ("sqlite:///x.db?busy_timeout=1&busy_timeout=2", "busy_timeout given more than once"),
        ("postgresql://h/db?schema=a&schema=b", "schema given more than once"),
        ("dynamodb://t?region=eu-west-1&region=us-east-1", "region given more than once"),
        ("postgresql://u:hunter2@h/db?schema=Bad-Name", "not a plain lowercase identifier"),
    ],
)
def test_bad_store_urls_are_clear_errors(url: str, message: str) -> None:
    with pytest.raises(InvalidInputError, match=message) as caught:
        open_store(url)
    assert caught.value.field == "store"
    assert "hunter2" not in str(caught.value)


async def test_memory_store_is_the_reference() -> None:
    store = open_store("memory://")
    await store.append(
        LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=-1, event="sandbox.created")
    )
    assert len(await store.list_all_sandbox_details()) == 1


# -- the CLI on every store -----------------------------------------------------------------


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/ledger.db"


@pytest.fixture
def sqlite_url_2(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path}/other.db"


@pytest.fixture
def postgres_url(postgres_dsn: str, pg_schema: str) -> str:
    return f"{postgres_dsn}?schema={pg_schema}"


@pytest.fixture
def postgres_url_2(postgres_dsn: str, pg_schema: str) -> str:
    return f"{postgres_dsn}?schema={pg_schema}_b"


@pytest.fixture
def dynamodb_url(moto_endpoint: str, sync_table: str, monkeypatch: pytest.MonkeyPatch) -> str:
    # Region and endpoint come from the usual AWS settings.
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_endpoint)
    return f"dynamodb://{sync_table}"


@pytest.fixture
def dynamodb_url_2(moto_endpoint: str, table_name: str) -> str:
    from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

    with SyncDynamoDBAdapter(table_name + "-b", endpoint_url=moto_endpoint) as adapter:
        adapter.create_table()
    return f"dynamodb://{table_name}-b?endpoint_url={quote(moto_endpoint, safe='')}"


def _ledger() -> list[LedgerEntry]:
    out: list[LedgerEntry] = []
    for n, (name, sandbox_id) in enumerate(
        [("build", "sb-1"), ("build", "sb-2"), ("名前 ✓#a/b", "🚀#1")]
    ):
        start = 1_700_000_000_000 + n * 1000

        def add(
            event: str, ts: int, name: str = name, sandbox_id: str = sandbox_id, **kw: Any
        ) -> None:
            out.append(
                LedgerEntry(
                    ts=ts,
                    name=name,
                    sandbox_id=sandbox_id,
                    step_index=kw.pop("step", -1),
                    event=event,
                    **kw,
                )
            )

        add(LedgerEvent.SandboxCreated, start, payload={"image": "python:3.11"})
        # A few exotic payloads per session, all of them across the ledger.
        for i, payload in enumerate(EXOTIC_PAYLOADS[n::3]):
            add(LedgerEvent.ExecStarted, start + 1, step=i, branch=i % 2)  # equal ts: order kept
            add(LedgerEvent.ExecComplete, start + 2 + i, step=i, payload=payload)
        add(LedgerEvent.ExecFailed, start + 40, step=99, error="exit 2")
        add(LedgerEvent.CheckpointCreated, start + 50, payload={"snapshotId": f"snap-{n}"})
        if n % 2 == 0:
            add(LedgerEvent.SandboxClosed, start + 60)
        if n == 1:
            # A second created, earlier in time but appended later: startedAt stays the
            # first appended, so only an export in append order moves it unchanged.
            add(LedgerEvent.SandboxCreated, start - 500, payload={"again": True})
    # A session that was never created: not listed, yet its entries are exported and moved.
    for step in range(2):
        orphan = {"name": "orphan ✓", "sandbox_id": "never-created"}
        out.append(LedgerEntry(ts=5, step_index=step, event=LedgerEvent.ExecStarted, **orphan))
        out.append(
            LedgerEntry(
                ts=4, step_index=step, event=LedgerEvent.ExecComplete, payload=[step], **orphan
            )
        )
    return out


def _environments() -> list[EnvironmentRecord]:
    """Records as a builder saves them: extra fields (null values, nested, unicode), and
    equal builtAt saved out of name order (their listing order is first-saved)."""
    wire: list[dict[str, Any]] = [
        {"name": "py", "builtAt": 1},
        {"name": "node", "builtAt": 7, "snapshotId": None, "image": {"tag": "20", "layers": []}},
        {"name": "zeta ✓", "builtAt": 7, "note": "ünïcode 🚀", "size": 1.5e-7, "ok": True},
        {"name": "alpha", "builtAt": 7, "snapshotId": "snap-a", "extra": [None, 1, "x"]},
    ]
    return [EnvironmentRecord.model_validate(w) for w in wire]


async def _seed(url: str) -> None:
    store = open_store(url)
    try:
        for entry in _ledger():
            await store.append(entry)
        for record in _environments():
            await store.save_environment(record)
    finally:
        await store.close()


async def _snapshot(url: str) -> Any:
    store = open_store(url)
    try:
        return await _snapshot_of(store)
    finally:
        await store.close()


async def _snapshot_of(store: Any) -> Any:
    """Everything a store holds: listed sessions, every session with entries (listed or not)
    with its entries in read order and in append order, and its checkpoints."""
    details = await store.list_all_sandbox_details()
    sessions = await store.scan_sessions()
    entries = {key: await store.read_all(*key) for key in sessions}
    appended = {key: await store.read_in_append_order(*key) for key in sessions}
    checkpoints = {key: await store.list_checkpoints(*key) for key in entries}
    environments = [r.wire() for r in await store.list_environments()]
    return details, entries, appended, checkpoints, environments


STORES = ["sqlite_url", "postgres_url", "dynamodb_url"]
SECOND = {
    "sqlite_url": "sqlite_url_2",
    "postgres_url": "postgres_url_2",
    "dynamodb_url": "dynamodb_url_2",
}


@pytest.mark.parametrize("source", STORES)
@pytest.mark.parametrize("destination", STORES)
def test_export_pipe_import_moves_a_ledger(
    request: pytest.FixtureRequest,
    source: str,
    destination: str,
    monkeypatch: pytest.MonkeyPatch,
    wait_for_indexes: Callable[[], None],
) -> None:
    monkeypatch.delenv("SANDBOX_LEDGER_TABLE", raising=False)
    a = request.getfixturevalue(source)
    b = request.getfixturevalue(SECOND[destination] if source == destination else destination)
    asyncio.run(_seed(a))
    runner = CliRunner()
    exported = runner.invoke(app, ["export", "--store", a])
    assert exported.exit_code == 0, exported.output
    lines = exported.stdout
    n, envs = len(_ledger()), len(_environments())
    assert len(lines.splitlines()) == n + envs
    assert f"exported {n} entries of 4 session(s) and {envs} environment record(s)" in (
        exported.stderr
    )
    # A second import of the same lines adds nothing, environments included.
    for new, present, env in (
        (n, 0, f"{envs} new, 0 updated, 0 already present"),
        (0, n, f"0 new, 0 updated, {envs} already present"),
    ):
        imported = runner.invoke(app, ["import", "--store", b, "-"], input=lines)
        assert imported.exit_code == 0, imported.output
        assert (
            f"<stdin>: {new} new, {present} already present, 0 expired, 0 failed" in imported.stderr
        )
        assert f"; environments: {env}, 0 not newer than the store's" in imported.stderr
    wait_for_indexes()  # settled listings (index lag waited out)
    before, after = asyncio.run(_snapshot(a)), asyncio.run(_snapshot(b))
    assert after == before
    details, entries, appended, _, environments = after
    # Exactly as saved (null values and nested extras kept), in the same listing order.
    assert sorted(environments, key=lambda w: w["name"]) == sorted(
        (r.wire() for r in _environments()), key=lambda w: w["name"]
    )
    assert [w["name"] for w in environments] == ["node", "zeta ✓", "alpha", "py"]
    assert len(details) == 3  # the never-created session is not listed ...
    assert len(entries) == 4  # ... but it moved with the others
    assert sum(len(e) for e in entries.values()) == len(_ledger())
    for key, in_order in appended.items():
        assert in_order == [e for e in _ledger() if (e.name, e.sandbox_id) == key]
    again = runner.invoke(app, ["export", "--store", b])
    assert again.exit_code == 0 and again.stdout == lines  # byte-identical round trip
    by_name = runner.invoke(app, ["export", "--store", a, "--name", "orphan ✓"])
    assert by_name.exit_code == 0 and len(by_name.stdout.splitlines()) == 4


def test_the_memory_store_exports_every_session(tmp_path: Path) -> None:
    """The memory store (one process, so no pipe): sessions without sandbox.created are
    exported in append order and re-imported equal."""
    from rich.console import Console

    from sandbox_ledger.blocking import BlockingAdapter
    from sandbox_ledger.cli.transfer import export_to, import_from

    source, destination = MemoryAdapter(), MemoryAdapter()

    async def seed() -> None:
        for entry in _ledger():
            await source.append(entry)
        for record in _environments():
            await source.save_environment(record)

    asyncio.run(seed())
    err = Console(stderr=True)
    path = tmp_path / "ledger.jsonl"
    counts = export_to(BlockingAdapter(source), name=None, sandbox_id=None, output=path, err=err)
    assert counts == (
        4,
        len(_ledger()),
        len(_environments()),
        len(_ledger()) + len(_environments()),
    )
    with path.open("rb") as stream:
        report = import_from(BlockingAdapter(destination), stream, label="x", err=err)
    assert report.summary() == (
        f"{len(_ledger())} new, 0 already present, 0 expired, 0 failed; "
        "environments: 4 new, 0 updated, 0 already present, 0 not newer than the store's"
    )
    before, after = asyncio.run(_snapshot_of(source)), asyncio.run(_snapshot_of(destination))
    assert after == before and len(after[1]) == 4


@pytest.mark.parametrize("store", [*STORES, "memory"])
def test_every_ledger_command_works_on_every_store(
    request: pytest.FixtureRequest, store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SANDBOX_LEDGER_TABLE", raising=False)
    url = "memory://" if store == "memory" else request.getfixturevalue(store)
    if store != "memory":
        asyncio.run(_seed(url))
    # The environment variable names the store as --store does.
    monkeypatch.setenv("SANDBOX_LEDGER_STORE", url)
    runner = CliRunner()
    expect = 3 if store != "memory" else 0
    table = ["--output", "table"]  # the summary lines under the table
    ls = runner.invoke(app, ["ls", *table])
    assert ls.exit_code == 0, ls.output
    assert f"{expect} session(s)" in ls.stdout
    ls_done = runner.invoke(app, ["ls", "--name", "build", "--status", "completed", *table])
    assert ls_done.exit_code == 0 and f"{1 if expect else 0} session(s)" in ls_done.stdout
    show = runner.invoke(app, ["show", "build", "sb-1", "--json"])
    assert show.exit_code == (0 if expect else 3), show.output  # a missing session fails
    sb1 = [e for e in _ledger() if e.sandbox_id == "sb-1"]
    assert len(show.stdout.splitlines()) == (len(sb1) if expect else 0)
    checkpoints = runner.invoke(app, ["checkpoints", "build", "sb-1", *table])
    assert checkpoints.exit_code == (0 if expect else 3)  # a missing session fails, as show
    assert ("1 checkpoint(s)" in checkpoints.stdout) == bool(expect)
    envs = runner.invoke(app, ["envs"])
    assert envs.exit_code == 0 and ("py" in envs.stdout) == bool(expect)
    rm = runner.invoke(app, ["rm", "build", "sb-1", "--yes"])
    # memory:// lives as long as the command: a write there is refused (usage error)
    assert rm.exit_code == (0 if expect else 2), rm.output
    after = runner.invoke(app, ["ls", *table])
    assert f"{max(expect - 1, 0)} session(s)" in after.stdout


def test_dynamodb_only_commands_refuse_other_stores(sqlite_url: str) -> None:
    runner = CliRunner()
    # `table create` is no longer one: on a SQL store it creates or migrates the schema
    # (tests/cli/test_cli_habits.py, the older-schema test).
    for command in (["resources", "ls"], ["demo", "--sandboxes", "1"]):
        result = runner.invoke(app, ["--store", sqlite_url, *command])
        assert result.exit_code == 2
        assert "needs a DynamoDB store" in result.output
    both = runner.invoke(app, ["--store", sqlite_url, "--table", "t", "ls"])
    assert both.exit_code == 2 and "give one, not both" in both.output
    bad = runner.invoke(app, ["--store", "mysql://x", "ls"])
    assert bad.exit_code == 2 and "unknown scheme" in bad.output


@pytest.mark.parametrize(
    ("url", "missing", "extra"),
    [
        ("sqlite:///:memory:", "aiosqlite", "sqlite"),
        ("postgresql://127.0.0.1/db", "psycopg", "postgres"),
        ("postgresql://127.0.0.1/db", "psycopg_pool", "postgres"),
    ],
)
async def test_a_missing_driver_names_its_extra(
    url: str, missing: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    from sandbox_ledger import ConfigurationError

    monkeypatch.setitem(sys.modules, missing, None)  # as if the extra were not installed
    store = open_store(url)
    with pytest.raises(
        ConfigurationError, match=rf"pip install 'sandbox-ledger-dynamodb\[{extra}\]'"
    ):
        await store.list_environments()


def test_the_readme_pipe_between_real_processes(tmp_path: Path) -> None:
    """The shell pipe itself (real stdin and stdout, unicode payloads), SQLite to SQLite."""
    import shlex
    import subprocess
    import sys

    a, b = f"sqlite:///{tmp_path}/a.db", f"sqlite:///{tmp_path}/b.db"
    asyncio.run(_seed(a))
    cli = shlex.quote(str(Path(sys.executable).parent / "sandbox-ledger"))
    done = subprocess.run(
        ["bash", "-o", "pipefail", "-c", f"{cli} export --store {a} | {cli} import --store {b} -"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert (
        f"imported <stdin>: {len(_ledger())} new, 0 already present, 0 expired, 0 failed"
        in done.stderr
    )
    assert asyncio.run(_snapshot(b)) == asyncio.run(_snapshot(a))


def test_an_explicit_store_wins_over_an_exported_table(
    sqlite_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    asyncio.run(_seed(sqlite_url))
    monkeypatch.setenv("SANDBOX_LEDGER_TABLE", "some-deployed-table")
    runner = CliRunner()
    before = runner.invoke(app, ["--store", sqlite_url, "ls", "--output", "table"])
    assert before.exit_code == 0, before.output
    # The flag after the command.
    after = runner.invoke(app, ["ls", "--store", sqlite_url, "--output", "table"])
    assert after.exit_code == 0, after.output
    assert "3 session(s)" in before.stdout and "3 session(s)" in after.stdout
    monkeypatch.setenv("SANDBOX_LEDGER_STORE", sqlite_url)  # both variables: ambiguous
    both = runner.invoke(app, ["ls"])
    assert both.exit_code == 2 and "SANDBOX_LEDGER_TABLE" in both.output


@pytest.mark.parametrize("url", ["memory://", "sqlite:///:memory:"])
@pytest.mark.parametrize(
    "argv", [["import", "-"], ["rm", "build", "sb-1", "--yes"]], ids=["import", "rm"]
)
def test_write_commands_refuse_a_store_that_ends_with_the_command(
    url: str, argv: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write into memory:// or an in-memory SQLite database would report success and be
    gone when the command ends: refused with one line naming what to use, nothing read."""
    monkeypatch.delenv("SANDBOX_LEDGER_TABLE", raising=False)
    monkeypatch.delenv("SANDBOX_LEDGER_STORE", raising=False)
    line = entry_line(_ledger()[0]) + "\n"
    done = CliRunner().invoke(app, ["--store", url, *argv], input=line)
    assert done.exit_code == 2, done.output
    [message] = done.stderr.splitlines()
    assert "lives only as long as this command" in message and "sqlite:///ledger.db" in message
    assert "new" not in done.output


def test_a_sqlite_url_under_home_opens_the_file_there(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite:///~/x.db is the file under the home folder, for the folder check and the open
    alike (the check expanded ~ while the open did not, so it failed)."""
    monkeypatch.setenv("HOME", str(tmp_path))

    async def write() -> None:
        async with open_store("sqlite:///~/ledger.db") as ledger:
            await ledger.append(_ledger()[0])

    asyncio.run(write())
    assert (tmp_path / "ledger.db").is_file()
