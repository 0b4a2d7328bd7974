"""``cdk synth`` / ``cdk deploy`` entry point: the stack from validated context."""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "adapter"))

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from infra.config import ConfigError, LedgerConfig
from infra.nag import acknowledge
from infra.stack import SandboxLedgerStack


def build(app: cdk.App) -> SandboxLedgerStack:
    """The stack with cdk-nag AwsSolutions checks attached (findings fail the synth)."""
    config = LedgerConfig.from_context(app.node.try_get_context)
    region = app.node.try_get_context("region") or os.environ.get("CDK_DEFAULT_REGION")
    account = app.node.try_get_context("account") or os.environ.get("CDK_DEFAULT_ACCOUNT")
    if config.replica_regions and not region:
        raise ConfigError(
            "replica_regions: the stack needs a region (context region, or "
            "CDK_DEFAULT_REGION as set by cdk deploy)"
        )
    stack = SandboxLedgerStack(
        app,
        str(app.node.try_get_context("stack_name") or "SandboxLedger"),
        config=config,
        env=cdk.Environment(account=account, region=region) if region else None,
        synthesizer=cdk.DefaultStackSynthesizer(generate_bootstrap_version_rule=False)
        if app.node.try_get_context("local")
        else None,
    )
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    acknowledge(stack, tracing=config.tracing)
    return stack


def main() -> None:
    app = cdk.App()
    try:
        build(app)
    except ConfigError as exc:
        print(f"sandbox-ledger: invalid context: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    app.synth()


if __name__ == "__main__":
    main()
