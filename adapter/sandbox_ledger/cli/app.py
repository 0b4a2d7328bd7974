"""Commands of the ``sandbox-ledger`` console script."""

from __future__ import annotations

import asyncio

import typer

from sandbox_ledger.local import embedded_dynamodb

app = typer.Typer(no_args_is_help=True, add_completion=False, help="Operate sandbox ledgers.")


@app.callback()
def _root() -> None:
    """Operate sandbox ledgers on DynamoDB."""


@app.command()
def demo(
    sandboxes: int = typer.Option(20, min=1, help="Sandboxes in the simulated fleet."),
    execs: int = typer.Option(5, min=0, help="Execs per sandbox."),
) -> None:
    """Simulate a fleet on an embedded DynamoDB and print what the ledger holds."""
    from sandbox_ledger.cli.demo import run_demo

    with embedded_dynamodb() as endpoint:
        typer.echo(
            f"Using an embedded DynamoDB at {endpoint}: "
            "its data lives only as long as this command."
        )
        asyncio.run(run_demo(endpoint, sandboxes=sandboxes, execs=execs))


def main() -> None:
    """Console-script entry point."""
    app()
