"""The per-line work an import does, made cheaper (issue 26) without changing one result: the
JSON encoders built once, the content digest taken over a view of the entry instead of its
``model_dump``, the collector's threshold raised while an import runs, and the interleaved
sessions' counts kept under their key's JSON text."""

from __future__ import annotations

import gc
import json
import threading
from collections import Counter
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sandbox_ledger import LedgerEntry, _json
from sandbox_ledger import _import_stream as stream
from sandbox_ledger.memory import MemoryAdapter
from sandbox_ledger.transfer import content_digest, import_lines
from verification.digests import old_digest
from verification.strategies import odd_values


def _outcome(encode: Any, value: object) -> tuple[str, Any]:
    try:
        return "ok", encode(value)
    except (ValueError, TypeError) as exc:
        return type(exc).__name__, str(exc)


@given(odd_values)
def test_the_encoders_built_once_encode_and_refuse_as_json_encoder_does(value: object) -> None:
    compact = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    sorted_ = json.JSONEncoder(
        ensure_ascii=False, allow_nan=False, separators=(",", ":"), sort_keys=True
    )
    assert _outcome(lambda v: _json.dumps(v).decode("utf-8", "surrogatepass"), value) == _outcome(
        lambda v: (
            compact.encode(v).encode("utf-8", "surrogatepass").decode("utf-8", "surrogatepass")
        ),
        value,
    )
    assert _outcome(_json.canonical, value) == _outcome(sorted_.encode, value)
    ascii_ = json.JSONEncoder(separators=(",", ":"))
    assert _outcome(_json.ascii_text, value) == _outcome(ascii_.encode, value)


def test_a_value_that_holds_itself_is_named_a_circular_reference() -> None:
    value: dict[str, Any] = {"a": [1]}
    value["a"].append(value)
    for encode in (_json.dumps, _json.canonical, _json.ascii_text):
        with pytest.raises(ValueError, match="Circular reference detected"):
            encode(value)
    # And the encoder is not left holding anything of it: the next value encodes.
    assert _json.canonical({"b": 1, "a": [2]}) == '{"a":[2],"b":1}'


_JSON = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 2**70),
        st.floats(allow_nan=False, allow_infinity=False),
    )
    | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=8,
)
_EXTRA_KEYS = st.sampled_from(["traceId", "sandbox_id", "step_index", "zeta", "", "ä"])


@given(
    ts=st.integers(0, 2**53 - 1),
    step=st.integers(-1, 2**63),
    branch=st.none() | st.integers(-(2**64), 2**64),
    event=st.sampled_from(["sandbox.created", "exec.complete", "custom"]),
    payload=_JSON,
    error=st.none() | st.text(max_size=4),
    extras=st.dictionaries(_EXTRA_KEYS, _JSON, max_size=3),
)
def test_the_content_digest_is_the_one_taken_over_the_wire_shape(
    ts: int,
    step: int,
    branch: int | None,
    event: str,
    payload: Any,
    error: str | None,
    extras: dict[str, Any],
) -> None:
    """The digest is an entry's identity in every store's claims: the view it is taken over
    must give the same text as ``wire()`` for every entry, unknown fields (null ones, one
    named like a field's Python name) included, as parsed from a line or built in Python."""
    wire = {"ts": ts, "name": "n", "sandboxId": "s", "stepIndex": step, "event": event}
    wire.update({"branch": branch, "payload": payload, "error": error})
    wire.update(extras)
    for entry in (
        LedgerEntry.model_validate(wire),
        LedgerEntry.model_validate_json(json.dumps(wire)),
    ):
        assert content_digest(entry) == old_digest(entry)


def test_a_payload_changed_in_place_is_digested_or_refused_as_its_wire_shape_is() -> None:
    from dataclasses import dataclass

    @dataclass
    class Point:
        x: int

    entry = LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=0, event="e", payload={"a": 1})
    entry.payload["p"] = Point(3)  # pydantic's wire shape serializes it as {"x": 3}
    assert content_digest(entry) == old_digest(entry)
    entry.payload["p"] = {1, 2}
    with pytest.raises(TypeError):
        old_digest(entry)
    with pytest.raises(TypeError):
        content_digest(entry)


