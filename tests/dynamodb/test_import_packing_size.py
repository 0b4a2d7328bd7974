"""A transaction's real item bytes, the summary put's whole item included,
stay under DynamoDB's 4 MB (4,194,304 bytes) with the longest session keys."""

from __future__ import annotations

from sandbox_ledger import LedgerEntry, LedgerEvent
from sandbox_ledger import keys as k
from sandbox_ledger.dynamodb import _items as it
from sandbox_ledger.dynamodb import _packing as p
from sandbox_ledger.dynamodb import _sequence as _seq

DYNAMODB_TRANSACTION_BYTES = 4_194_304


def _units(noise: int) -> list[p.Unit]:
    import base64
    import random

    rng = random.Random(noise)
    sessions = []
    for s in range(40):
        name = f"{s:02d}" + "n" * 2033
        prefix = f"{k.SESSION_PREFIX}{len(name)}#{name}#"
        sandbox_id = "s" * (2048 - len(prefix.encode()))
        k.check_session_key(name, sandbox_id)
        sessions.append((name, sandbox_id))
    units = []
    for i, (name, sandbox_id) in enumerate(sessions):
        entry = LedgerEntry(
            ts=1_000 + i,
            name=name,
            sandbox_id=sandbox_id,
            step_index=-1,
            event=LedgerEvent.SandboxCreated,
            payload={"noise": base64.b64encode(rng.randbytes(noise)).decode()},
        )
        units.append(p.new_unit(i, entry, k.claim_sk(f"{i:032x}", 1), None))
    units.sort(key=lambda u: (u.head[k.PARTITION_KEY]["S"], u.index))
    return units


def test_longest_keys_and_large_entries_fit_one_transaction() -> None:
    """Sessions of one entry each (its head, claim and sequence mark, the session's summary
    and the check of the mark before it: 5 actions), entries sized so that the packer's
    estimate of 15 of them (2,048 bytes a summary besides its keys and its lc, a mark at its
    largest, a head with its mark's number) comes just under its 4,000,000: the summaries put whole
    (8,306 bytes each with the longest keys check_session_key allows) and the marks must
    still keep the transaction's items within DynamoDB's 4 MB. (Parts are written apart,
    before the heads.)"""
    # 15 x (about 256,360 + a summary lc element's 48 + 10,240) = 3,999,823 estimated
    units = _units(247_371)
    assert len(p.pack(units)[0].groups) == 15  # full by its bytes (by its actions: 20)
    for transaction in p.pack(units):
        total = 0
        for group in transaction.groups:
            for u in group.units:
                mark = _seq.mark_item(group.pk, _seq.Mark(_seq.new_incarnation(), 10**9), u.head)
                head = _seq.sequenced(u.head, 10**9)  # the head carries its mark's number
                items = [head, u.claim, mark] + ([u.marker] if u.marker else [])
                total += sum(p.item_bytes(item) for item in items)
            update = it.summary_fold([u.entry for u in group.units], 4, group.ttl())
            if update is not None:
                total += p.item_bytes(it.summary_item(update))
        assert total <= DYNAMODB_TRANSACTION_BYTES, (total, len(transaction.groups))
