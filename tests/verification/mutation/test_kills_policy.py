"""The expiry policy (``resources/policy.py``) as an operator relies on it: which records a
sweep looks at, when each phase's record expires (never early, never a failed record kept
forever), why it says it expired, and which settings it refuses."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from resources.resource_fixtures import record
from sandbox_ledger.errors import InvalidInputError
from sandbox_ledger.resources import ExpiryPolicy
from sandbox_ledger.resources import policy as policies
from sandbox_ledger.resources.phases import FAILED_PHASES, LIVE_PHASES

NOW = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)
POLICY = ExpiryPolicy(stale_after=timedelta(minutes=10), retain_failed=timedelta(hours=3))
SECOND = timedelta(seconds=1)


def reason(phase: str, unchanged: timedelta, policy: ExpiryPolicy = POLICY, **kw: object) -> object:
    return policies.expiry_reason(
        record(phase=phase, now=NOW), unchanged_for=unchanged, policy=policy, **kw
    )  # type: ignore[arg-type]


def test_each_phase_waits_its_own_window() -> None:
    for phase in LIVE_PHASES:
        assert reason(phase, timedelta(minutes=10) - SECOND) is None
        assert reason(phase, timedelta(minutes=10)) == (
            f"stale: no heartbeat for 10m0s in phase {phase}"
        )
        assert POLICY.latest_expiry(phase) == timedelta(minutes=20)
    for phase in FAILED_PHASES:
        assert reason(phase, timedelta(hours=3) - SECOND) is None
        assert reason(phase, timedelta(hours=3)) == f"retention elapsed: {phase} unchanged for 3h0m"
        assert POLICY.latest_expiry(phase) == timedelta(hours=6)


def test_failed_records_are_kept_forever_when_retention_is_zero() -> None:
    forever = ExpiryPolicy(retain_failed=timedelta(0))
    for phase in FAILED_PHASES:
        assert reason(phase, timedelta(days=3650), forever) is None
        assert forever.latest_expiry(phase) is None
        assert forever.hint_bands(NOW)[phase] is None
        assert not forever.is_hint(record(phase=phase, age=timedelta(days=3650), now=NOW), NOW)


def test_a_live_owner_keeps_its_record() -> None:
    old = timedelta(days=2)
    assert reason("ready", old, owner_alive=True) is None
    assert (
        reason("ready", old, owner_alive=False)
        == "stale: owner process gone for 2d0h in phase ready"
    )
    assert reason("cleanup-failed", old, owner_alive=True) == (
        "retention elapsed: cleanup-failed unchanged for 2d0h"
    )


@pytest.mark.parametrize(
    ("unchanged", "said"),
    [
        (timedelta(minutes=12, seconds=5), "12m5s"),
        (timedelta(hours=1), "1h0m"),
        (timedelta(hours=1, minutes=1), "1h1m"),
        (timedelta(days=1), "1d0h"),
        (timedelta(days=1, hours=1), "1d1h"),
        (timedelta(hours=1, minutes=59, seconds=59), "1h59m"),
        (timedelta(hours=25, minutes=30), "1d1h"),
    ],
)
def test_the_reason_says_how_long_in_human_units(unchanged: timedelta, said: str) -> None:
    assert reason("closing", unchanged) == f"stale: no heartbeat for {said} in phase closing"


def test_hints_are_the_records_half_a_window_away() -> None:
    def hint(phase: str, age: timedelta) -> bool:
        return POLICY.is_hint(record(phase=phase, age=age, now=NOW), NOW)

    half = timedelta(minutes=5)
    assert not hint("ready", half)  # exactly half a window: not yet
    assert not hint("ready", -half)
    assert not hint("ready", half - SECOND)
    assert hint("ready", half + SECOND)
    assert not hint("ready", -(half - SECOND))  # an owner's clock ahead of the sweeper's
    assert hint("ready", -(half + SECOND))
    assert not hint("cleanup-failed", timedelta(hours=1))
    assert hint("cleanup-failed", timedelta(hours=1, minutes=31))
    bands = POLICY.hint_bands(NOW)
    assert bands["ready"] == (NOW - half, NOW + half)
    assert set(bands) == {*LIVE_PHASES, *FAILED_PHASES}


@pytest.mark.parametrize(
    ("settings", "field"),
    [
        ({"stale_after": timedelta(0)}, "stale_after"),
        ({"stale_after": -SECOND}, "stale_after"),
        ({"retain_failed": -SECOND}, "retain_failed"),
    ],
)
def test_bad_settings_are_refused_by_name(settings: dict[str, timedelta], field: str) -> None:
    with pytest.raises(InvalidInputError, match=f"^{field}: must be") as caught:
        ExpiryPolicy(**settings)
    assert caught.value.field == field
    ExpiryPolicy(stale_after=SECOND, retain_failed=timedelta(0))
