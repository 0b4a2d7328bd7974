"""Budgets and seeds of the verification runs, chosen by ``SANDBOX_LEDGER_VERIFY``.

- ``fast`` (default, ``make test``): a few seconds, one fixed seed, the same sequences every run.
- ``deep`` (CI): minutes, a fresh random seed per run, printed.
- ``long`` (``make verify``): as long as you care to wait.

Every run prints its profile and seed; ``SANDBOX_LEDGER_SEED=N`` replays a run's sequences
(with the same profile). A failure also prints the shrunk sequence of steps as code.
"""

from __future__ import annotations

import asyncio
import os
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hypothesis import HealthCheck, seed, settings
from hypothesis.stateful import run_state_machine_as_test

if TYPE_CHECKING:
    from .stores import Subject

PROFILE = os.environ.get("SANDBOX_LEDGER_VERIFY", "fast")
FAST_SEED = 20261201
RUN_SEEDS = [FAST_SEED] if PROFILE == "fast" else [random.randrange(2**32) for _ in range(3)]
"""The seeds of a run of the hand-written schedules (the follow and changes models)."""


@dataclass(frozen=True)
class Budget:
    examples: int
    steps: int


# Keyed by profile, then by the kind of run (an in-process store costs microseconds per step,
# a moto-backed one milliseconds).
# "server-plain" is the fault-free run on a server-backed store: in the fast profile one short
# example, since the run with faults exercises every rule too.
BUDGETS = {
    "fast": {
        "in-process": Budget(6, 20),
        "server": Budget(3, 8),
        "server-plain": Budget(1, 8),
        "lifecycle": Budget(2, 6),
    },
    # Sized for CI on a shared 2-core machine: about 10 minutes for the whole deep run.
    "deep": {
        "in-process": Budget(100, 30),
        "server": Budget(15, 30),
        "server-plain": Budget(8, 30),
        "lifecycle": Budget(10, 25),
    },
    "long": {
        "in-process": Budget(3000, 80),
        "server": Budget(300, 60),
        "server-plain": Budget(200, 60),
        "lifecycle": Budget(150, 50),
    },
}


def run_seed() -> int:
    """The seed of this run: given, fixed (fast profile) or fresh."""
    given = os.environ.get("SANDBOX_LEDGER_SEED")
    if given:
        return int(given)
    return FAST_SEED if PROFILE == "fast" else random.getrandbits(32)


def budget(kind: str) -> Budget:
    if PROFILE not in BUDGETS:
        raise ValueError(f"SANDBOX_LEDGER_VERIFY={PROFILE!r}: use one of {sorted(BUDGETS)}")
    return BUDGETS[PROFILE][kind]


def run(machine: type[Any], label: str, kind: str) -> None:
    """Run a state machine under this profile's budget, printing how to reproduce it."""
    chosen = run_seed()
    plan = budget(kind)
    print(
        f"[verification] {label}: profile={PROFILE} seed={chosen} "
        f"examples={plan.examples} steps={plan.steps}; reproduce with "
        f"SANDBOX_LEDGER_VERIFY={PROFILE} SANDBOX_LEDGER_SEED={chosen}"
    )
    run_state_machine_as_test(
        seed(chosen)(machine),
        settings=settings(
            max_examples=plan.examples,
            stateful_step_count=plan.steps,
            deadline=None,
            database=None,
            print_blob=True,
            # One failure, shrunk: racing clients make shrinking slow, a second bug waits.
            report_multiple_bugs=False,
            suppress_health_check=list(HealthCheck),
        ),
    )


def run_ledger(subject: Subject, kind: str, *, faults: bool, delete_races: bool) -> None:
    """The ledger machine against ``subject``, on a private event loop."""
    from .ledger_machine import CLIENTS, LedgerMachine
    from .stores import FaultBoard

    with asyncio.Runner() as runner:
        store = runner.run(subject.open(CLIENTS))
        try:
            board = None
            if faults:
                if not store.botocore_clients:
                    raise ValueError(f"{subject.label}: no botocore clients to inject faults into")
                board = FaultBoard(store.botocore_clients, aio=store.aio)
            machine = type(
                "LedgerMachine",
                (LedgerMachine,),
                {"store": store, "runner": runner, "board": board, "delete_races": delete_races},
            )
            label = f"ledger/{subject.label}{' with faults' if faults else ''}"
            run(machine, label, kind)
        finally:
            if store.dispose is not None:
                runner.run(store.dispose())


def run_lifecycle(endpoint: str, *, retain_failed: Any = None, strict: bool = True) -> None:
    """The resource lifecycle machine on a fresh table and bus of the moto server; owners'
    and sweepers' stores follow the same expiry policy (their TTLs honour it)."""
    from .lifecycle_machine import LifecycleMachine, build_rig

    retain_failed = LifecycleMachine.retain_failed if retain_failed is None else retain_failed
    rig, dispose = build_rig(endpoint, retain_failed=retain_failed)
    try:
        attrs: dict[str, Any] = {"rig": rig, "strict": strict, "retain_failed": retain_failed}
        run(type("LifecycleMachine", (LifecycleMachine,), attrs), "lifecycle", "lifecycle")
    finally:
        dispose()
