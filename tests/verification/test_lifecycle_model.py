"""The resource-record lifecycle checker (see lifecycle_machine.py for the invariants)."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest

from .profiles import run_lifecycle

# The claim protocol of issue 9 (staleness on the sweeper's clock, exactly-once publication by
# two sweepers, records past EventBridge's limits reported) is checked by default;
# SANDBOX_LEDGER_LIFECYCLE_STRICT=0 checks only the older, weaker protocol.
STRICT = os.environ.get("SANDBOX_LEDGER_LIFECYCLE_STRICT", "1") != "0"


@pytest.mark.usefixtures("fast_sdk_backoff")
@pytest.mark.parametrize(
    "retain_failed", [timedelta(days=7), timedelta(0)], ids=["retain-7d", "retain-forever"]
)
def test_lifecycle(moto_endpoint: str, retain_failed: timedelta) -> None:
    run_lifecycle(moto_endpoint, retain_failed=retain_failed, strict=STRICT)
