"""Hypothesis strategies for the ledger's inputs: small pools of names and timestamps, so that
sequences collide (same session, equal ts, equal startedAt), and exotic values everywhere."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from sandbox_ledger import (
    EnvironmentRecord,
    LedgerEntry,
    LedgerEvent,
    ListSandboxOptions,
    SandboxStatus,
)
from sandbox_ledger._json import MAX_SAFE_INTEGER
from sandbox_ledger.testing.conformance import EXOTIC_PAYLOADS

NAMES = ("alpha", "beta", "名前 with spaces/#")
SANDBOX_IDS = ("s1", "s2", "s#3:x")
ENV_NAMES = ("python", "node", "ünïcode env")

# Mostly a handful of small values (ties, out-of-order appends), sometimes the far ends.
timestamps = st.one_of(st.integers(0, 6), st.sampled_from([1_700_000_000_000, MAX_SAFE_INTEGER]))

sessions = st.tuples(st.sampled_from(NAMES), st.sampled_from(SANDBOX_IDS))

# Any text JSON and DynamoDB can carry: lone surrogates are excluded (UTF-8 cannot encode them).
texts = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)

json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(2**70), 10**40),
        st.floats(allow_nan=False, allow_infinity=False),
        texts,
    ),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=6,
)

# The contract suite's exotic values (unicode, NUL, 1e-300, 5e-324, integers past 64 bits, empty
# keys), drawn as often as generated ones: generated JSON rarely reaches them.
exotic_json = st.one_of(st.sampled_from(EXOTIC_PAYLOADS), json_values)


# Values a Python caller may hand over as JSON and JSON cannot all carry: NaN and the
# infinities, integers around the digit limit, lone surrogates, bytes, sets, objects, tuples,
# keys that are not strings.
_odd_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=10**4299, max_value=10**4301),  # around the digit limit
    st.floats(),  # NaN and the infinities included
    st.text(max_size=5),
    st.sampled_from([b"bytes", {1, 2}, object(), 1.0, -0.0]),
)
odd_values: st.SearchStrategy[Any] = st.recursive(
    _odd_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=3), inner, max_size=4),
        st.dictionaries(st.integers(0, 3), inner, min_size=1, max_size=2),
        st.dictionaries(st.sampled_from([None, True, 1.5]), inner, min_size=1, max_size=2),
    ),
    max_leaves=12,
)

EVENTS = (*(e.value for e in LedgerEvent), "custom.from-a-newer-client")
# Summary-moving events (and checkpoints, which write a marker too) drawn more often.
_WEIGHTED_EVENTS = (
    *EVENTS,
    LedgerEvent.ExecComplete.value,
    LedgerEvent.ExecComplete.value,
    LedgerEvent.CheckpointCreated.value,
)


def entry_for(
    session: tuple[str, str],
    event: str,
    ts: int,
    payload: Any,
    step: int = -1,
    branch: int | None = None,
    error: str | None = None,
) -> LedgerEntry:
    name, sandbox_id = session
    return LedgerEntry(
        ts=ts,
        name=name,
        sandbox_id=sandbox_id,
        step_index=step,
        branch=branch,
        event=event,
        payload=payload,
        error=error,
    )


checkpoint_payloads = st.one_of(
    st.fixed_dictionaries(
        {"snapshotId": st.one_of(texts, st.integers()), "name": st.one_of(texts, st.none())}
    ),
    exotic_json,
)


@st.composite
def entries(draw: st.DrawFn, session: tuple[str, str] | None = None) -> LedgerEntry:
    """One entry of any event kind, for a session from the pools."""
    event = draw(st.sampled_from(_WEIGHTED_EVENTS))
    payload = draw(
        checkpoint_payloads if event == LedgerEvent.CheckpointCreated.value else exotic_json
    )
    return entry_for(
        session or draw(sessions),
        event,
        draw(timestamps),
        payload,
        draw(st.integers(-1, 3)),
        draw(st.one_of(st.none(), st.integers(0, 2))),
        draw(st.one_of(st.none(), texts)),
    )


@st.composite
def big_entries(draw: st.DrawFn) -> LedgerEntry:
    """An entry past the DynamoDB adapter's 350 KB part size (multi-byte text included)."""
    size = draw(st.sampled_from([360_000, 900_000]))
    event = draw(st.sampled_from([LedgerEvent.ExecComplete.value, LedgerEvent.CheckpointCreated]))
    payload = {"snapshotId": "big", "blob": "é✓" * (size // 5), "n": draw(st.integers(0, 9))}
    return entry_for(draw(sessions), str(event), draw(timestamps), payload, 0)


list_options = st.one_of(
    st.none(),
    st.builds(
        ListSandboxOptions,
        status=st.one_of(st.none(), st.sampled_from(list(SandboxStatus))),
        before=st.one_of(st.none(), timestamps),
        limit=st.one_of(st.none(), st.integers(0, 4)),
    ),
)


@st.composite
def environments(draw: st.DrawFn) -> EnvironmentRecord:
    """An environment record with extra fields of any non-null JSON value."""
    extras = draw(
        st.dictionaries(
            st.sampled_from(["image", "digest", "meta", "sizes"]),
            json_values.filter(lambda v: v is not None),
            max_size=3,
        )
    )
    return EnvironmentRecord(
        name=draw(st.sampled_from(ENV_NAMES)), built_at=draw(timestamps), **extras
    )


FileShape = tuple[int, int, "int | None", int, bool]
"""How an export is imported: lines dropped from its start and its end, a shuffle seed (None:
the export's order), how many of its first lines are repeated at its end (an overlap), and
whether it is padded (BOM, blank lines, CRLF)."""

file_shapes = st.tuples(
    st.integers(0, 4),
    st.integers(0, 4),
    st.one_of(st.none(), st.integers(0, 2**16)),
    st.integers(0, 4),
    st.booleans(),
)
