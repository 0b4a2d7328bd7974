"""Lambda bundling without docker: pip with a target platform, run by CDK locally."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsii
from aws_cdk import ILocalBundling

import sandbox_ledger

LIBRARY = Path(sandbox_ledger.__file__).resolve().parent
HANDLERS = ("expire_stale_resources", "on_ttl_expiry")


def entry_points() -> Path:
    """The folder of the handlers' entry modules: the wheel ships them inside this package,
    a source checkout has them in its top-level ``lambdas/``."""
    here = Path(__file__).resolve().parent
    shipped = here / "lambdas"
    return shipped if shipped.is_dir() else here.parents[1] / "lambdas"


# What the handlers import at run time, exact (boto3/botocore come with the Lambda runtime),
# and what Powertools' Tracer adds when tracing is on: the same commit always ships the same
# packages, whatever the index holds by then.
RUNTIME_LOCK = Path(__file__).resolve().parent / "lambda-requirements.txt"
TRACING_LOCK = Path(__file__).resolve().parent / "lambda-tracing-requirements.txt"


@jsii.implements(ILocalBundling)
class PipBundling:
    """Installs the handlers' dependencies for ``platform`` and copies the library and the
    handlers next to them. The asset hash comes from this output, so a library edit changes
    the asset and redeploys the functions."""

    def __init__(
        self,
        *,
        python_version: str,
        platform: str = "manylinux2014_aarch64",
        tracing: bool = False,
    ) -> None:
        self.python_version = python_version
        self.platform = platform
        self.tracing = tracing

    def try_bundle(self, output_dir: str, *, image: Any = None, **_: Any) -> bool:
        out = Path(output_dir)
        self._pip(out, ("-r", str(RUNTIME_LOCK)), "--no-deps")
        if self.tracing:
            self._pip(out, ("-r", str(TRACING_LOCK)), "--no-deps")
        shutil.copytree(
            LIBRARY,
            out / "sandbox_ledger",
            ignore=shutil.ignore_patterns("__pycache__", "cli", "testing"),
            dirs_exist_ok=True,
        )
        for handler in HANDLERS:
            shutil.copytree(
                entry_points() / handler,
                out / handler,
                ignore=shutil.ignore_patterns("__pycache__"),
                dirs_exist_ok=True,
            )
        return True

    def _pip(self, out: Path, requirements: tuple[str, ...], *options: str) -> None:
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-compile",  # no bytecode of the build host's Python in the asset
                "--platform",
                self.platform,
                "--only-binary=:all:",
                "--python-version",
                self.python_version,
                "--implementation",
                "cp",
                "--target",
                str(out),
                *options,
                *requirements,
            ],
            capture_output=True,
            text=True,
            check=False,
            env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
        )
        if done.returncode != 0:
            raise RuntimeError(f"pip could not bundle the Lambda dependencies:\n{done.stderr}")
