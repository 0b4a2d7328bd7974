"""A record file written by ``resources export`` when a signal that ends
the process comes while its temporary file exists: none is left behind (as ``export -o``
removes its ``.partial`` on SIGTERM and SIGHUP)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

_CHILD = r"""
import os, signal, sys
from pathlib import Path
from sandbox_ledger.cli.interrupt import raise_on_sigterm
from sandbox_ledger.resources import files

raise_on_sigterm()  # as the console script starts
number = int(sys.argv[2])
real = files.os.chmod

def chmod(path, mode):
    os.kill(os.getpid(), number)  # the signal comes while the temporary file exists
    real(path, mode)

files.os.chmod = chmod
files._write_atomically(Path(sys.argv[1]) / "r1.json", "{}\n")
"""


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_a_record_file_is_written_leaves_no_temporary_file(
    tmp_path: Path, number: int
) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path), str(int(number))],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode != 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [], done.stderr
