"""Resource activity records in the ledger table, their expiry policy and the sweep.

The names are imported on first use, so a handler that needs the sweep does not load the
stream parser, or the other way round.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sandbox_ledger.resources._items import Unreadable, VersionedRecord
    from sandbox_ledger.resources._ops import Page
    from sandbox_ledger.resources.events import DETAIL_TYPE, SOURCE, EventPublisher, Expiry
    from sandbox_ledger.resources.models import (
        LocalProcessIdentity,
        ResourceActivityRecord,
        ResourceOperation,
        ResourceOperationResult,
    )
    from sandbox_ledger.resources.owner import current_identity, is_owner_alive
    from sandbox_ledger.resources.policy import ExpiryPolicy, expiry_reason
    from sandbox_ledger.resources.settings import (
        StreamSettings,
        SweeperSettings,
        SweepPlan,
        resolve_sweep,
    )
    from sandbox_ledger.resources.store import ResourceRecordStore, SyncResourceRecordStore
    from sandbox_ledger.resources.stream import is_ttl_removal, ttl_expiry
    from sandbox_ledger.resources.sweeper import SweepResult, SweepStore, sweep
    from sandbox_ledger.resources.unreported import (
        BatchReport,
        ReplayResult,
        UnreportedStore,
        replay_failed_expiries,
        report_ttl_removals,
    )

_WHERE = {
    "BatchReport": "unreported",
    "ReplayResult": "unreported",
    "UnreportedStore": "unreported",
    "replay_failed_expiries": "unreported",
    "report_ttl_removals": "unreported",
    "DETAIL_TYPE": "events",
    "EventPublisher": "events",
    "Expiry": "events",
    "ExpiryPolicy": "policy",
    "LocalProcessIdentity": "models",
    "Page": "_ops",
    "ResourceActivityRecord": "models",
    "ResourceOperation": "models",
    "ResourceOperationResult": "models",
    "ResourceRecordStore": "store",
    "SOURCE": "events",
    "StreamSettings": "settings",
    "SweepPlan": "settings",
    "SweepResult": "sweeper",
    "SweepStore": "sweeper",
    "SweeperSettings": "settings",
    "SyncResourceRecordStore": "store",
    "Unreadable": "_items",
    "VersionedRecord": "_items",
    "current_identity": "owner",
    "expiry_reason": "policy",
    "is_owner_alive": "owner",
    "is_ttl_removal": "stream",
    "resolve_sweep": "settings",
    "sweep": "sweeper",
    "ttl_expiry": "stream",
}

__all__ = [
    "DETAIL_TYPE",
    "SOURCE",
    "BatchReport",
    "EventPublisher",
    "Expiry",
    "ExpiryPolicy",
    "LocalProcessIdentity",
    "Page",
    "ReplayResult",
    "ResourceActivityRecord",
    "ResourceOperation",
    "ResourceOperationResult",
    "ResourceRecordStore",
    "StreamSettings",
    "SweepPlan",
    "SweepResult",
    "SweepStore",
    "SweeperSettings",
    "SyncResourceRecordStore",
    "Unreadable",
    "UnreportedStore",
    "VersionedRecord",
    "current_identity",
    "expiry_reason",
    "is_owner_alive",
    "is_ttl_removal",
    "replay_failed_expiries",
    "report_ttl_removals",
    "resolve_sweep",
    "sweep",
    "ttl_expiry",
]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'sandbox_ledger.resources' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"sandbox_ledger.resources.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # The public names, whether imported yet or not, and none of this module's helpers.
    hidden = ["Any", "TYPE_CHECKING", "annotations", "importlib"]
    return sorted((set(globals()) - set(hidden)) | set(__all__))
