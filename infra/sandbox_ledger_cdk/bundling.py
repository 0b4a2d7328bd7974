"""Lambda bundling without docker: pip with a target platform, run by CDK locally.

pip reads the packages from the package index, or from a wheelhouse (a folder of wheels, no
network) when ``SANDBOX_LEDGER_WHEELHOUSE`` names one: ``python -m sandbox_ledger_cdk.wheelhouse
DIR`` fills it once (``make deploy-tools`` does), and every later synth is offline.
"""

from __future__ import annotations

import os
import re
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
LOCKS = (RUNTIME_LOCK, TRACING_LOCK)
PLATFORM = "manylinux2014_aarch64"
WHEELHOUSE_ENV = "SANDBOX_LEDGER_WHEELHOUSE"
"""The variable naming a wheelhouse that bundling reads instead of the package index."""


class BundlingError(RuntimeError):
    """The Lambda asset could not be bundled; the message is one line naming what is missing
    and what to do."""


last_failure: BundlingError | None = None
"""The last bundling failure of this process: CDK wraps it in its own error (with the asset's
path and a JavaScript stack), and ``infra/app.py`` prints this line instead."""


def _platform_options(platform: str, python_version: str) -> list[str]:
    return [
        "--platform",
        platform,
        "--only-binary=:all:",
        "--python-version",
        python_version,
        "--implementation",
        "cp",
    ]


def fill_wheelhouse(
    directory: str | Path, *, python_version: str, platform: str = PLATFORM
) -> Path:
    """Download every locked package of the Lambda asset (the tracing ones too) into
    ``directory`` (created), for ``platform`` and ``python_version``: the one step that needs
    the package index. Raises :class:`BundlingError` naming what pip could not get."""
    target = Path(directory).resolve()
    target.mkdir(parents=True, exist_ok=True)
    requirements = [arg for lock in LOCKS for arg in ("-r", str(lock))]
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--disable-pip-version-check",
            *_platform_options(platform, python_version),
            "--no-deps",
            "--dest",
            str(target),
            *requirements,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise BundlingError(
            f"pip could not download {_missing(done.stderr)} into the wheelhouse {target} "
            "from the package index (is it reachable?)"
        )
    return target


def _missing(stderr: str) -> str:
    """What pip says it could not find, or its last error line."""
    found = re.findall(r"No matching distribution found for (\S+)", stderr)
    if found:
        return ", ".join(dict.fromkeys(found))
    errors = [line.strip() for line in stderr.splitlines() if line.strip().startswith("ERROR")]
    lines = errors or [line.strip() for line in stderr.splitlines() if line.strip()]
    return f"the Lambda dependencies ({lines[-1] if lines else 'no message'})"


@jsii.implements(ILocalBundling)
class PipBundling:
    """Installs the handlers' dependencies for ``platform`` and copies the library and the
    handlers next to them. The asset hash comes from this output, so a library edit changes
    the asset and redeploys the functions."""

    def __init__(
        self,
        *,
        python_version: str,
        platform: str = PLATFORM,
        tracing: bool = False,
        wheelhouse: str | Path | None = None,
    ) -> None:
        self.python_version = python_version
        self.platform = platform
        self.tracing = tracing
        self.wheelhouse = wheelhouse
        """A folder of wheels read instead of the index (default: ``SANDBOX_LEDGER_WHEELHOUSE``,
        else the index)."""

    def _wheelhouse(self) -> Path | None:
        given = self.wheelhouse or os.environ.get(WHEELHOUSE_ENV) or None
        return Path(given).resolve() if given else None

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
        global last_failure
        wheelhouse = self._wheelhouse()
        source = ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse else []
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                "--no-compile",  # no bytecode of the build host's Python in the asset
                *_platform_options(self.platform, self.python_version),
                *source,
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
        if done.returncode == 0:
            return
        missing = _missing(done.stderr)
        if wheelhouse is not None:
            failure = BundlingError(
                f"the wheelhouse {wheelhouse} ({WHEELHOUSE_ENV}) has no {missing}: fill it "
                f"with network access: make deploy-tools, or python -m "
                f"sandbox_ledger_cdk.wheelhouse {wheelhouse}"
            )
        else:
            failure = BundlingError(
                f"pip could not get {missing} for the Lambda asset from the package index "
                f"(is it reachable?); to synthesize offline, fill a wheelhouse once with "
                f"python -m sandbox_ledger_cdk.wheelhouse DIR and set {WHEELHOUSE_ENV}=DIR"
            )
        last_failure = failure
        raise failure
