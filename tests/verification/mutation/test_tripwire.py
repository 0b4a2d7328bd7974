"""The mutation score's tripwire, in ``make test``: a few mutants per core module, chosen among
those that matter (a wrong count, a listing that loses or repeats a session, a cursor refused or
accepted wrongly, a record expired early), each put back in process and required to be killed by
the test named beside it. ``make mutation`` measures the whole score (docs/verification.md);
this catches, in about a second, a test or a suite weakened until a sample survives.

A mutant is a textual change to one function (tests/verification/mutants.py); when the
function no longer holds its text, the test fails saying so: rewrite the sample against the
new code.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import pytest

from verification.mutants import Patch, install
from verification.mutation import test_kills_cursor as cursor_kills
from verification.mutation import test_kills_dynamodb_items as items_kills
from verification.mutation import test_kills_import_stream as import_kills
from verification.mutation import test_kills_keys as keys_kills
from verification.mutation import test_kills_models as models_kills
from verification.mutation import test_kills_policy as policy_kills
from verification.mutation import test_kills_resource_claims as claims_kills
from verification.mutation import test_kills_resource_store as store_kills
from verification.mutation import test_kills_sql_retention as retention_kills
from verification.mutation import test_kills_sql_rows as rows_kills
from verification.mutation import test_kills_summary as summary_kills
from verification.mutation import test_kills_sweeper as sweeper_kills
from verification.mutation import test_kills_transfer as transfer_kills


@dataclass(frozen=True)
class Sample:
    patch: Patch
    killed_by: Callable[..., object]  # a test, sync or async, taking at most ``tmp_path``
    args: dict[str, object] = field(default_factory=dict)  # its other parameters


def run(sample: Sample, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    tmp_path.mkdir()
    params = inspect.signature(sample.killed_by).parameters
    args = {"tmp_path": tmp_path, **sample.args} if "tmp_path" in params else dict(sample.args)
    if "clock" in params:  # the sweeper's elapsed time, frozen as the fixture does
        args["clock"] = sweeper_kills.freeze(request.getfixturevalue("monkeypatch"))
    if "monkeypatch" in params:  # the fixed clock and batch size some tests set
        args["monkeypatch"] = request.getfixturevalue("monkeypatch")
    if "store" in params:  # a record store on a fresh table (the moto server, only for these)
        args["store"] = claims_kills.new_store(request.getfixturevalue("moto_endpoint"))
    assert set(params) == set(args), f"{sample.killed_by.__name__} takes {list(params)}"
    result = sample.killed_by(**args)
    if inspect.iscoroutine(result):
        asyncio.run(result)


SUMMARY = "sandbox_ledger.summary"
CURSOR = "sandbox_ledger.cursor"
POLICY = "sandbox_ledger.resources.policy"
ROWS = "sandbox_ledger.sql.rows"
RETENTION = "sandbox_ledger.sql.retention"
KEYS = "sandbox_ledger.keys"
SWEEPER = "sandbox_ledger.resources.sweeper"
ITEMS = "sandbox_ledger.dynamodb._items"
RESOURCE_OPS = "sandbox_ledger.resources._ops"
STORE = "sandbox_ledger.resources.store"
TRANSFER = "sandbox_ledger.transfer"
IMPORT = "sandbox_ledger._import_stream"
SAMPLES = {
    "summary-first-created-wins": Sample(
        Patch(
            SUMMARY,
            "SessionSummary.apply",
            "SandboxCreated and self.started_at is None",
            "SandboxCreated",
        ),
        summary_kills.test_the_summary_is_derived_from_the_events,
    ),
    "summary-exec-count": Sample(
        Patch(SUMMARY, "SessionSummary.apply", "self.exec_count += 1", "self.exec_count = 1"),
        summary_kills.test_the_summary_is_derived_from_the_events,
    ),
    "summary-status-filter": Sample(
        Patch(
            SUMMARY,
            "apply_list_options",
            "d.status == opts.status",
            "d.status != opts.status",
        ),
        summary_kills.test_the_listing_filters_by_status_then_before_then_limits,
    ),
    "summary-page-end": Sample(
        Patch(SUMMARY, "keyset_page", "len(ordered) <= limit", "len(ordered) < limit"),
        summary_kills.test_a_page_that_ends_exactly_at_the_limit_has_no_cursor,
    ),
    "summary-before-edge": Sample(
        Patch(SUMMARY, "keyset_position", "before - 1", "before - 2"),
        summary_kills.test_a_cursor_just_below_before_resumes_the_listing,
    ),
    "cursor-canonical-digest": Sample(
        Patch(CURSOR, "_digest", "sort_keys=True", "sort_keys=False"),
        cursor_kills.test_a_cursor_printed_by_another_process_is_accepted,
    ),
    "cursor-url-safe-alphabet": Sample(
        Patch(CURSOR, "unseal", 'altchars=b"-_", ', ""),
        cursor_kills.test_every_cursor_made_is_accepted_back,
    ),
    "cursor-digest-checked": Sample(
        Patch(
            CURSOR,
            "unseal",
            "if not hmac.compare_digest(digest.encode(), expected.encode()):",
            "if False:",
        ),
        cursor_kills.test_a_cursor_whose_state_was_edited_is_refused,
    ),
    "cursor-bound-to-its-listing": Sample(
        Patch(
            CURSOR,
            "decode_cursor",
            'body["k"] != kind or body["l"] != listing_tag(listing)',
            'body["k"] != kind',
        ),
        cursor_kills.test_a_printed_cursor_belongs_to_its_listing_only,
    ),
    "models-record-path": Sample(
        Patch(
            "sandbox_ledger.models",
            "EnvironmentRecord.unstorable",
            'find_unstorable(wire, "record")',
            'find_unstorable(wire, "entry")',
        ),
        models_kills.test_an_unstorable_environment_field_is_refused_by_its_name,
    ),
    "models-storable-checked": Sample(
        Patch(
            "sandbox_ledger.models",
            "require_storable",
            "if found is not None:",
            "if found is None:",
        ),
        models_kills.test_an_unstorable_environment_field_is_refused_by_its_name,
    ),
    "policy-retention-kept": Sample(
        Patch(POLICY, "ExpiryPolicy.window", "return self.retain_failed or None", "return None"),
        policy_kills.test_each_phase_waits_its_own_window,
    ),
    "policy-window-edge": Sample(
        Patch(POLICY, "expiry_reason", "unchanged_for < window", "unchanged_for <= window"),
        policy_kills.test_each_phase_waits_its_own_window,
    ),
    "policy-owner-alive": Sample(
        Patch(POLICY, "expiry_reason", "if owner_alive is True:", "if owner_alive is False:"),
        policy_kills.test_a_live_owner_keeps_its_record,
    ),
    "policy-hint-band": Sample(
        Patch(POLICY, "ExpiryPolicy.is_hint", "ms < band[0]", "ms > band[0]"),
        policy_kills.test_hints_are_the_records_half_a_window_away,
    ),
    "rows-import-key-of-the-entry": Sample(
        Patch(ROWS, "append_key", "_json.dumps(entry.wire())", "_json.dumps(None)"),
        rows_kills.test_append_at_stores_each_entry_once_per_position,
    ),
    "rows-position-range": Sample(
        Patch(ROWS, "append_key", "0 <= position < 10**20", "0 <= position <= 10**20"),
        rows_kills.test_a_bad_position_is_refused_by_name,
        {"position": 10**20},
    ),
    "rows-page-end": Sample(
        Patch(ROWS, "page_of", "len(found) <= query.limit", "len(found) < query.limit"),
        rows_kills.test_a_page_that_ends_exactly_at_the_limit_has_no_cursor,
    ),
    "rows-expiry-in-seconds": Sample(
        Patch(ROWS, "_columns", "        ts // 1000,", "        ts // 1001,"),
        rows_kills.test_a_fresh_entry_is_kept_for_the_retention,
    ),
    "retention-batch-not-a-bool": Sample(
        Patch(
            RETENTION,
            "check_batch_size",
            "isinstance(batch_size, bool) or not isinstance",
            "not isinstance",
        ),
        retention_kills.test_a_bad_batch_size_is_refused_by_name,
        {"size": True, "message": "must be a positive integer, got True"},
    ),
    "retention-batch-at-most": Sample(
        Patch(RETENTION, "check_batch_size", "batch_size > MAX_BATCH_SIZE", "batch_size >= 10"),
        retention_kills.test_any_batch_size_in_range_purges,
        {"size": 1_000_000},
    ),
    "keys-session-key-length": Sample(
        Patch(KEYS, "session_pk", "{SESSION_PREFIX}{len(name)}#", "{SESSION_PREFIX}"),
        keys_kills.test_a_session_key_gives_back_its_pair_and_no_other,
        {"name": "a#b", "sandbox_id": "c"},
    ),
    "keys-entries-in-time-order": Sample(
        Patch(KEYS, "_ts", "{ts:016d}", "{ts}"),
        keys_kills.test_entries_sort_by_time_then_order_and_parts_follow_their_head,
    ),
    "keys-part-told-from-head": Sample(
        Patch(KEYS, "part_head", "len(part) == 5", "len(part) >= 5"),
        keys_kills.test_a_part_is_told_from_a_head_and_from_other_items,
    ),
    "keys-ttl-in-seconds": Sample(
        Patch(KEYS, "ledger_expires_at", "ts // 1000", "ts // 1001"),
        keys_kills.test_values_at_the_edges_of_their_ranges_are_accepted,
    ),
    "sweeper-live-claim-to-the-lease-end": Sample(
        Patch(SWEEPER, "_held_by_another", "claim_until_ms >= run", "claim_until_ms > run"),
        sweeper_kills.test_a_claim_whose_lease_ends_now_is_still_anothers,
    ),
    "sweeper-publish-within-half-the-lease": Sample(
        Patch(SWEEPER, "_publish_and_delete", "< run.lease_ms / 2", "<= run.lease_ms / 2"),
        sweeper_kills.test_a_claim_too_old_to_publish_is_left_to_a_takeover,
    ),
    "sweeper-safety-margin": Sample(
        Patch(SWEEPER, "sweep", "remaining_ms() < safety_ms", "remaining_ms() <= safety_ms"),
        sweeper_kills.test_exactly_the_safety_margin_left_is_enough,
    ),
    "sweeper-policy-given": Sample(
        Patch(SWEEPER, "_judge", ", policy=run.policy)", ")"),
        sweeper_kills.test_the_records_are_judged_by_the_policy_given,
    ),
    "items-hidden-from-the-ttl-second": Sample(
        Patch(ITEMS, "live", 'int(ttl["N"]) > now_s', 'int(ttl["N"]) >= now_s'),
        items_kills.test_an_item_is_hidden_from_the_second_its_ttl_passes,
    ),
    "items-compressed-from-1024-bytes": Sample(
        Patch(ITEMS, "encode_entry", "len(raw) >= COMPRESS_MIN_BYTES", "len(raw) > 1024"),
        items_kills.test_an_entry_is_compressed_from_1024_bytes_when_that_saves_a_tenth,
    ),
    "items-closed-session-completed": Sample(
        Patch(
            ITEMS,
            "decode_details",
            "status=SandboxStatus.Completed",
            "status=SandboxStatus.Running",
        ),
        items_kills.test_a_summary_item_reads_as_the_sessions_details,
    ),
    "items-summary-in-its-shard": Sample(
        Patch(ITEMS, "summary_fold", "if created or closed else 0", "if created and closed else 0"),
        items_kills.test_a_summary_is_stored_in_its_sessions_shard_with_its_type_and_ttl,
        {"event": "sandbox.created"},
    ),
    "claims-lease-to-its-last-millisecond": Sample(
        Patch(RESOURCE_OPS, "mark_expiring", "#until < :now", "#until <= :now"),
        claims_kills.test_a_live_claim_is_refused_and_an_ended_one_taken_over,
    ),
    "store-scan-in-64-segments": Sample(
        Patch(STORE, "_scan_starts", "1 <= segments <= 64", "1 <= segments < 64"),
        store_kills.test_a_scan_finds_every_record_once_in_pages_of_its_size_per_segment,
        {"segments": 64, "page_size": 1},
    ),
    "store-ttl-horizon-positive": Sample(
        Patch(STORE, "_Base.__init__", "ttl_horizon <= timedelta(0)", "ttl_horizon < timedelta(0)"),
        store_kills.test_a_ttl_horizon_that_is_not_positive_is_refused_by_name,
        {"horizon": timedelta(0)},
    ),
    "transfer-a-bad-entry-with-a-kind": Sample(
        Patch(
            TRANSFER,
            "_typed_line",
            '"kind" not in value or "event"',
            '"kind" not in value and "event"',
        ),
        transfer_kills.test_each_bad_line_fails_alone_with_a_reason_that_says_where,
    ),
    "transfer-stored-identity": Sample(
        Patch(TRANSFER, "content_digest", "hexdigest()[:32]", "hexdigest()[:33]"),
        transfer_kills.test_an_imported_entrys_stored_identity_is_fixed,
    ),
    "transfer-export-progress": Sample(
        Patch(TRANSFER, "export_lines", "progress(1)", "progress(2)"),
        transfer_kills.test_an_export_reads_sessions_of_any_size,
    ),
    "import-expired-at-its-second": Sample(
        Patch(IMPORT, "_write", "expires <= int(time.time())", "expires < int(time.time())"),
        import_kills.test_every_line_is_counted_and_its_progress_reported,
    ),
    "import-first-batch-retention": Sample(
        Patch(
            IMPORT,
            "_stream",
            "took, known = _write(target, batch, counted, report, seconds",
            "took, known = _write(target, batch, counted, report, None",
        ),
        import_kills.test_every_line_is_counted_and_its_progress_reported,
    ),
}


@pytest.mark.parametrize("name", list(SAMPLES))
def test_the_sample_is_killed(
    name: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    sample = SAMPLES[name]
    run(sample, tmp_path / "unchanged", request)  # the test passes on the code as it is
    install(sample.patch, monkeypatch)
    try:
        run(sample, tmp_path / "mutant", request)
    except (Exception, pytest.fail.Exception):  # any failure kills the mutant, as in mutmut
        return
    pytest.fail(f"{name} survived {sample.killed_by.__name__}: {sample.patch}")
