"""Lambda bundling without docker: pip with a target platform, run by CDK locally."""

from __future__ import annotations

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


# What the handlers import at run time; boto3/botocore come with the Lambda runtime.
RUNTIME_REQUIREMENTS = ("pydantic>=2.11", "aws-lambda-powertools>=3.0")
# What Powertools' Tracer imports when tracing is on, without the botocore the X-Ray SDK
# depends on (the runtime has it).
TRACING_REQUIREMENTS = ("aws-xray-sdk>=2.12", "wrapt>=1.14")


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
        self._pip(out, RUNTIME_REQUIREMENTS)
        if self.tracing:
            self._pip(out, TRACING_REQUIREMENTS, "--no-deps")
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
        )
        if done.returncode != 0:
            raise RuntimeError(f"pip could not bundle the Lambda dependencies:\n{done.stderr}")
