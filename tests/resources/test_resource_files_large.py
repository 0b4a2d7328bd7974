"""``resources import`` of very large record files (issue 41, item 9): found broken, fixes
left to the owners of ``resources/`` (strict xfail: each turns into a failure, to remove the
mark, once its fix lands).

- A record too large for the table (DynamoDB's 400 KB item) raised ``StorageError:
  ValidationException: Item size to update has exceeded the maximum allowed size`` out of
  ``import_directory``: the files after it were never imported, and the CLI stopped with
  that error instead of naming the file and going on (exit 4).
- A file of hundreds of MB is read whole (``path.read_bytes()``), decoded and parsed before
  anything looks at its size: memory follows the file. A record file has a stated most
  (what the table can hold): a larger file should fail by name from its size alone.
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


@pytest.mark.xfail(
    strict=True,
    reason="resources/: a record too large for an item raises StorageError out of "
    "import_directory instead of failing its file alone",
)
def test_a_record_too_large_for_the_table_fails_alone(
    tmp_path: Path, store: SyncResourceRecordStore
) -> None:
    directory, name = _directory(tmp_path, 1_000_000)
    report = import_directory(store, directory)
    assert list(report.failed) == [name]
    assert report.written == [f"{OTHER}.json"]
    assert store.get(OTHER) is not None


@pytest.mark.slow
@pytest.mark.xfail(
    strict=True,
    reason="resources/: read_record_file reads a file whole before looking at its size",
)
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
