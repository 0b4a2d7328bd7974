"""``python -m sandbox_ledger_cdk.wheelhouse DIR``: download the Lambda asset's locked
packages into ``DIR`` once (the only step that needs the package index); a synth with
``SANDBOX_LEDGER_WHEELHOUSE=DIR`` then bundles from it, offline."""

from __future__ import annotations

import sys

from .bundling import WHEELHOUSE_ENV, BundlingError, fill_wheelhouse
from .deployment import PYTHON_VERSION


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0].startswith("-"):
        print("usage: python -m sandbox_ledger_cdk.wheelhouse DIR", file=sys.stderr)
        return 2
    try:
        target = fill_wheelhouse(args[0], python_version=PYTHON_VERSION)
    except BundlingError as exc:
        print(f"sandbox-ledger: {exc}", file=sys.stderr)
        return 1
    print(f"wheelhouse: {target} (synthesize with {WHEELHOUSE_ENV}={target})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
