"""The listing and summary rules of ``summary.py`` that mutation testing found unchecked: what a
caller of any store gets back (the DynamoDB adapter's listing, paging at the exact end, a
cursor at the edge of ``before``, options given as a dict, a checkpoint named by a non-string)."""

from __future__ import annotations

import pytest

from sandbox_ledger import LedgerEntry, LedgerEvent, ListSandboxOptions, MemoryAdapter, summary
from sandbox_ledger.models import SandboxDetails, SandboxStatus


def details(sandbox_id: str, started_at: int, *, completed: bool = False) -> SandboxDetails:
    status = SandboxStatus.Completed if completed else SandboxStatus.Running
    return SandboxDetails(
        name="n", sandbox_id=sandbox_id, status=status, started_at=started_at, exec_count=0
    )


def entry(sandbox_id: str, ts: int, event: str, payload: object = None) -> LedgerEntry:
    return LedgerEntry(
        ts=ts, name="n", sandbox_id=sandbox_id, step_index=0, event=event, payload=payload
    )


SESSIONS = [details("a", 10), details("b", 30, completed=True), details("c", 20), details("d", 40)]


def ids(listed: list[SandboxDetails]) -> list[str]:
    return [d.sandbox_id for d in listed]


def test_the_listing_is_newest_first_without_options() -> None:
    assert ids(summary.apply_list_options(SESSIONS, None)) == ["d", "b", "c", "a"]
    assert ids(summary.apply_list_options(SESSIONS, ListSandboxOptions())) == ["d", "b", "c", "a"]


def test_the_listing_filters_by_status_then_before_then_limits() -> None:
    running = ListSandboxOptions(status=SandboxStatus.Running)
    assert ids(summary.apply_list_options(SESSIONS, running)) == ["d", "c", "a"]
    assert ids(summary.apply_list_options(SESSIONS, ListSandboxOptions(before=30))) == ["c", "a"]
    assert ids(summary.apply_list_options(SESSIONS, ListSandboxOptions(limit=2))) == ["d", "b"]
    both = ListSandboxOptions(status=SandboxStatus.Running, before=40, limit=1)
    assert ids(summary.apply_list_options(SESSIONS, both)) == ["c"]


async def created(adapter: MemoryAdapter, *stamps: int) -> None:
    for n, ts in enumerate(stamps):
        await adapter.append(entry(f"s{n}", ts, LedgerEvent.SandboxCreated))


async def test_a_page_that_ends_exactly_at_the_limit_has_no_cursor() -> None:
    adapter = MemoryAdapter()
    await created(adapter, 1, 2)
    page = await adapter.list_sandbox_page("n", ListSandboxOptions(limit=2))
    assert [d.started_at for d in page.sessions] == [2, 1]
    assert page.cursor is None


async def test_a_cursor_just_below_before_resumes_the_listing() -> None:
    adapter = MemoryAdapter()
    await created(adapter, 1, 2, 3)
    first = await adapter.list_sandbox_page("n", ListSandboxOptions(before=3, limit=1))
    assert [d.started_at for d in first.sessions] == [2]
    rest = await adapter.list_sandbox_page(
        "n", ListSandboxOptions(before=3, limit=1, cursor=first.cursor)
    )
    assert [d.started_at for d in rest.sessions] == [1]


async def test_options_may_be_a_camel_case_dict() -> None:
    adapter = MemoryAdapter()
    await created(adapter, 1, 2)
    await adapter.append(entry("s1", 3, LedgerEvent.SandboxClosed))
    listed = await adapter.list_sandbox_details("n", {"status": "running"})  # type: ignore[arg-type]
    assert [d.sandbox_id for d in listed] == ["s0"]
    page = await adapter.list_all_sandbox_page({"limit": 1})  # type: ignore[arg-type]
    assert [d.sandbox_id for d in page.sessions] == ["s1"]


@pytest.mark.parametrize("name", [5, None, ["x"]])
async def test_a_checkpoint_named_by_a_non_string_has_no_tag(name: object) -> None:
    adapter = MemoryAdapter()
    payload = {"snapshotId": "snap", "name": name}
    await adapter.append(entry("s", 1, LedgerEvent.CheckpointCreated, payload))
    [info] = await adapter.list_checkpoints("n", "s")
    assert (info.snapshot_id, info.tag, info.created_at) == ("snap", None, 1)


async def test_the_summary_is_derived_from_the_events() -> None:
    adapter = MemoryAdapter()
    events = [
        (10, LedgerEvent.SandboxCreated),
        (11, LedgerEvent.ExecComplete),
        (20, LedgerEvent.SandboxCreated),
        (12, LedgerEvent.ExecComplete),
        (30, LedgerEvent.SandboxClosed),
        (40, LedgerEvent.SandboxClosed),
    ]
    for ts, event in events:
        await adapter.append(entry("s", ts, event))
    got = await adapter.get_sandbox_details("n", "s")
    assert got == SandboxDetails(
        name="n",
        sandbox_id="s",
        status=SandboxStatus.Completed,
        started_at=10,
        completed_at=30,
        exec_count=2,
    )
