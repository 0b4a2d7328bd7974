"""What OpenTelemetry costs an append, in client CPU with the network removed (replay.py's
tape: responses recorded once from moto, then replayed through botocore's ``before-send``).

Three sides of the same sync ``append`` on one tape, alternating in rounds (process CPU,
median of 31 short rounds each):

- **bare**: the adapter's own method without the telemetry wrapper (``__wrapped__``), on a
  client without the telemetry's retry hooks: the client as it was before the library had
  telemetry, the baseline;
- **no SDK**: the wrapped method in a process without an SDK (its client made so: without
  the retry hooks), what every user who installs none pays; target within 2% of bare;
- **SDK**: the wrapped method with the SDK installed (a tracer provider whose span processor
  hands each span to an exporter that drops it, and a meter provider with an in-memory
  reader) on a client with the retry hooks: what recording costs, before any exporter's
  work.

    python benchmarks/telemetry_cost.py            # 3,000 runs per side
    python benchmarks/telemetry_cost.py --runs 300 # quicker
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from replay import Tape, entry, on_local_server
from sandbox_ledger import LedgerEvent, telemetry
from sandbox_ledger.dynamodb import SyncDynamoDBAdapter

ROUNDS = 31
"""Rounds per side: many short ones, alternating, so that a change in the machine's load
(another process's burst) falls on both sides alike and the median passes it by."""


def cpu_per_run(sides: Sequence[Callable[[], Any]], runs: int) -> list[float]:
    """Process CPU per run in microseconds of each side, rounds alternating between the
    sides, median of :data:`ROUNDS` rounds each."""
    rounds: list[list[float]] = [[] for _ in sides]
    per_round = max(1, runs // ROUNDS)
    for _ in range(ROUNDS):
        for side, fn in enumerate(sides):
            start = time.process_time()
            for _ in range(per_round):
                fn()
            rounds[side].append((time.process_time() - start) / per_round)
    return [statistics.median(r) * 1e6 for r in rounds]


def _install_sdk() -> None:
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult

    class Dropping(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(Dropping()))
    trace.set_tracer_provider(provider)
    metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))


def _taped(endpoint: str, *, hooks: bool) -> tuple[SyncDynamoDBAdapter, Any]:
    """An adapter whose client answers one append from a tape, and that append; with
    ``hooks``, the client with the telemetry's retry hooks, as a client made with an SDK
    installed has them (the SDK is installed later here: they are put on now)."""
    adapter = SyncDynamoDBAdapter("telemetry-bench", endpoint_url=endpoint)
    adapter.table_shard_count()  # the descriptor read before recording
    adapter.append(entry("w", LedgerEvent.SandboxCreated, 999))  # the sequence known
    if hooks:  # as a client made with an SDK installed registers them
        telemetry.register_retry_hooks(adapter.client())
    started = entry("w", LedgerEvent.ExecStarted, 1000, 0, {"cmd": "ls -la"})
    tape = Tape(adapter.client())
    adapter.append(started)
    tape.stop_recording()
    tape.replay()
    return adapter, started


def measure(endpoint: str, runs: int) -> dict[str, float]:
    setup = SyncDynamoDBAdapter("telemetry-bench", endpoint_url=endpoint)
    setup.create_table()
    # The same client and tape for bare and wrapped: one made without an SDK (no hooks).
    before, first = _taped(endpoint, hooks=False)
    later, third = _taped(endpoint, hooks=True)  # as made with an SDK installed
    bare = type(before).append.__wrapped__  # type: ignore[attr-defined]

    def without() -> None:
        bare(before, first)

    def wrapped() -> None:
        before.append(first)

    def recorded() -> None:
        later.append(third)

    without()
    wrapped()
    plain, no_sdk = cpu_per_run([without, wrapped], runs)
    _install_sdk()
    recorded()
    plain_again, with_sdk = cpu_per_run([without, recorded], runs)
    for adapter in (before, later, setup):
        adapter.close()
    return {"bare": plain, "no SDK": no_sdk, "bare again": plain_again, "SDK": with_sdk}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3000)
    args = parser.parse_args()
    figures = on_local_server(measure, args.runs)
    off = figures["no SDK"] / figures["bare"] - 1
    on = figures["SDK"] / figures["bare again"] - 1
    print(f"Client CPU per append (TransactWriteItems), responses replayed ({args.runs} runs)\n")
    print("| side | µs | against bare |")
    print("|---|---:|---:|")
    print(f"| bare (no telemetry wrapper, no hooks) | {figures['bare']:.0f} | |")
    print(f"| wrapped, no SDK | {figures['no SDK']:.0f} | {off:+.1%} |")
    print(f"| bare, again | {figures['bare again']:.0f} | |")
    print(f"| wrapped, SDK recording | {figures['SDK']:.0f} | {on:+.1%} |")
    print(f"\nno SDK within 2% of bare: {'yes' if off <= 0.02 else 'NO'}")


if __name__ == "__main__":
    main()
