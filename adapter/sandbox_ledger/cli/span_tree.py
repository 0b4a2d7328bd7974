"""``sandbox-ledger demo --trace``: the spans of one sandbox's life, recorded in memory and
printed as a tree (each span's name, what it touched and how long it took)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rich.console import Console

SANDBOX_SPAN = "sandbox"
"""The name of the span the demo opens around each sandbox's life."""

_SHOWN = ("sandbox.event", "sandbox_ledger.sweep.expired")


class Recorder:
    """Spans recorded in memory from now on: on the SDK provider the process has (a command
    whose OTEL_* variables installed one keeps exporting), else on one installed here."""

    def __init__(self) -> None:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        self.exporter = InMemorySpanExporter()
        provider = trace.get_tracer_provider()
        if not isinstance(provider, TracerProvider):
            provider = TracerProvider()
            trace.set_tracer_provider(provider)
        provider.add_span_processor(SimpleSpanProcessor(self.exporter))

    def spans(self) -> list[Any]:
        return list(self.exporter.get_finished_spans())


def tree_lines(spans: list[Any], root_id: str) -> list[str]:
    """The span of the sandbox ``root_id`` (``name/sandboxId``) and every span of its trace
    under it, children in start order: one line each, indented, with its duration."""
    roots = [
        s for s in spans if s.name == SANDBOX_SPAN and s.attributes.get("sandbox.path") == root_id
    ]
    if not roots:
        return []
    root = roots[0]
    trace_id = root.context.trace_id
    children: dict[int, list[Any]] = {}
    for span in spans:
        if span.context.trace_id == trace_id and span.parent is not None:
            children.setdefault(span.parent.span_id, []).append(span)
    lines: list[str] = []

    def walk(span: Any, prefix: str, last: bool, top: bool) -> None:
        took = (span.end_time - span.start_time) / 1e6
        shown = " ".join(
            f"{key.rsplit('.', 1)[-1]}={span.attributes[key]}"
            for key in _SHOWN
            if key in span.attributes
        )
        label = f"{span.name} {root_id}" if top else span.name
        branch = "" if top else ("└─ " if last else "├─ ")
        events = [e.name for e in span.events]
        extra = f" [{', '.join(events)}]" if events else ""
        lines.append(f"{prefix}{branch}{label}{' ' + shown if shown else ''}  {took:.1f} ms{extra}")
        kids = sorted(children.get(span.context.span_id, []), key=lambda s: s.start_time)
        inner = prefix if top else prefix + ("   " if last else "│  ")
        for i, kid in enumerate(kids):
            walk(kid, inner, i == len(kids) - 1, False)

    walk(root, "", True, True)
    return lines


def show(console: Console, spans: list[Any], root_id: str) -> None:
    """Print the tree of ``root_id``'s life, or say there was none."""
    lines = tree_lines(spans, root_id)
    if not lines:
        console.print(f"no spans recorded for {root_id}", markup=False, highlight=False)
        return
    console.print(f"the life of {root_id}, span by span:", markup=False, highlight=False)
    for line in lines:
        console.print(line, markup=False, highlight=False, soft_wrap=True)
