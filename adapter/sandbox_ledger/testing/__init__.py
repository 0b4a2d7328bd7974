"""The conformance suite every adapter must pass: the storage contract
(:class:`~sandbox_ledger.StorageAdapter`) and what export and import need
(:class:`~sandbox_ledger.protocol.TransferAdapter`).

Subclass :class:`StorageAdapterContract` in a test module, name the subclass ``Test...`` and
override the ``adapter`` fixture to yield a fresh, empty adapter::

    import pytest
    from sandbox_ledger.testing import StorageAdapterContract

    class TestMyAdapter(StorageAdapterContract):
        @pytest.fixture
        async def adapter(self):
            adapter = MyAdapter(...)
            yield adapter
            await adapter.close()

The fleet's change feed (:class:`~sandbox_ledger.protocol.ChangesAdapter`) is part of it
(:class:`ChangesContract`, also usable alone).

Requires ``pytest`` and ``pytest-asyncio`` (``asyncio_mode = "auto"``): the ``testing`` extra.
"""

try:
    import pytest  # noqa: F401
    import pytest_asyncio  # noqa: F401
except ModuleNotFoundError as exc:  # pragma: no cover - depends on the install
    raise ModuleNotFoundError(
        "sandbox_ledger.testing needs pytest and pytest-asyncio: "
        f"pip install 'sandbox-ledger-dynamodb[testing]' (missing module: {exc.name})",
        name=exc.name,
    ) from exc

from sandbox_ledger.testing.changes import ChangesContract
from sandbox_ledger.testing.conformance import EXOTIC_PAYLOADS, StorageAdapterContract

__all__ = ["EXOTIC_PAYLOADS", "ChangesContract", "StorageAdapterContract"]
