"""What ``models.py`` refuses, as a caller sees it: the error names the field of the record."""

from __future__ import annotations

import pytest

from sandbox_ledger import EnvironmentRecord, MemoryAdapter
from sandbox_ledger.errors import InvalidInputError


async def test_an_unstorable_environment_field_is_refused_by_its_name() -> None:
    adapter = MemoryAdapter()
    record = EnvironmentRecord.model_validate({"name": "e", "builtAt": 1, "extra": "a\ud800"})
    with pytest.raises(InvalidInputError, match=r"^record\.extra: .*surrogate") as caught:
        await adapter.save_environment(record)
    assert caught.value.field == "record.extra"
    assert await adapter.list_environments() == []
