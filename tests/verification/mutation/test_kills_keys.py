"""The key schema (``keys.py``) as a deployed table holds it: the keys of known inputs, pinned
(a table written by one version is read by every later one, and its Query order is the order
of these strings), the pairs a session key tells apart and gives back, and the values every
store refuses by name."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest

from sandbox_ledger import keys as k
from sandbox_ledger.errors import InvalidInputError, KeyTooLongError

UUID = "0123abcd-0000-4000-8000-00000000beef"


def test_the_stored_keys_are_those_deployed_tables_hold() -> None:
    assert k.session_pk("build", "sb-1") == "S#5#build#sb-1"
    assert k.session_prefix("build") == "S#5#build#"
    assert k.event_sk(1_700_000_000_123, "o1") == "E#0001700000000123#o1"
    assert k.part_sk("E#0000000000000007#o1", 3) == "E#0000000000000007#o1#00003"
    assert k.checkpoint_sk(7, "o1") == "K#0000000000000007#o1"
    assert k.claim_sk("d1g", 12) == "I#d1g#000012"
    assert k.environment_sk("prod") == "prod"
    assert k.resource_pk(UUID) == f"R#{UUID}"
    assert k.by_name_pk("build") == "N#build"
    assert k.by_name_status_pk("running", "build") == "NS#running#build"
    assert k.all_pk(7) == "A#007"
    assert k.all_status_pk("completed", 7) == "AS#completed#007"
    assert k.resource_phase_pk("ready", 12) == "RP#ready#012"
    assert k.resource_provider_pk("e2b", 3) == "RV#003#e2b"


def test_shards_are_stable_across_processes_and_in_range() -> None:
    # Writers and readers in other processes (and other versions) must agree on a key's shard.
    assert [k.shard_of("S#1#a#b", 64), k.shard_of(f"R#{UUID[:-4]}0001", 4)] == [14, 0]
    assert k.shard_of("é", 7) == 2
    assert {k.shard_of(f"S#1#a#{i}", 4) for i in range(64)} == {0, 1, 2, 3}


@pytest.mark.parametrize(
    ("name", "sandbox_id"),
    [("a#b", "c"), ("a", "b#c"), ("a#", "#c"), ("5#a", "b"), ("ü" * 3, "#"), ("x", "y")],
)
def test_a_session_key_gives_back_its_pair_and_no_other(name: str, sandbox_id: str) -> None:
    pk = k.session_pk(name, sandbox_id)
    assert k.parse_session_pk(pk) == (name, sandbox_id)
    assert pk.startswith(k.session_prefix(name))
    others = [(name + "#", sandbox_id), (name, "#" + sandbox_id), (name[:-1], sandbox_id)]
    assert all(k.session_pk(*o) != pk for o in others if o[0])


@pytest.mark.parametrize("key", ["S#5#buil#d#x", "N#5#build#x", "S#2#a", "S#9#build#sb-1"])
def test_a_key_that_is_not_a_session_key_is_refused(key: str) -> None:
    with pytest.raises(ValueError, match=f"^not a session key: {key!r}$"):
        k.parse_session_pk(key)


def test_entries_sort_by_time_then_order_and_parts_follow_their_head() -> None:
    keys = [k.event_sk(ts, order) for ts, order in [(9, "b"), (10, "a"), (9, "a"), (100, "a")]]
    head = k.event_sk(9, "a")
    keys += [k.part_sk(head, 10), k.part_sk(head, 2)]
    assert sorted(keys) == [
        head,
        k.part_sk(head, 2),
        k.part_sk(head, 10),
        k.event_sk(9, "b"),
        k.event_sk(10, "a"),
        k.event_sk(100, "a"),
    ]


def test_a_part_is_told_from_a_head_and_from_other_items() -> None:
    head = k.event_sk(5, "o1")
    assert k.part_head(k.part_sk(head, 1)) == head
    assert k.part_head(k.part_sk(head, 99_999)) == head
    not_parts = [head, k.checkpoint_sk(5, "o1"), "K#x#y#00001", f"{head}#0001", f"{head}#00x01"]
    not_parts += [f"{head}#000001", "E#1#00001", k.SUMMARY_SK]
    assert [k.part_head(sk) for sk in not_parts] == [None] * len(not_parts)


def test_a_resource_key_gives_back_its_id_and_other_keys_are_refused() -> None:
    assert k.resource_id(k.resource_pk(UUID)) == UUID
    with pytest.raises(ValueError, match="not a resource record key: 'S#1#a#b'"):
        k.resource_id("S#1#a#b")


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        (UUID.upper(), f" (write it as {UUID!r})"),
        (f"urn:uuid:{UUID}", f" (write it as {UUID!r})"),
        (UUID.replace("-", ""), f" (write it as {UUID!r})"),
        ("+" + UUID[1:], ""),  # uuid.UUID reads it as the same id; it is not
        ("not-a-uuid", ""),
        (f" {UUID}", ""),
    ],
)
def test_a_record_id_in_another_spelling_is_refused_with_its_canonical_form(
    value: str, hint: str
) -> None:
    with pytest.raises(InvalidInputError) as raised:
        k.check_record_id(value)
    assert raised.value.field == "id"
    assert str(raised.value) == (
        f"id: {value!r} is not a UUID in canonical form (lowercase, hyphenated){hint}"
    )


def test_a_record_id_that_is_not_a_string_is_refused() -> None:
    with pytest.raises(InvalidInputError, match=r"^id: 7 is not a UUID in canonical form"):
        k.check_record_id(7)


def test_keys_at_dynamodbs_limits_are_accepted_and_one_byte_more_refused() -> None:
    assert k.check_environment_name("é" * 512) == "é" * 512  # 1,024 bytes
    with pytest.raises(KeyTooLongError) as raised:
        k.check_environment_name("é" * 512 + "x")
    assert str(raised.value) == (
        "name: too long for a DynamoDB key (1025 bytes encoded, the limit is 1024)"
    )
    longest = "n" * (2048 - len("NS#completed#"))
    assert k.check_session_key(longest, "s") == (longest, "s")
    with pytest.raises(KeyTooLongError, match=r"^name: too long .*2049 bytes"):
        k.check_session_key(longest + "n", "s")
    pair_limit = 2048 - len("S#1000#") - 1000 - 1
    assert k.session_pk("n" * 1000, "s" * pair_limit)
    with pytest.raises(KeyTooLongError, match=r"^name/sandboxId: too long .*2049 bytes"):
        k.session_pk("n" * 1000, "s" * (pair_limit + 1))
    assert k.by_name_pk("n" * 2046) == "N#" + "n" * 2046
    with pytest.raises(KeyTooLongError, match=r"^name: "):
        k.by_name_pk("n" * 2047)
    with pytest.raises(KeyTooLongError, match=r"^name: "):
        k.by_name_status_pk("running", "n" * 2038)
    with pytest.raises(KeyTooLongError, match=r"^sandboxProvider: "):
        k.resource_provider_pk("p" * 2042, 1)


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: k.session_pk("", "s"), "name: must be a non-empty string"),
        (lambda: k.session_pk("n", ""), "sandboxId: must be a non-empty string"),
        (lambda: k.session_prefix(""), "name: must be a non-empty string"),
        (lambda: k.by_name_pk(""), "name: must be a non-empty string"),
        (lambda: k.check_environment_name(""), "name: must be a non-empty string"),
        (lambda: k.check_component(3, "sandboxId"), "sandboxId: must be a non-empty string"),
        (
            lambda: k.check_component("a\ud800", "name"),
            "name: contains a lone UTF-16 surrogate (not storable as UTF-8)",
        ),
        (lambda: k.check_shard_count(True), "shard_count: must be an integer"),
        (lambda: k.check_shard_count("4"), "shard_count: must be an integer"),
        (lambda: k.check_shard_count(0), "shard_count: must be between 1 and 64"),
        (lambda: k.check_shard_count(65), "shard_count: must be between 1 and 64"),
        (lambda: k.check_table_name("ab"), "table_name: must be a string of 3 to 255 characters"),
        (lambda: k.check_table_name("t" * 256), "table_name: must be a string of 3 to 255"),
        (lambda: k.check_table_name(None), "table_name: must be a string of 3 to 255"),
        (lambda: k.check_occurrence(True), "occurrence: must be an integer from 1 to 999999"),
        (lambda: k.check_occurrence(0), "occurrence: must be an integer from 1 to 999999"),
        (lambda: k.check_occurrence(10**6), "occurrence: must be an integer from 1 to 999999"),
        (lambda: k.check_segments(0), "segments: must be an integer from 1 to 64"),
        (lambda: k.check_segments(65), "segments: must be an integer from 1 to 64"),
        (lambda: k.check_segments(True), "segments: must be an integer from 1 to 64"),
        (lambda: k.check_segments(2.0), "segments: must be an integer from 1 to 64"),
        (
            lambda: k.check_retention(3600),
            "retention: must be a datetime.timedelta or None, got int",
        ),
        (lambda: k.check_retention(timedelta(0)), "retention: must be positive, got 0:00:00"),
    ],
)
def test_bad_values_are_refused_by_name(call: Callable[[], object], message: str) -> None:
    with pytest.raises(InvalidInputError) as raised:
        call()
    assert str(raised.value).startswith(message)


def test_values_at_the_edges_of_their_ranges_are_accepted() -> None:
    assert [k.check_shard_count(1), k.check_shard_count(64)] == [1, 64]
    assert [k.check_table_name("abc"), k.check_table_name("t" * 255)] == ["abc", "t" * 255]
    assert [k.check_occurrence(1), k.check_occurrence(999_999)] == [1, 999_999]
    assert [k.check_segments(None), k.check_segments(1), k.check_segments(64)] == [None, 1, 64]
    assert k.check_retention(None) is None
    assert k.check_retention(timedelta(seconds=1.2)) == 2  # whole seconds, rounded up
    assert k.ledger_expires_at(1_700_000_000_999, 10) == 1_700_000_010
    assert k.ledger_expires_at(5, None) is None


def test_the_table_definition_is_the_deployed_schema() -> None:
    table = k.table_definition("ledger")
    assert table["TableName"] == "ledger" and table["BillingMode"] == "PAY_PER_REQUEST"
    assert table["StreamSpecification"] == {
        "StreamEnabled": True,
        "StreamViewType": "NEW_AND_OLD_IMAGES",
    }
    assert table["KeySchema"] == [
        {"AttributeName": "PK", "KeyType": "HASH"},
        {"AttributeName": "SK", "KeyType": "RANGE"},
    ]
    types = {"PK": "S", "SK": "S", "gsk": "N", "g1pk": "S", "g2pk": "S", "g3pk": "S", "g4pk": "S"}
    assert table["AttributeDefinitions"] == [
        {"AttributeName": a, "AttributeType": t} for a, t in types.items()
    ]
    names = [("byName", "g1pk"), ("byNameStatus", "g2pk"), ("all", "g3pk"), ("allStatus", "g4pk")]
    assert table["GlobalSecondaryIndexes"] == [
        {
            "IndexName": index,
            "KeySchema": [
                {"AttributeName": pk, "KeyType": "HASH"},
                {"AttributeName": "gsk", "KeyType": "RANGE"},
            ],
            "Projection": {"ProjectionType": "KEYS_ONLY"},
        }
        for index, pk in names
    ]
