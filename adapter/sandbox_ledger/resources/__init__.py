"""Resource activity records in the ledger table, their expiry policy and the sweep."""

from sandbox_ledger.resources._items import VersionedRecord
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

__all__ = [
    "DETAIL_TYPE",
    "SOURCE",
    "EventPublisher",
    "Expiry",
    "ExpiryPolicy",
    "LocalProcessIdentity",
    "Page",
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
    "VersionedRecord",
    "current_identity",
    "expiry_reason",
    "is_owner_alive",
    "is_ttl_removal",
    "resolve_sweep",
    "sweep",
    "ttl_expiry",
]
