"""The CDK tests' session fixtures: one synthesized template per test session, shared by every
module that needs it (tests/conftest.py's ONE_WORKER keeps them on one worker)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture(scope="session")
def pip_once_per_requirements(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """pip once per set of requirements for every synth of the session
    (``synthesis.pip_once``); the slow fresh-process synth
    (test_synth_prints_no_deprecation_warning) runs pip without it. Session-scoped, so that
    the session's synth (``synthesized``) goes through it too: a module-scoped one was set up
    after it, and the next synth ran the same pip again. Used automatically by the modules
    that synthesize (test_infra.py)."""
    pytest.importorskip("aws_cdk")
    from deploy.synthesis import pip_once

    yield from pip_once(tmp_path_factory.mktemp("pip-cache"))


@pytest.fixture(scope="session")
def synthesized(
    tmp_path_factory: pytest.TempPathFactory, pip_once_per_requirements: None
) -> tuple[dict[str, Any], Path]:
    """The repository's app synthesized once per session (context ``local``: no bootstrap
    version rule, for moto's CloudFormation): its template and cloud assembly folder."""
    pytest.importorskip("aws_cdk")
    from deploy.synthesis import synth

    return synth(tmp_path_factory.mktemp("cdk"), local=True)
