"""``resources import`` of very large record files (issue 41, item 9).

- A record too large for the table (DynamoDB's 400 KB item) raised ``StorageError:
  ValidationException: Item size to update has exceeded the maximum allowed size`` out of
  ``import_directory``: the files after it were never imported. It now fails its file alone
  (``put`` refuses it as bad input before writing).
- A file of hundreds of MB was read whole before anything looked at its size: memory
  followed the file. A record file holds at most ``MAX_RECORD_FILE_BYTES``; a larger one
  fails by name from its size alone.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sandbox_ledger.resources import SyncResourceRecordStore
from sandbox_ledger.resources.files import import_directory

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "resource-record.json"
OTHER = "1b7f6f4e-2f7a-4c55-9a59-3f1d7c2f8e10"


def _directory(tmp_path: Path, workspace_bytes: int) -> tuple[Path, str]:
    """A record whose workspace holds ``workspace_bytes`` characters, and a small one."""
    record = json.loads(EXAMPLE.read_text())
    directory = tmp_path / "resources"
    directory.mkdir()
    big = {**record, "workspace": "/w/" + "x" * workspace_bytes}
    (directory / f"{record['id']}.json").write_text(json.dumps(big))
    (directory / f"{OTHER}.json").write_text(json.dumps({**record, "id": OTHER}))
    return directory, f"{record['id']}.json"


@pytest.fixture
def store(moto_endpoint: str, sync_table: str) -> SyncResourceRecordStore:
    return SyncResourceRecordStore(sync_table, endpoint_url=moto_endpoint)


def test_a_record_too_large_for_the_table_fails_alone(
    tmp_path: Path, store: SyncResourceRecordStore
) -> None:
    directory, name = _directory(tmp_path, 1_000_000)
    report = import_directory(store, directory)
    assert list(report.failed) == [name]
    assert report.written == [f"{OTHER}.json"]
    assert store.get(OTHER) is not None


@pytest.mark.slow
def test_a_very_large_record_file_fails_from_its_size_without_being_read(
    tmp_path: Path, store: SyncResourceRecordStore
) -> None:
    import tracemalloc

    directory, name = _directory(tmp_path, 200_000_000)
    tracemalloc.start()
    try:
        report = import_directory(store, directory)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert list(report.failed) == [name]
    assert report.written == [f"{OTHER}.json"]
    assert peak < 20_000_000, peak


def test_put_refuses_a_record_over_an_item_before_writing(
    store: SyncResourceRecordStore,
) -> None:
    from sandbox_ledger import InvalidInputError
    from sandbox_ledger.resources.models import ResourceActivityRecord

    record = json.loads(EXAMPLE.read_text())
    near = ResourceActivityRecord.model_validate({**record, "workspace": "/w/" + "x" * 409_600})
    with pytest.raises(InvalidInputError, match=r"^record: .* over DynamoDB's 409,600 bytes"):
        store.put(near)
    assert store.get(near.id) is None
    fits = ResourceActivityRecord.model_validate({**record, "workspace": "/w/" + "x" * 300_000})
    store.put(fits)
    stored = store.get(fits.id)
    assert stored is not None and stored.workspace == fits.workspace
