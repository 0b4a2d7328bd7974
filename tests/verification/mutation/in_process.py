"""Run one workspace's mutants in one process (``run_mutmut.py --in-process``).

mutmut 3 forks a child per mutant from a process that ran the tests once. Against the moto
server those children hang on a botocore error path, and a fork server's fresh children
import boto3, moto's client side and the test modules again: about 15 s a mutant on the
shared machine. mutmut's trampolines choose the function to run by the active mutant's name at
each call, so one process can run every mutant's tests in turn: mutmut generates the mutants
and records which tests reach each function (its stats run, in this process), then each mutant
is made active and its tests run with ``pytest.main`` here, ``-x``, the modules already
imported. A mutant whose tests run past three times their clean duration plus ``--timeout``
seconds (10 by default) is stopped by an alarm and counted as timed out (mutmut's exit code 36).
A mutant whose test session raises instead of ending (pytest raises at the session's end a
coroutine the mutant left never awaited, an error under ``filterwarnings = error``, which fails
``make test`` too) is counted as killed, the error printed in the log, and the run goes on.

Two adjustments, for this process only: botocore's backoff between retries is made zero (a
mutant that makes DynamoDB refuse a request as invalid, which moto answers with a 500, fails
after the SDK's ten attempts in milliseconds instead of a minute of backoff; the attempts and
what is retried are unchanged), and a mutant cannot leave ``os.environ`` changed for the next.

``--sample N --seed S`` runs a uniform random sample of N of the mutants the globs select
(``random.Random(S).sample`` over their sorted names); the others are left not checked. A
module too slow to measure whole is measured on such a sample, and the score is the sample's.

Run from a workspace that ``run_mutmut.workspace`` made (its ``pyproject.toml`` names the
module and the tests): ``python in_process.py [--timeout S] [--sample N --seed S] [GLOB ...]``.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from pathlib import Path
from types import FrameType

# The exit codes mutmut's `results` reads: 1 killed, 0 survived, 33 no tests, 36 timed out.
KILLED, SURVIVED, NO_TESTS, TIMEOUT = 1, 0, 33, 36


class MutantTimeout(BaseException):
    """Raised by the alarm in the mutant's test, which then fails; not an ``Exception``, so
    that code which goes on after an error (a sweep, a retry loop) does not swallow it."""


def _no_backoff() -> None:
    from botocore.retries import standard

    standard.ExponentialBackoff.delay_amount = lambda self, context: 0.0


def flag_value(flag: str, value: list[str]) -> int | None:
    """The whole number given after ``flag`` (``--sample`` at least 1), or None once a
    one-line usage error naming the flag is printed."""
    least = 1 if flag == "--sample" else 0
    if value and value[0].isascii() and value[0].isdigit() and int(value[0]) >= least:
        return int(value[0])
    given = f"got {value[0]!r}" if value else "got nothing"
    print(f"{flag} needs a whole number of at least {least}; {given}", file=sys.stderr)
    return None


def main(argv: list[str]) -> int:
    margin, sample, seed = 10, 0, 0
    while argv[:1] in (["--timeout"], ["--sample"], ["--seed"]):
        value = flag_value(argv[0], argv[1:2])
        if value is None:
            return 2
        if argv[0] == "--timeout":
            margin = value
        elif argv[0] == "--sample":
            sample = value
        else:
            seed = value
        argv = argv[2:]
    globs = argv

    from mutmut.__main__ import (
        collect_or_load_stats,
        collect_source_file_mutation_data,
        create_mutants,
        store_lines_covered_by_tests,
    )
    from mutmut.mutation.trampoline import set_mutant_under_test
    from mutmut.runners.harness import PytestRunner
    from mutmut.state import state
    from mutmut.utils.file_utils import copy_also_copy_files, copy_src_dir, setup_source_paths
    from mutmut.utils.format_utils import mangled_name_from_mutant_name
    from mutmut.workers.isolation import ForkRunner

    set_mutant_under_test("mutant_generation")
    Path("mutants").mkdir(exist_ok=True)
    copy_src_dir()
    copy_also_copy_files()
    setup_source_paths()
    store_lines_covered_by_tests()
    create_mutants(1)
    _no_backoff()

    tests_runner = PytestRunner()
    collect_or_load_stats(ForkRunner(max_workers=1, test_runner=tests_runner))
    mutants, _ = collect_source_file_mutation_data(mutant_names=globs)
    if sample > len(mutants):
        print(f"--sample {sample}: only {len(mutants)} mutants to choose from", file=sys.stderr)
        return 2
    if sample:
        chosen = random.Random(seed).sample(sorted(name for _, name, _ in mutants), sample)
        rank = {name: i for i, name in enumerate(chosen)}
        # In the sample's own order: the first k run are a uniform sample of k, should the run
        # be stopped early.
        mutants = sorted((m for m in mutants if m[1] in rank), key=lambda m: rank[m[1]])
        print(f"a sample of {sample} mutants, seed {seed}: {chosen}", flush=True)

    set_mutant_under_test("")
    if tests_runner.run_tests(mutant_name=None, tests=[]) != 0:
        print("the tests fail without any mutant", file=sys.stderr)
        return 1

    def alarm(signum: int, frame: FrameType | None) -> None:
        signal.alarm(1)  # again each second, until the mutant's tests have stopped
        raise MutantTimeout("the mutant ran past its time")

    signal.signal(signal.SIGALRM, alarm)
    environ = dict(os.environ)
    started = time.monotonic()
    for done, (data, name, _) in enumerate(mutants, 1):
        tests = state().tests_by_mangled_function_name.get(mangled_name_from_mutant_name(name))
        if not tests:
            data.exit_code_by_key[name] = NO_TESTS
            data.save()
            continue
        durations = state().duration_by_test
        timeout = int(3 * sum(durations.get(t, 0.0) for t in tests)) + margin
        set_mutant_under_test(name)
        signal.alarm(timeout)
        started_at = time.monotonic()
        try:
            # The fastest first: a killed mutant stops at its first failing test (-x).
            ordered = sorted(tests, key=lambda t: (durations.get(t, 0.0), t))
            code = tests_runner.run_tests(mutant_name=name, tests=ordered)
        except MutantTimeout:
            code = TIMEOUT
        except Exception as exc:
            # pytest raises out of its session what it finds at the end, e.g. a coroutine the
            # mutant left never awaited, which `filterwarnings = error` makes an error: the
            # same error fails `make test`, so the mutant is killed; the run goes on.
            print(f"{name}: its test session ended in an error: {exc!r}", flush=True)
            code = KILLED
        finally:
            signal.alarm(0)
            os.environ.clear()
            os.environ.update(environ)
        # The alarm can fire inside a test, which pytest reports as failed.
        late = time.monotonic() - started_at >= timeout
        data.exit_code_by_key[name] = TIMEOUT if late else (SURVIVED if code == 0 else KILLED)
        data.save()
        elapsed = time.monotonic() - started
        print(f"[{done}/{len(mutants)} {elapsed:.0f}s] {name}: {data.exit_code_by_key[name]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
