"""Resource activity records in the ledger table, their expiry policy and the sweep.

The names are imported on first use, so a handler that needs the sweep does not load the
stream parser, or the other way round.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sandbox_ledger._lazy import exports

if TYPE_CHECKING:
    from sandbox_ledger.resources._items import Unreadable as Unreadable
    from sandbox_ledger.resources._items import VersionedRecord as VersionedRecord
    from sandbox_ledger.resources._ops import Page as Page
    from sandbox_ledger.resources.events import DETAIL_TYPE as DETAIL_TYPE
    from sandbox_ledger.resources.events import SOURCE as SOURCE
    from sandbox_ledger.resources.events import EventPublisher as EventPublisher
    from sandbox_ledger.resources.events import Expiry as Expiry
    from sandbox_ledger.resources.models import LocalProcessIdentity as LocalProcessIdentity
    from sandbox_ledger.resources.models import ResourceActivityRecord as ResourceActivityRecord
    from sandbox_ledger.resources.models import ResourceOperation as ResourceOperation
    from sandbox_ledger.resources.models import ResourceOperationResult as ResourceOperationResult
    from sandbox_ledger.resources.owner import current_identity as current_identity
    from sandbox_ledger.resources.owner import is_owner_alive as is_owner_alive
    from sandbox_ledger.resources.policy import ExpiryPolicy as ExpiryPolicy
    from sandbox_ledger.resources.policy import expiry_reason as expiry_reason
    from sandbox_ledger.resources.settings import StreamSettings as StreamSettings
    from sandbox_ledger.resources.settings import SweeperSettings as SweeperSettings
    from sandbox_ledger.resources.settings import SweepPlan as SweepPlan
    from sandbox_ledger.resources.settings import resolve_sweep as resolve_sweep
    from sandbox_ledger.resources.store import ResourceRecordStore as ResourceRecordStore
    from sandbox_ledger.resources.store import SyncResourceRecordStore as SyncResourceRecordStore
    from sandbox_ledger.resources.stream import is_ttl_removal as is_ttl_removal
    from sandbox_ledger.resources.stream import ttl_expiry as ttl_expiry
    from sandbox_ledger.resources.sweeper import SweepResult as SweepResult
    from sandbox_ledger.resources.sweeper import SweepStore as SweepStore
    from sandbox_ledger.resources.sweeper import sweep as sweep
    from sandbox_ledger.resources.unreported import BatchReport as BatchReport
    from sandbox_ledger.resources.unreported import ReplayResult as ReplayResult
    from sandbox_ledger.resources.unreported import UnreportedStore as UnreportedStore
    from sandbox_ledger.resources.unreported import replay_failed_expiries as replay_failed_expiries
    from sandbox_ledger.resources.unreported import report_ttl_removals as report_ttl_removals

__all__, __getattr__, __dir__ = exports(__name__, __file__)
