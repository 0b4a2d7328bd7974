"""What the console shows of the ledger's text: every character that reorders or hides the
text around it as its escape."""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

# Characters that reorder or hide the text around them (bidirectional overrides and
# isolates, zero-width marks) or control a terminal (C0 but tab and newline, DEL, C1):
# shown as their escapes, so that a name
# reads as what it is ("\u202etxt.exe" is not "exe.txt").
_HIDDEN = {
    code: f"\\u{code:04x}"
    for code in [
        *range(0x09),
        *range(0x0B, 0x20),
        *range(0x7F, 0xA0),
        *range(0x200B, 0x2010),
        *range(0x202A, 0x202F),
        *range(0x2066, 0x206A),
        0xFEFF,
    ]
}


def visible(value: Any) -> Any:
    """Every text a page shows, with :data:`_HIDDEN` characters as escapes (markup the
    library made, the timeline's SVG, passes untouched)."""
    # Every hidden character is unprintable (Cc or Cf): a printable text (most of them)
    # holds none, and is shown as it is without a pass over it (a session page of 5,000
    # entries shows about 38,000 texts).
    if isinstance(value, str) and not isinstance(value, Markup) and not value.isprintable():
        return value.translate(_HIDDEN)
    return value
