"""Entries of equal ``ts`` are read in commit order on DynamoDB, by every read.

An entry's sort key holds an order id made when its append began, and its sequence mark the
order it committed in. The two differ when appends overlap: an append that began first and
committed second (held off by a delete's lease, cancelled by another writer's mark, or an
import whose transaction another import's claims cancelled, its order ids kept). read_all,
an export and a follower then once disagreed on the order of equal-``ts`` entries (the deep
verification's "entries at ts=... differ or are out of order"); every one of them now orders
ties by commit (each head carries its mark's number).
"""

from __future__ import annotations

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter, _ops
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb._sequence import Sequencer


def e(step: int, event: str = LedgerEvent.ExecStarted) -> LedgerEntry:
    return LedgerEntry(ts=7, name="tie", sandbox_id="s", step_index=step, event=event)


def test_an_append_that_began_first_and_committed_second_reads_second_everywhere(
    moto_endpoint: str, sync_table: str
) -> None:
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    began_first, began_second = it.order_ids.next(), it.order_ids.next()
    committed = [e(0, LedgerEvent.SandboxCreated), e(1), e(2), e(3, LedgerEvent.SandboxClosed)]
    orders = [it.order_ids.next(), began_second, began_first, it.order_ids.next()]
    for entry, order in zip(committed, orders, strict=True):
        ledger.run(_ops.append(sync_table, entry, order, 4, Sequencer()))
    assert ledger.read_all("tie", "s") == committed
    assert ledger.read_in_append_order("tie", "s") == committed
    assert [f.entry for f in ledger.follow("tie", "s")] == committed


def test_an_import_read_back_keeps_the_commit_order_of_the_entries_it_stores(
    moto_endpoint: str, sync_table: str
) -> None:
    """read_stored (what an import reconciles against) orders ties as read_all does."""
    ledger = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    made_first, made_second = it.order_ids.next(), it.order_ids.next()
    ledger.run(_ops.append(sync_table, e(0), made_second, 4, Sequencer()))
    ledger.run(_ops.append(sync_table, e(1), made_first, 4, Sequencer()))
    assert ledger.run(_ops.read_stored(sync_table, "tie", "s")) == [e(0), e(1)]
