"""The ledger contract as a Hypothesis state machine: every operation, against one store under
test beside the reference :class:`MemoryAdapter`, every answer compared.

Several clients of the store run operations, some of them concurrently; when the store speaks
to DynamoDB, faults are injected into its clients through botocore's event hooks. An operation
that fails (an error after the SDK's retries, or a client that died between two steps) leaves
its effect *in doubt*: the machine then reads the store with a fault-free checker client and
checks that the outcome is one the model allows (an append either stored once or not at all; a
delete never leaves a state that mixes the old session with new data), and adopts it. At every
quiescent point (no operation in flight, nothing in doubt) the history checker compares the
whole store with the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Any, ClassVar

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, initialize, precondition, rule

from sandbox_ledger import (
    EnvironmentRecord,
    LedgerEntry,
    LedgerError,
    LedgerEvent,
    ListSandboxOptions,
    MemoryAdapter,
)
from sandbox_ledger.transfer import ImportReport, export_lines, import_entries, parse_lines

from . import checks
from .stores import FAULT_KINDS, ClientDied, FaultBoard
from .strategies import (
    ENV_NAMES,
    NAMES,
    FileShape,
    big_entries,
    entries,
    environments,
    file_shapes,
    list_options,
    sessions,
)

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from .stores import Store

T = Any
Key = tuple[str, str]
_FAILURES = (LedgerError, ClientDied)
CLIENTS = 3
# Events whose first occurrence sets a summary field (startedAt, completedAt).
_FIRSTS = (LedgerEvent.SandboxCreated.value, LedgerEvent.SandboxClosed.value)


def _key(entry: LedgerEntry) -> Key:
    return (entry.name, entry.sandbox_id)


def _unlimited(opts: ListSandboxOptions | None) -> ListSandboxOptions | None:
    return opts.model_copy(update={"limit": None}) if opts is not None else None


READS = (
    "read_all",
    "last_checkpoint",
    "list_checkpoints",
    "get_sandbox_details",
    "list_sandbox_details",
    "list_all_sandbox_details",
    "get_environment",
    "list_environments",
)
_fault_kinds = st.sampled_from(FAULT_KINDS)
_fault_shares = st.sampled_from([0.2, 0.5])
_fault_seeds = st.integers(0, 2**16)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 160 else f"{text[:150]}... ({len(text)} chars)"


class OnLoop:
    """A store client seen synchronously from a worker thread (what the importer and the
    exporter drive): each call runs on the machine's event loop."""

    def __init__(self, client: Any, loop: asyncio.AbstractEventLoop) -> None:
        self._client, self._loop = client, loop

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._client, name)

        def call(*args: Any, **kwargs: Any) -> Any:
            coro = _as_coroutine(method(*args, **kwargs))
            return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

        return call


def shaped(lines: Sequence[str], shape: FileShape) -> list[bytes]:
    """An export as someone may import it: a slice of it, reordered, with an overlapping
    repeat of its first lines (a newer export's overlap), blank lines, CRLF and a BOM."""
    start, cut, order_seed, repeat, padded = shape
    chosen = list(lines[min(start, len(lines)) : max(len(lines) - cut, 0)] or lines)
    if order_seed is not None:
        random.Random(order_seed).shuffle(chosen)
    chosen += chosen[:repeat]
    ending = "\r\n" if padded else "\n"
    out = [(line + ending).encode() for line in chosen]
    if padded:
        out = [b"\xef\xbb\xbf\r\n", *out, b"\n"]
    return out


def recorded(method: Callable[..., T]) -> Callable[..., T]:
    """Log the step in the example's history; a failure carries that history as a note (it
    stays readable when a race does not replay and Hypothesis cannot shrink the example)."""

    @functools.wraps(method)
    def step(self: LedgerMachine, **kwargs: Any) -> T:
        args = ", ".join(f"{k}={_short(v)}" for k, v in kwargs.items())
        self.log.append(f"{method.__name__}({args})")
        try:
            return method(self, **kwargs)
        except Exception as exc:
            self.annotate(exc)
            raise

    return step


