"""The repository's app synthesized in process (shared by the CDK tests): the context of
``cdk.json`` with the test's own on top, and pip run once per set of requirements."""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

os.environ.setdefault("JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION", "20")
ROOT = Path(__file__).parents[2]
sys.path[:0] = [str(ROOT)]

import aws_cdk  # noqa: E402
from infra.app import build  # noqa: E402

from sandbox_ledger_cdk.bundling import PipBundling  # noqa: E402

CONTEXT = json.loads((ROOT / "cdk.json").read_text())["context"]
REAL_PIP = PipBundling._pip  # before pip_once_per_requirements replaces it


def pip_once(cache: Path) -> Iterator[None]:
    """Each synth bundles the Lambda code, running pip (about 4 s of CPU) for the same
    requirements every time. While this runs, the first bundling of each (platform, Python
    version, requirements, options) runs the real pip into a folder of ``cache`` and every
    later one copies that folder: the session's template still comes from a real pip run."""
    real = REAL_PIP
    done: dict[tuple[str, ...], Path] = {}

    def cached(self: PipBundling, out: Path, requirements: tuple[str, ...], *options: str) -> None:
        key = (self.platform, self.python_version, *requirements, "--", *options)
        if key not in done:
            target = cache / str(len(done))
            target.mkdir()
            real(self, target, requirements, *options)
            done[key] = target
        shutil.copytree(done[key], out, dirs_exist_ok=True)

    import pytest

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(PipBundling, "_pip", cached)
        yield


def synth(tmp: Path, **context: Any) -> tuple[dict[str, Any], Path]:
    """The app's stack synthesized into ``tmp`` with ``context`` (cdk-nag findings raise):
    its template and the cloud assembly's folder."""
    app = aws_cdk.App(context={**CONTEXT, **context}, outdir=str(tmp))
    stack = build(app)
    assembly = app.synth()  # raises if cdk-nag reports an unacknowledged finding
    artifact = assembly.get_stack_artifact(stack.artifact_id)
    return artifact.template, tmp
