"""``sandbox-ledger ui``: the operator's console, a local web view of a ledger (docs/ui.md).

:mod:`.app` builds the ASGI application over any store or an export file (read-only),
:mod:`.guard` keeps it to its own user (a token exchanged for a cookie, the Host checked,
a Content-Security-Policy without inline script), :mod:`.timeline` draws a session as SVG.
It needs the ``ui`` extra (the CLI's install includes it).
"""

import importlib.util

for _needed in ("starlette", "jinja2", "markupsafe"):
    if importlib.util.find_spec(_needed) is None:
        raise ModuleNotFoundError(
            "sandbox_ledger.ui needs Starlette, uvicorn and Jinja2: "
            f"pip install 'sandbox-ledger-dynamodb[ui]' (missing module: {_needed})",
            name=_needed,
        )
