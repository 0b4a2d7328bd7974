"""Mutation testing of the core with mutmut 3, one module at a time (``make mutation``).

mutmut 3 imports the code it mutates from ``./``, ``src/`` or ``source/`` of the directory it
runs in, under the module name its path gives. Our package lives in ``adapter/sandbox_ledger``
(module ``sandbox_ledger``), so each module runs in a generated workspace,
``.mutation/<module>/``: ``sandbox_ledger/`` (a copy of ``adapter/sandbox_ledger``), ``tests/``
(a copy) and ``pyproject.toml`` (ours, plus a ``[tool.mutmut]`` section naming the one module to
mutate and its fast tests). mutmut copies that into ``mutants/``, puts ``mutants/`` first on
``sys.path`` (ahead of the editable install's ``adapter/``), records which tests reach which
function, and runs only those tests against each mutant.

Usage: ``python tests/verification/mutation/run_mutmut.py [--in-process] [--sample N --seed S]
[--only GLOB ...] [module ...]`` (keys of ``MODULES``; all when none; ``--only`` runs only the
mutants whose names match a glob, e.g. ``'*x_append*'``, the others counted as not checked;
``--sample`` a uniform random sample of N of those, in process, seed S; ``--in-process`` runs
every mutant's tests in one process, ``in_process.py``, instead of a child per mutant, as the
modules whose tests need the moto server always are). Each module's counts are printed and
written to ``.mutation/<module>/result.json`` with the surviving mutants' names
(``cd .mutation/<module> && mutmut show NAME`` shows one).

The modules that run against DynamoDB share one moto server, in a process of its own started
here, named to every test session by ``SANDBOX_LEDGER_TEST_MOTO_ENDPOINT`` (a server per mutant's
session would cost seconds each).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from in_process import flag_value  # this folder, first on the path of a script run here

ROOT = Path(__file__).resolve().parents[3]
WORK = ROOT / ".mutation"

CONFORMANCE = ["tests/contract/test_memory_conformance.py", "tests/sql/test_sqlite_conformance.py"]
KILLS = "tests/verification/mutation"  # the tests written for mutants, and the tripwire
# Each mutant runs in a child forked from mutmut, which starts a test session of its own: a
# PostgreSQL or moto server per mutant would cost seconds each, so those cases are left out.
NO_SERVERS = ["-k", "not postgres"]
# The DynamoDB conformance suite on the async twin only (the sync twin and the one-shard table
# run the same operation generators), and the defect classes' scenarios: their other half
# patches functions by their source text, which mutmut rewrites.
DYNAMODB_ASYNC = [
    "tests/dynamodb/test_dynamodb_conformance.py",
    "-k",
    "not TestSyncDynamoDBAdapter and not TestShardedOne and not test_the_defect_is_caught",
]
# The importer's and exporter's tests, without PostgreSQL, the slow scale test, and the tests
# that run the code in a child process (from adapter/, which the workspace has not).
TRANSFER = [
    "tests/contract/test_transfer.py",
    "tests/contract/test_import_stream.py",
    "tests/contract/test_import_hot_path.py",
    "tests/contract/test_digest_encoder_edges.py",
    "tests/contract/test_digest_container_payloads.py",
    "tests/cli/test_cli_transfer.py",
    "-m",
    "not slow",
    "-k",
    "not postgres and not self_holding and not ctrl_c_as_an_import_starts",
]
PYTEST_ARGS = ["-p", "no:cacheprovider", "-p", "no:xdist", "-q"]

# Per module, the fast tests that exercise it: the conformance suite on memory and SQLite,
# and the module's own unit tests; nothing that needs the moto or PostgreSQL servers unless the
# module only runs against DynamoDB.
MODULES: dict[str, list[str]] = {
    "summary.py": [*CONFORMANCE, "tests/contract/test_models.py", KILLS],
    # The key formats are DynamoDB's, but their checks serve every store: the conformance
    # suite on memory and SQLite, and the kill tests for the formats themselves.
    "keys.py": [*CONFORMANCE, KILLS],
    "cursor.py": [*CONFORMANCE, "tests/resources/test_resources_models.py", KILLS],
    "models.py": [*CONFORMANCE, "tests/contract/test_models.py", KILLS],
    "sql/retention.py": [
        "tests/sql/test_sqlite_conformance.py",
        "tests/sql/test_sql_retention.py",
        *NO_SERVERS,
        KILLS,
    ],
    "resources/policy.py": ["tests/resources/test_resources_models.py", KILLS],
    "sql/rows.py": [
        "tests/sql/test_sqlite_conformance.py",
        "tests/sql/test_sqlite.py",
        "tests/sql/test_sql_schema.py",
        *NO_SERVERS,
        KILLS,
    ],
    # Export and import: the transfer contract on memory and SQLite, the importer's own tests
    # (their CLI half exports from and imports into a moto table), not the scale test.
    "transfer.py": [*CONFORMANCE, *TRANSFER, KILLS],
    "_import_stream.py": [*TRANSFER, KILLS],
    # The kill tests (pure conversions, run first as the fastest) and the DynamoDB conformance
    # suite, the only one that reaches the summary's update, checkpoints and environments.
    "dynamodb/_items.py": [*DYNAMODB_ASYNC, KILLS],
    "dynamodb/_ops.py": [
        *DYNAMODB_ASYNC,
        "tests/verification/test_defect_classes.py",
        "tests/contract/test_ledger_retention.py",
        KILLS,
    ],
    "resources/sweeper.py": ["tests/resources/test_resources_sweeper.py", KILLS],
    "resources/_ops.py": ["tests/resources/test_resources_store.py", KILLS],
    "resources/store.py": [
        "tests/resources/test_resources_store.py",
        "tests/resources/test_resources_expiry.py",
        KILLS,
    ],
}

# These run against the shared moto server.
ON_MOTO = {"dynamodb/_ops.py", "resources/_ops.py", "resources/store.py"}
ON_MOTO |= {"transfer.py", "_import_stream.py", "dynamodb/_items.py"}

# mutmut's exit codes, as its `results` command names them.
STATUS = {1: "killed", 3: "killed", 0: "survived", 5: "no tests", 33: "no tests", 36: "timeout"}
STATUS |= {-24: "timeout", 24: "timeout", 152: "timeout", 255: "timeout", None: "not checked"}


def workspace(module: str) -> Path:
    """A fresh workspace for ``module`` (a path under ``adapter/sandbox_ledger``)."""
    path = WORK / module.removesuffix(".py").replace("/", ".")
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(ROOT / "adapter" / "sandbox_ledger", path / "sandbox_ledger", ignore=ignore)
    shutil.copytree(ROOT / "tests", path / "tests", ignore=ignore)
    section = {
        "source_paths": ["sandbox_ledger"],
        "only_mutate": [f"sandbox_ledger/{module}"],
        # The tripwire patches functions by their source text, which mutmut rewrites.
        "pytest_add_cli_args": [
            *PYTEST_ARGS,
            "--ignore=tests/verification/mutation/test_tripwire.py",
        ],
        "pytest_add_cli_args_test_selection": MODULES[module],
        "use_git_change_detection": False,
        # A child forked from mutmut's process, which ran the tests once against the moto
        # server, can hang on a botocore error path: those fork from a clean fork server.
        "process_isolation": "forkserver" if module in ON_MOTO else "fork",
    }
    lines = [f"{key} = {json.dumps(value)}" for key, value in section.items()]
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    text = pyproject + "\n[tool.mutmut]\n" + "\n".join(lines) + "\n"
    (path / "pyproject.toml").write_text(text, encoding="utf-8")
    return path


def counts(path: Path, module: str) -> dict[str, object]:
    meta = path / "mutants" / "sandbox_ledger" / f"{module}.meta"
    exit_codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
    statuses = {name: STATUS.get(code, "suspicious") for name, code in exit_codes.items()}
    tally = Counter(statuses.values())
    return {
        "module": module,
        "generated": len(statuses),
        **{status: tally.get(status, 0) for status in ("killed", "survived", "no tests")},
        "not checked": tally.get("not checked", 0),
        "timeout": tally.get("timeout", 0),
        "other": sum(n for s, n in tally.items() if s not in STATUS.values()),
        "survivors": sorted(n for n, s in statuses.items() if s in {"survived", "no tests"}),
    }


@contextlib.contextmanager
def moto_server() -> Iterator[str]:
    from sandbox_ledger.local import LocalDynamoDBProcess

    server = LocalDynamoDBProcess()
    try:
        yield server.start()
    finally:
        server.stop()


def run(
    module: str, only: list[str], in_process: bool = False, sample: list[str] | None = None
) -> dict[str, object]:
    path = workspace(module)
    mutmut = Path(sys.executable).with_name("mutmut")
    children = os.environ.get("MUTATION_CHILDREN", "2")
    command = ["nice", "-n", "15", str(mutmut), "run", "--max-children", children, *only]
    if in_process or sample or module in ON_MOTO:  # mutmut's forked children hang on moto
        driver = Path(__file__).with_name("in_process.py")
        command = ["nice", "-n", "15", sys.executable, str(driver), *(sample or []), *only]
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": ""}
    with contextlib.ExitStack() as stack:
        if module in ON_MOTO:
            env["SANDBOX_LEDGER_TEST_MOTO_ENDPOINT"] = stack.enter_context(moto_server())
        return _run(module, path, command, env)


def _run(module: str, path: Path, command: list[str], env: dict[str, str]) -> dict[str, object]:
    log = path / "run.log"  # the run's progress, one line per mutant in process
    with log.open("w") as out:
        done = subprocess.run(command, cwd=path, env=env, stdout=out, stderr=out, check=False)
    if done.returncode != 0:  # e.g. a test that fails without any mutant
        print(log.read_text(errors="replace")[-6000:], file=sys.stderr)
        raise SystemExit(f"mutmut failed on {module} (exit {done.returncode}) in {path}")
    result = counts(path, module)
    (path / "result.json").write_text(json.dumps(result, indent=2) + "\n")
    return result


def main(argv: list[str]) -> int:
    in_process = argv[:1] == ["--in-process"]
    argv = argv[1:] if in_process else argv
    sample: list[str] = []
    while argv[:1] in (["--sample"], ["--seed"]):
        if flag_value(argv[0], argv[1:2]) is None:
            return 2
        sample, argv = [*sample, *argv[:2]], argv[2:]
    only = []
    while len(argv) >= 2 and argv[0] == "--only":
        only.append(argv[1])
        argv = argv[2:]
    unknown = [m for m in argv if m not in MODULES]
    if unknown:
        print(f"unknown module(s) {unknown}; choose among {sorted(MODULES)}", file=sys.stderr)
        return 2
    print("| module | generated | killed | survived | no tests | timed out |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for module in argv or list(MODULES):
        r = run(module, only, in_process, sample)
        cells = [r["generated"], r["killed"], r["survived"], r["no tests"], r["timeout"]]
        print(f"| {module} | " + " | ".join(str(c) for c in cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
