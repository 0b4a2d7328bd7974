"""``sandbox-ledger ui``: the operator's console, a local web view of a ledger (docs/ui.md).

:mod:`.app` builds the ASGI application over any store or an export file (read-only),
:mod:`.guard` keeps it to its own user (a token exchanged for a cookie, the Host checked,
a Content-Security-Policy without inline script), :mod:`.timeline` draws a session as SVG.
It needs the ``ui`` extra (the CLI's install includes it).
"""