class LedgerMachine(RuleBasedStateMachine):
    """Set ``subject``, ``runner`` and ``faults`` on a subclass, then run it as a test."""

    exports = Bundle("exports")

    store: ClassVar[Store]
    runner: ClassVar[asyncio.Runner]
    board: ClassVar[FaultBoard | None] = None
    # Appends that race a delete_sandbox: checked only where the adapter promises an outcome.
    delete_races: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        if self.store.reset is not None:
            self.run(self.store.reset())
        if self.board is not None:
            self.board.reset()
        self.model = MemoryAdapter()
        self.free_ts: dict[Key, set[int]] = defaultdict(set)
        self.touched: set[Key] = set()
        self.log: list[str] = []

    def run(self, coro: Awaitable[T]) -> T:
        return self.runner.run(_as_coroutine(coro))

    def annotate(self, exc: BaseException) -> None:
        if getattr(exc, "_history_noted", False):
            return
        exc._history_noted = True  # type: ignore[attr-defined]
        exc.add_note("history of this example, the failing step last:\n  " + "\n  ".join(self.log))
        if self.board is not None:
            exc.add_note(f"faults injected in this example: {self.board.counts()}")

    def teardown(self) -> None:
        if self.board is not None:
            self.board.switch("none", 0.0, 0)
        self.log.append("teardown: check_quiescent()")
        try:
            self.check_quiescent()
        except Exception as exc:
            self.annotate(exc)
            raise

    # -- writes ----------------------------------------------------------------------------

    def _client(self, i: int) -> Any:
        return self.store.clients[i % len(self.store.clients)]

    @rule(client=st.integers(0, CLIENTS - 1), entry=entries())
    @recorded
    def append(self, client: int, entry: LedgerEntry) -> None:
        self._append_all([(client, entry)])

    @rule(client=st.integers(0, CLIENTS - 1), entry=big_entries())
    @recorded
    def append_big(self, client: int, entry: LedgerEntry) -> None:
        self._append_all([(client, entry)])

    @rule(batch=st.lists(st.tuples(st.integers(0, CLIENTS - 1), entries()), min_size=2, max_size=6))
    @recorded
    def append_concurrently(self, batch: list[tuple[int, LedgerEntry]]) -> None:
        """Several clients append at once (first-of-kind events stay unambiguous: at most one
        sandbox.created and one sandbox.closed per session in a batch)."""
        seen: set[tuple[Key, str]] = set()
        kept = []
        for client, entry in batch:
            if entry.event in _FIRSTS:
                if (_key(entry), entry.event) in seen:
                    continue
                seen.add((_key(entry), entry.event))
            kept.append((client, entry))
        self._append_all(kept)

    def _append_all(self, batch: Sequence[tuple[int, LedgerEntry]]) -> None:
        async def go() -> list[BaseException | None]:
            async def one(client: int, entry: LedgerEntry) -> BaseException | None:
                try:
                    await self._client(client).append(entry)
                except _FAILURES as exc:
                    return exc
                return None

            return await asyncio.gather(*(one(c, e) for c, e in batch))

        outcomes = self.run(go())
        ts_count = Counter((_key(e), e.ts) for _, e in batch)
        doubt: dict[Key, list[LedgerEntry]] = defaultdict(list)
        for (_, entry), failure in zip(batch, outcomes, strict=True):
            self.touched.add(_key(entry))
            if ts_count[(_key(entry), entry.ts)] > 1:
                self.free_ts[_key(entry)].add(entry.ts)
            if failure is None:
                self.run(self.model.append(entry))
            else:
                doubt[_key(entry)].append(entry)
        for key, maybe in doubt.items():
            self._resolve_appends(key, maybe)

    def _resolve_appends(self, key: Key, maybe: list[LedgerEntry]) -> None:
        """Failed appends: each is stored once or not at all; adopt what the store holds."""
        stored = self.run(self.store.checker.read_all(*key))
        acknowledged = self.run(self.model.read_all(*key))
        what = f"after failed appends to {key}"
        checks.check_sub_multiset(what, stored, [*acknowledged, *maybe])
        lost = Counter(map(checks.wire, acknowledged)) - Counter(map(checks.wire, stored))
        if lost:
            raise checks.Violation(f"{what}: acknowledged entries lost: {list(lost)}")
        landed = Counter(map(checks.wire, stored)) - Counter(map(checks.wire, acknowledged))
        for entry in maybe:
            if landed[checks.wire(entry)] > 0:
                landed[checks.wire(entry)] -= 1
                self.free_ts[key].add(entry.ts)
                self.run(self.model.append(entry))
        self._check_session(key)

    @rule(client=st.integers(0, CLIENTS - 1), session=sessions)
    @recorded
    def delete_sandbox(self, client: int, session: Key) -> None:
        try:
            self.run(self._client(client).delete_sandbox(*session))
        except _FAILURES:
            self._recover_delete(session)
        self._forget(session)

    def _recover_delete(self, key: Key) -> None:
        """A delete that failed part-way removed some of the session's items and nothing else;
        the caller's retry (here: the checker client) then completes it."""
        stored = self.run(self.store.checker.read_all(*key))
        checks.check_sub_multiset(
            f"after a failed delete of {key}", stored, self.run(self.model.read_all(*key))
        )
        self.run(self.store.checker.delete_sandbox(*key))

    def _forget(self, key: Key) -> None:
        self.run(self.model.delete_sandbox(*key))
        self.free_ts.pop(key, None)
        self.touched.add(key)
        self._check_session(key)

    @precondition(lambda self: self.delete_races)
    @rule(
        session=sessions,
        racing=st.lists(st.tuples(st.integers(0, CLIENTS - 1), entries()), max_size=5),
    )
    @recorded
    def delete_racing_appends(self, session: Key, racing: list[tuple[int, LedgerEntry]]) -> None:
        """Appends race a delete: each either lands before it (and is deleted) or after it
        (and belongs to a new session whose summary counts exactly its own entries)."""
        moved = [
            (c, e.model_copy(update={"name": session[0], "sandbox_id": session[1]}))
            for c, e in racing
        ]
        firsts = [e.event for _, e in moved if e.event in _FIRSTS]
        if len(set(firsts)) != len(firsts):
            return

        async def go() -> None:
            async def one(client: int, entry: LedgerEntry) -> None:
                with contextlib.suppress(*_FAILURES):
                    await self._client(client).append(entry)

            # Every racing append ends before this returns, even when the delete fails: gather
            # without return_exceptions raised at the delete's failure and left appends running,
            # which landed after the cleanup below (the deep profile's "timestamps differ").
            results = await asyncio.gather(
                self._client(0).delete_sandbox(*session),
                *(one(c, e) for c, e in moved),
                return_exceptions=True,
            )
            for result in results:
                if isinstance(result, BaseException):
                    raise result

        try:
            self.run(go())
        except _FAILURES:
            self.run(self.store.checker.delete_sandbox(*session))
            self._forget(session)
            return
        stored = self.run(self.store.checker.read_all(*session))
        what = f"after appends raced a delete of {session}"
        checks.check_sub_multiset(what, stored, [e for _, e in moved])
        details = self.run(self.store.checker.get_sandbox_details(*session))
        checks.check_derivable(what, details, stored)
        self.run(self.model.delete_sandbox(*session))
        self.free_ts.pop(session, None)
        # Adopt the survivors in the store's order (their relative order was a race).
        for entry in stored:
            self.run(self.model.append(entry))
        self.touched.add(session)
        self._check_session(session)

    # -- multi-step operations interrupted by a client that dies -----------------------------

    @precondition(lambda self: self.board is not None)
    @rule(entry=big_entries(), k=st.integers(1, 3))
    @recorded
    def append_big_and_die(self, entry: LedgerEntry, k: int) -> None:
        """The client dies before its k-th SDK call of a multi-part append."""
        assert self.board is not None
        self.board.crash_on_call(k)
        try:
            self.run(self._client(0).append(entry))
        except _FAILURES:
            self.touched.add(_key(entry))
            self._resolve_appends(_key(entry), [entry])
        else:
            self.touched.add(_key(entry))
            self.run(self.model.append(entry))
        finally:
            self.board.disarm()

    @precondition(lambda self: self.board is not None)
    @rule(session=sessions, k=st.integers(1, 3))
    @recorded
    def delete_and_die(self, session: Key, k: int) -> None:
        """The client dies before its k-th SDK call of a delete (after the query, or between
        batches of deletes)."""
        assert self.board is not None
        self.board.crash_on_call(k)
        try:
            self.run(self._client(0).delete_sandbox(*session))
        except _FAILURES:
            self._recover_delete(session)
        finally:
            self.board.disarm()
        self._forget(session)

    @initialize(kind=st.sampled_from(FAULT_KINDS[:-1]), share=_fault_shares, seed=_fault_seeds)
    @recorded
    def start_faults(self, kind: str, share: float, seed: int) -> None:
        """Each example starts with some fault switched on (where faults can be injected)."""
        if self.board is not None:
            self.board.switch(kind, share, seed)

    @precondition(lambda self: self.board is not None)
    @rule(kind=_fault_kinds, share=_fault_shares, seed=_fault_seeds)
    @recorded
    def switch_faults(self, kind: str, share: float, seed: int) -> None:
        assert self.board is not None
        self.board.switch(kind, share, seed)

    # -- export and (re)import --------------------------------------------------------------

    def _sync(self, client: Any) -> OnLoop:
        return OnLoop(client, self.runner.get_loop())

    def _in_thread(self, fn: Callable[[], T]) -> T:
        return self.run(asyncio.to_thread(fn))

    @rule(target=exports, client=st.integers(0, CLIENTS - 1))
    @recorded
    def export(self, client: int) -> tuple[str, ...]:
        """A whole-store export (sessions found by ``scan_sessions``, entries in append order,
        environment records after them): complete, and exactly the model's content."""
        return self._export(client)

    @rule(client=st.integers(0, CLIENTS - 1), shape=file_shapes)
    @recorded
    def export_and_reimport(self, client: int, shape: FileShape) -> None:
        """Export, then import the export back into the store it came from (reshaped): every
        entry is already there, nothing may be added."""
        self._import([(client, shaped(self._export(client), shape))])

    def _export(self, client: int) -> tuple[str, ...]:

        def export_through(adapter: Any) -> list[str]:
            source = self._sync(adapter)
            sessions = source.scan_sessions()
            return list(export_lines(source, sessions, source.list_environments()))

        try:
            lines = self._in_thread(lambda: export_through(self._client(client)))
        except _FAILURES:
            if self.board is None or self.board.kind == "none":
                raise
            lines = self._in_thread(lambda: export_through(self.store.checker))
        exported = [line.rstrip("\n") for line in lines]
        parsed = parse_lines(line.encode() for line in exported)
        if parsed.errors:
            raise checks.Violation(f"export: lines that do not import: {parsed.errors}")
        by_session: dict[Key, list[LedgerEntry]] = defaultdict(list)
        for _, entry in parsed.entries:
            by_session[_key(entry)].append(entry)
        held = {key for key in self.touched if self.run(self.model.read_all(*key))}
        if set(by_session) != held:
            raise checks.Violation(
                f"export: sessions {sorted(by_session)} != sessions with entries {sorted(held)}"
            )
        for key, got in by_session.items():
            in_read_order = sorted(got, key=lambda e: e.ts)  # stable: append order in ties
            expected = self.run(self.model.read_all(*key))
            checks.check_entries(f"export of {key}", in_read_order, expected, self.free_ts[key])
        checks.check_environments(
            "export's environment records",
            [record for _, record in parsed.environments],
            self.run(self.model.list_environments()),
        )
        return tuple(exported)

    @rule(client=st.integers(0, CLIENTS - 1), file=exports, shape=file_shapes)
    @recorded
    def import_file(self, client: int, file: tuple[str, ...], shape: FileShape) -> None:
        """Import an earlier export back (older, overlapping, reordered, padded): each entry of
        the file stored exactly once, none the store holds duplicated."""
        self._import([(client, shaped(file, shape))])

    # Concurrent imports are exactly-once: every store's writes carry their import identity
    # (append_once, declared by TransferAdapter).
    @rule(
        clients=st.tuples(st.integers(0, CLIENTS - 1), st.integers(0, CLIENTS - 1)),
        file=exports,
        shape=file_shapes,
        cut=st.integers(0, 6),
    )
    @recorded
    def import_concurrently(
        self, clients: tuple[int, int], file: tuple[str, ...], shape: FileShape, cut: int
    ) -> None:
        """Two clients import the same export at once, one of them a prefix of it (an older
        export of a growing ledger)."""
        lines = shaped(file, shape)
        self._import([(clients[0], lines), (clients[1], lines[: max(len(lines) - cut, 1)])])

    def _import(self, batch: Sequence[tuple[int, list[bytes]]]) -> None:
        """Run the imports, re-run any that failed through the checker (the operator's retry),
        then check exactly-once against the model as it was before."""
        files = [parse_lines(lines) for _, lines in batch]
        keys = sorted({_key(e) for parsed in files for _, e in parsed.entries})
        before = {key: self.run(self.model.read_all(*key)) for key in keys}

        async def go() -> list[ImportReport | BaseException]:
            async def one(client: int, lines: list[bytes]) -> ImportReport | BaseException:
                target = self._sync(self._client(client))
                try:
                    return await asyncio.to_thread(import_entries, target, parse_lines(lines))
                except _FAILURES as exc:
                    return exc

            return await asyncio.gather(*(one(c, lines) for c, lines in batch))

        outcomes = self.run(go())
        reports = []
        for (_, lines), outcome in zip(batch, outcomes, strict=True):
            if isinstance(outcome, BaseException):
                # Resumed by a second run: what landed counts as already present.
                outcome = self._in_thread(
                    lambda lines=lines: import_entries(
                        self._sync(self.store.checker), parse_lines(lines)
                    )
                )
            else:
                reports.append(outcome)
            if outcome.failed:
                raise checks.Violation(f"import: lines refused: {outcome.failed}")
        # The reference: the longest file (the others are its prefixes) imported into the model.
        longest = max(files, key=lambda parsed: len(parsed.entries) + len(parsed.environments))
        self._in_thread(lambda: import_entries(self._sync(self.model), longest))
        for key in keys:
            self.touched.add(key)
            incoming = [[e for _, e in parsed.entries if _key(e) == key] for parsed in files]
            stored = self.run(self.store.checker.read_all(*key))
            checks.check_imported(f"import into {key}", stored, before[key], incoming)
            model_after = self.run(self.model.read_all(*key))
            what = f"model after import into {key}"
            checks.check_imported(what, model_after, before[key], incoming)
            self._check_session(key)
        checks.check_environments(
            "environments after import",
            self.run(self.store.checker.list_environments()),
            self.run(self.model.list_environments()),
        )
        if len(reports) == len(batch):
            # Every import ran through: together they report each written entry once.
            added = sum(len(self.run(self.model.read_all(*key))) - len(before[key]) for key in keys)
            new = sum(report.new for report in reports)
            if new != added:
                raise checks.Violation(f"imports reported {new} new entries, {added} were added")

    # -- environments ----------------------------------------------------------------------

    @rule(client=st.integers(0, CLIENTS - 1), record=environments())
    @recorded
    def save_environment(self, client: int, record: EnvironmentRecord) -> None:
        try:
            self.run(self._client(client).save_environment(record))
        except _FAILURES:
            # A failed upsert either replaced the record or left the old one.
            got = self.run(self.store.checker.get_environment(record.name))
            old = self.run(self.model.get_environment(record.name))
            if got not in (record, old):
                raise checks.Violation(f"after a failed save: {got!r} is neither") from None
            if got != record:
                return  # it left the old one (or none): the model keeps it too
        self.run(self.model.save_environment(record))

    @rule(client=st.integers(0, CLIENTS - 1), name=st.sampled_from(ENV_NAMES))
    @recorded
    def delete_environment(self, client: int, name: str) -> None:
        try:
            self.run(self._client(client).delete_environment(name))
        except _FAILURES:
            self.run(self.store.checker.delete_environment(name))
        self.run(self.model.delete_environment(name))

    # -- reads: one rule, so that writes stay a fair share of the steps ---------------------

    @rule(
        op=st.sampled_from(READS),
        client=st.integers(0, CLIENTS - 1),
        session=sessions,
        env=st.sampled_from(ENV_NAMES),
        opts=list_options,
    )
    @recorded
    def read(
        self, op: str, client: int, session: Key, env: str, opts: ListSandboxOptions | None
    ) -> None:
        """One read through a (possibly faulty) client: an answer must be one the model allows;
        a failure is allowed only while faults are injected."""
        args: tuple[Any, ...] = {
            "get_environment": (env,),
            "list_environments": (),
            "list_sandbox_details": (session[0], opts),
            "list_all_sandbox_details": (opts,),
        }.get(op, session)
        try:
            got = self.run(getattr(self._client(client), op)(*args))
        except _FAILURES:
            if self.board is None or self.board.kind == "none":
                raise
            return
        getattr(self, f"_check_{op}")(got, *args)

    def _check_read_all(self, got: Any, name: str, sandbox_id: str) -> None:
        expected = self.run(self.model.read_all(name, sandbox_id))
        free = self.free_ts[(name, sandbox_id)]
        checks.check_entries(f"read_all{(name, sandbox_id)}", got, expected, free)

    def _check_last_checkpoint(self, got: Any, name: str, sandbox_id: str) -> None:
        expected = self.run(self.model.read_all(name, sandbox_id))
        free = self.free_ts[(name, sandbox_id)]
        checks.check_last_checkpoint(f"last_checkpoint{(name, sandbox_id)}", got, expected, free)

    def _check_list_checkpoints(self, got: Any, name: str, sandbox_id: str) -> None:
        expected = self.run(self.model.list_checkpoints(name, sandbox_id))
        free = self.free_ts[(name, sandbox_id)]
        got_keys = [(c.created_at, checks.wire(c)) for c in got]
        want_keys = [(c.created_at, checks.wire(c)) for c in expected]
        fixed = [k for k in got_keys if k[0] not in free] == [
            k for k in want_keys if k[0] not in free
        ]
        if not fixed or Counter(got_keys) != Counter(want_keys):
            raise checks.Violation(
                f"list_checkpoints{(name, sandbox_id)}: {got_keys} != {want_keys}"
            )

    def _check_get_sandbox_details(self, got: Any, name: str, sandbox_id: str) -> None:
        expected = self.run(self.model.get_sandbox_details(name, sandbox_id))
        if got != expected:
            raise checks.Violation(
                f"get_sandbox_details{(name, sandbox_id)}: {got!r} != {expected!r}"
            )

    def _listing_check(self) -> Callable[..., None]:
        """What a listing made now is held to: the model's listing, or, on a store whose
        listings are eventually consistent, the model's with sessions left out."""
        if getattr(self.store.checker, "consistent_listings", True):
            return checks.check_listing
        return checks.check_listing_left_out

    def _check_list_sandbox_details(
        self, got: Any, name: str, opts: ListSandboxOptions | None
    ) -> None:
        expected = self.run(self.model.list_sandbox_details(name, _unlimited(opts)))
        what = f"list_sandbox_details({name!r}, {opts!r})"
        self._listing_check()(what, got, expected, opts and opts.limit)

    def _check_list_all_sandbox_details(self, got: Any, opts: ListSandboxOptions | None) -> None:
        expected = self.run(self.model.list_all_sandbox_details(_unlimited(opts)))
        self._listing_check()(
            f"list_all_sandbox_details({opts!r})", got, expected, opts and opts.limit
        )

    def _check_get_environment(self, got: Any, name: str) -> None:
        expected = self.run(self.model.get_environment(name))
        if got != expected:
            raise checks.Violation(f"get_environment({name!r}): {got!r} != {expected!r}")

    def _check_list_environments(self, got: Any) -> None:
        expected = self.run(self.model.list_environments())
        checks.check_environments("list_environments", got, expected)

    # -- the history checker ----------------------------------------------------------------

    def _check_session(self, key: Key) -> None:
        checker = self.store.checker
        stored = self.run(checker.read_all(*key))
        expected = self.run(self.model.read_all(*key))
        checks.check_entries(f"stored entries of {key}", stored, expected, self.free_ts[key])
        details = self.run(checker.get_sandbox_details(*key))
        checks.check_derivable(f"summary of {key}", details, stored)
        expected_details = self.run(self.model.get_sandbox_details(*key))
        if details != expected_details:
            raise checks.Violation(f"summary of {key}: {details!r} != {expected_details!r}")

    @rule()
    @recorded
    def check_quiescent(self) -> None:
        """Every session touched matches the model exactly; listings list each session once."""
        for key in sorted(self.touched):
            self._check_session(key)
        if self.store.settle is not None:  # the listings' settled state: indexes caught up
            self.run(self.store.settle())
        checker = self.store.checker
        expected = self.run(self.model.list_all_sandbox_details())
        checks.check_listing(
            "list_all_sandbox_details()",
            self.run(checker.list_all_sandbox_details()),
            expected,
            None,
        )
        checks.check_environments(
            "list_environments()",
            self.run(checker.list_environments()),
            self.run(self.model.list_environments()),
        )
        self._check_paging(None)
        for name in NAMES:
            self._check_paging(name)

    def _check_paging(self, name: str | None) -> None:
        """Paging with the contract's cursors (limit 2, ties included) lists every session
        exactly once, newest first."""
        checker = self.store.checker
        pages, cursor = [], None
        for _ in range(50):
            opts = ListSandboxOptions(limit=2, cursor=cursor)
            if name is None:
                page = self.run(checker.list_all_sandbox_page(opts))
            else:
                page = self.run(checker.list_sandbox_page(name, opts))
            pages.append(page.sessions)
            cursor = page.cursor
            if cursor is None:
                break
        if name is None:
            expected = self.run(self.model.list_all_sandbox_details())
        else:
            expected = self.run(self.model.list_sandbox_details(name))
        checks.check_pages(f"pages of {name or 'every name'}", pages, expected)


async def _as_coroutine(awaitable: Awaitable[T]) -> T:
    return await awaitable
