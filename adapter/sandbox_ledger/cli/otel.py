"""OpenTelemetry export from every command, turned on by the SDK's standard variables.

With ``OTEL_TRACES_EXPORTER`` or ``OTEL_METRICS_EXPORTER`` set to ``otlp`` or ``console``,
or an OTLP endpoint (``OTEL_EXPORTER_OTLP_ENDPOINT``, ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``,
``OTEL_EXPORTER_OTLP_METRICS_ENDPOINT``: OTLP over HTTP, the exporter's own variables for
headers, timeouts and the rest; an endpoint of one signal turns on that signal alone), a
command installs the SDK before it runs and flushes what it recorded when it ends: the traces
and the metrics at once, each request given :data:`EXIT_TIMEOUT` seconds unless
``OTEL_EXPORTER_OTLP_TIMEOUT`` (or a signal's own) says otherwise, so that a collector down
or not answering holds a command a couple of seconds at exit, not the exporter's default ten
per signal. ``console`` writes to stderr (stdout stays the command's data).
``OTEL_SDK_DISABLED=true``, or ``none``, turns it off. The service is ``sandbox-ledger-cli``
unless ``OTEL_SERVICE_NAME`` (or ``OTEL_RESOURCE_ATTRIBUTES``) names another. The OTLP
exporter comes with the ``otel`` extra; without it the command says so once and runs
without export.
"""

from __future__ import annotations

import atexit
import sys
import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

SERVICE = "sandbox-ledger-cli"
_ENDPOINTS = (
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
)
_KINDS = frozenset({"otlp", "console", "none"})


def exporters(environ: Mapping[str, str]) -> tuple[str | None, str | None]:
    """The traces' and metrics' exporters the environment asks for (``otlp``, ``console``,
    or both as the SDK's variables may list them: ``otlp,console``), None for none.

    Raises:
        ValueError: an exporter variable names another (the variable named).
    """
    if environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None, None
    chosen: list[str | None] = []
    for signal_name in ("TRACES", "METRICS"):
        variable = f"OTEL_{signal_name}_EXPORTER"
        given = [
            kind.strip()
            for kind in environ.get(variable, "").strip().lower().split(",")
            if kind.strip()
        ]
        for kind in given:
            if kind not in _KINDS:
                raise ValueError(f"{variable}: otlp, console or none, not {kind!r}")
        # the common endpoint, or this signal's own (not the other signal's: its exporter
        # would send to the default localhost:4318, where nothing may listen)
        endpoint = environ.get(_ENDPOINTS[0]) or environ.get(
            f"OTEL_EXPORTER_OTLP_{signal_name}_ENDPOINT"
        )
        asked = dict.fromkeys(given or ["otlp" if endpoint else "none"])  # in order, once
        kinds = [kind for kind in asked if kind != "none"]
        chosen.append(",".join(kinds) or None)
    return chosen[0], chosen[1]


def configure(environ: Mapping[str, str]) -> bool:
    """Install the SDK with the exporters :func:`exporters` chooses, flushed at exit; False
    if none is asked for (nothing imported) or the OTLP exporter is not installed (said on
    stderr)."""
    traces, metrics_kind = exporters(environ)
    if traces is None and metrics_kind is None:
        return False
    try:
        span_exporters = [
            _span_exporter(kind, _timeout(environ, "TRACES"))
            for kind in (traces or "").split(",")
            if kind
        ]
        metric_exporters = [
            _metric_exporter(kind, _timeout(environ, "METRICS"))
            for kind in (metrics_kind or "").split(",")
            if kind
        ]
    except ImportError as exc:
        print(
            f"sandbox-ledger: OpenTelemetry export needs the otel extra "
            f"(pip install 'sandbox-ledger-dynamodb[otel]'): {exc}; running without it",
            file=sys.stderr,
        )
        return False
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.resources import Resource

    resource = Resource.create(_service(environ))
    providers: list[Any] = []
    if span_exporters:
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        tracer_provider = TracerProvider(resource=resource)
        for span_exporter in span_exporters:
            tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
        trace.set_tracer_provider(tracer_provider)
        providers.append(tracer_provider)
    if metric_exporters:
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader

        readers = [PeriodicExportingMetricReader(exporter) for exporter in metric_exporters]
        meter_provider = MeterProvider(resource=resource, metric_readers=readers)
        metrics.set_meter_provider(meter_provider)
        providers.append(meter_provider)
    atexit.register(_shut_down, providers)
    return True


EXIT_TIMEOUT = 2.0
"""Seconds an OTLP request of the CLI waits for the collector (retries included) when the
environment sets no ``OTEL_EXPORTER_OTLP_TIMEOUT``: the export at exit is bounded by it."""


def _timeout(environ: Mapping[str, str], signal_name: str) -> float | None:
    """The OTLP exporter's timeout: None (the exporter reads the environment's) when the
    environment sets one, else :data:`EXIT_TIMEOUT`."""
    if environ.get(f"OTEL_EXPORTER_OTLP_{signal_name}_TIMEOUT") or environ.get(
        "OTEL_EXPORTER_OTLP_TIMEOUT"
    ):
        return None
    return EXIT_TIMEOUT


def _service(environ: Mapping[str, str]) -> dict[str, str]:
    """The resource's service name as given: ``OTEL_SERVICE_NAME``, else the one
    ``OTEL_RESOURCE_ATTRIBUTES`` names (left to the SDK, which reads it), else
    :data:`SERVICE`."""
    named = environ.get("OTEL_SERVICE_NAME")
    if named:
        return {"service.name": named}
    for pair in environ.get("OTEL_RESOURCE_ATTRIBUTES", "").split(","):
        key, _, value = pair.partition("=")
        if key.strip() == "service.name" and value.strip():
            return {}
    return {"service.name": SERVICE}


def _shut_down(providers: list[Any]) -> None:
    """Flush and shut down the providers at once (each waits at most its exporter's
    timeout for a collector that is down or slow), not one after the other."""
    threads = [threading.Thread(target=provider.shutdown, daemon=True) for provider in providers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def _span_exporter(kind: str, timeout: float | None) -> Any:
    if kind == "console":
        from opentelemetry.sdk.trace.export import ConsoleSpanExporter

        return ConsoleSpanExporter(out=sys.stderr)
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter(timeout=timeout)


def _metric_exporter(kind: str, timeout: float | None) -> Any:
    if kind == "console":
        from opentelemetry.sdk.metrics.export import ConsoleMetricExporter

        return ConsoleMetricExporter(out=sys.stderr)
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter

    return OTLPMetricExporter(timeout=timeout)
