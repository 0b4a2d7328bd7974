"""``python -m sandbox_ledger.awstest run|clean`` (see the package's docstring)."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import timedelta

from sandbox_ledger.awstest.run import clean, run
from sandbox_ledger.awstest.suites import chosen


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sandbox_ledger.awstest",
        description="The library's suites against a real AWS account (make test-aws), or the "
        "clean-up of what runs left (make test-aws-clean). Needs SANDBOX_LEDGER_AWS_TESTS=1.",
    )
    parser.add_argument(
        "--endpoint-url", help="another endpoint in place of AWS's (tests of the run itself)"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    running = commands.add_parser("run", help="create a table, run the suites, delete it")
    running.add_argument(
        "--suite",
        action="append",
        metavar="NAME",
        help="only the suites whose name holds NAME (repeatable; default: all)",
    )
    running.add_argument("pytest_args", nargs="*", help="after --: passed to each pytest run")
    cleaning = commands.add_parser("clean", help="delete the tables earlier runs left")
    cleaning.add_argument(
        "--min-age",
        type=float,
        default=2.0,
        metavar="HOURS",
        help="spare tables younger than this, a run going on elsewhere (default 2)",
    )
    args = parser.parse_args(argv)
    if args.command == "clean":
        if args.min_age < 0:
            parser.error(f"--min-age: a number of hours, 0 or more, not {args.min_age}")
        return clean(
            os.environ, min_age=timedelta(hours=args.min_age), endpoint_url=args.endpoint_url
        )
    try:
        suites = chosen(args.suite)
    except ValueError as exc:
        parser.error(str(exc))
    return run(
        os.environ, suites, endpoint_url=args.endpoint_url, pytest_args=tuple(args.pytest_args)
    )


if __name__ == "__main__":
    sys.exit(main())
