"""What a ``delete_sandbox`` leaves in a session's partition, for tests that read it raw."""

from __future__ import annotations

from typing import Any

from sandbox_ledger import keys as k
from sandbox_ledger.keys import LedgerAttr as A


def after_delete(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``items`` (a partition read after a delete) less the two marks every delete leaves
    (mark 0 and its seal, spent, neither pointing at an entry: no mark number is taken
    twice); fails if a mark left is anything else."""
    marks = [i for i in items if k.sequence_number(i[k.SORT_KEY]["S"]) is not None]
    assert 1 <= len(marks) <= 2, marks
    assert all(A.SPENT in m and A.REF not in m and A.PARTS not in m for m in marks), marks
    assert marks[0][k.SORT_KEY]["S"] == k.sequence_sk(0), marks
    return [i for i in items if k.sequence_number(i[k.SORT_KEY]["S"]) is None]
