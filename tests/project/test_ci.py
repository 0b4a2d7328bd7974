"""CI runs the README's commands as a new user's shell would (issue 41): with a cleared
environment, so no variable of the machine it runs on can hide a defect."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _ci_env(**extra: str) -> dict[str, str]:
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONPATH": "/nowhere",
        "AWS_REGION": "eu-west-1",
        "PIP_CERT": "/etc/ssl/certs/some-bundle.crt",
        "https_proxy": "http://proxy.internal:3128",
        **extra,
    }
    env.pop("SANDBOX_LEDGER_CI_CLEAN", None)
    done = subprocess.run(
        ["bash", str(ROOT / ".ci" / "run"), "--env"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return dict(line.split("=", 1) for line in done.stdout.splitlines() if "=" in line)


def test_ci_runs_in_a_cleared_environment() -> None:
    seen = _ci_env()
    for name in ("PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE", "PYTHONPATH", "AWS_REGION"):
        assert name not in seen, name
    assert seen["PATH"] == "/usr/local/bin:/usr/bin:/bin"
    assert seen["HOME"] == os.environ["HOME"]
    # What the package tools need to reach the registries is kept.
    assert seen["PIP_CERT"] == "/etc/ssl/certs/some-bundle.crt"
    assert seen["https_proxy"] == "http://proxy.internal:3128"