def _file(sessions: int) -> list[bytes]:
    return [
        json.dumps(
            {"ts": i, "name": "n", "sandboxId": f"s{i // 3}", "stepIndex": 0, "event": "e"}
        ).encode()
        for i in range(sessions * 3)
    ]


def test_an_import_raises_the_collectors_threshold_and_puts_it_back() -> None:
    before = gc.get_threshold()
    seen: list[tuple[int, int, int]] = []

    class Watching(MemoryAdapter):
        def append_once_many(self, *args: Any, **kwargs: Any) -> Any:
            seen.append(gc.get_threshold())
            return super().append_once_many(*args, **kwargs)

    from sandbox_ledger.blocking import BlockingAdapter

    with BlockingAdapter(Watching()) as target:
        report = import_lines(target, _file(4))  # type: ignore[arg-type]
    assert report.new == 12
    assert seen and all(t == (stream.YOUNG_OBJECTS, before[1], before[2]) for t in seen)
    assert gc.get_threshold() == before


def test_the_threshold_found_is_kept_when_it_is_off_or_higher_or_changed_meanwhile() -> None:
    before = gc.get_threshold()
    try:
        for found in ((0, 10, 10), (stream.YOUNG_OBJECTS * 2, 5, 5)):
            gc.set_threshold(*found)
            with stream._fewer_collections():
                assert gc.get_threshold() == found
            assert gc.get_threshold() == found
        gc.set_threshold(700, 10, 10)
        with stream._fewer_collections():
            gc.set_threshold(1234, 10, 10)  # the program set its own: left as it set it
        assert gc.get_threshold() == (1234, 10, 10)
        with pytest.raises(RuntimeError), stream._fewer_collections():
            raise RuntimeError  # an import that fails puts it back too
        assert gc.get_threshold() == (1234, 10, 10)
    finally:
        gc.set_threshold(*before)


def test_imports_in_several_threads_leave_the_threshold_as_found() -> None:
    """The first import raises the threshold; one started meanwhile finds it raised and
    leaves it; the first to end puts back what the first found, and the others run on at
    it; when all ended it is as found."""
    before = gc.get_threshold()
    first_in, second_in, first_out = threading.Event(), threading.Event(), threading.Event()
    inside: list[tuple[int, int, int]] = []

    def first() -> None:
        with stream._fewer_collections():
            first_in.set()
            inside.append(gc.get_threshold())
            second_in.wait(5)
        first_out.set()

    def second() -> None:
        first_in.wait(5)
        with stream._fewer_collections():
            second_in.set()
            first_out.wait(5)
            inside.append(gc.get_threshold())

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert inside == [(stream.YOUNG_OBJECTS, before[1], before[2]), before]
    assert gc.get_threshold() == before


def test_interleaved_sessions_counts_come_back_for_every_key() -> None:
    """The counts of written sessions are kept under their key's JSON text: keys that differ
    in any character (a lone surrogate, which SQLite's text cannot hold, included) stay
    apart."""
    counted = stream._Counted()
    keys = [("n", "a"), ("n", "a\ud800"), ("n", "a\udc00"), ("n\x00", "a"), ("n", "a\x00")]
    try:
        counted.record({key: Counter({f"d{i}": i + 1}) for i, key in enumerate(keys)})
        for i, key in enumerate(keys):
            assert counted.prior(key) == Counter({f"d{i}": i + 1})
        assert counted.prior(("m", "z")) == Counter()
    finally:
        counted.close()


class _Text(str):
    """A str subclass a caller may pass for a text field."""


def test_the_digest_of_texts_that_need_escaping_or_are_str_subclasses_is_unchanged() -> None:
    odd = 'a"b\\c\n\x00\x1f é 名 \U0001f600 \u2028'
    for text in (odd, _Text(odd), _Text("plain")):
        entry = LedgerEntry(
            ts=2**53 - 1,
            name=text,
            sandbox_id=text,
            step_index=-1,
            branch=-(2**63),
            event=text,
            payload={"z": [text, 1.5e300, -0.0], "a": None},
            error=text,
        )
        assert content_digest(entry) == old_digest(entry)
