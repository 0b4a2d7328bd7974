"""``cdk synth`` / ``cdk deploy`` entry point: a thin user of the construct library, the
stack from validated context."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import aws_cdk as cdk
from cdk_nag import AwsSolutionsChecks

from sandbox_ledger_cdk import ConfigError, LedgerConfig, SandboxLedger, bundling
from sandbox_ledger_cdk.config import APP_CONTEXT_KEYS


class SandboxLedgerStack(cdk.Stack):
    """The deployment alone in its stack, under the id ``Default``: its logical ids are the
    ones this stack has always had."""

    def __init__(
        self, scope: cdk.App, construct_id: str, *, config: LedgerConfig, **kwargs: Any
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.ledger = SandboxLedger(self, "Default", config=config)


def _tags(raw: object) -> dict[str, str]:
    """The ``tags`` context value: a JSON object of strings (or one, given with ``-c``)."""
    try:
        value = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError:
        value = None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(
            f'tags: must be a JSON object of strings, e.g. {{"team": "x"}}, got {raw!r}'
        )
    return value


def build(app: cdk.App) -> SandboxLedgerStack:
    """The stack with cdk-nag AwsSolutions checks attached (findings fail the synth).

    Raises:
        ConfigError: a bad or unknown context key, named.
    """
    context = app.node.get_all_context()
    config = LedgerConfig.from_context(context, also_known=APP_CONTEXT_KEYS)
    region = context.get("region") or os.environ.get("CDK_DEFAULT_REGION")
    account = context.get("account") or os.environ.get("CDK_DEFAULT_ACCOUNT")
    if config.replica_regions and not region:
        raise ConfigError(
            "replica_regions: the stack needs a region (context region, or "
            "CDK_DEFAULT_REGION as set by cdk deploy)"
        )
    stack = SandboxLedgerStack(
        app,
        str(context.get("stack_name") or "SandboxLedger"),
        config=config,
        env=cdk.Environment(account=account, region=region) if region else None,
        synthesizer=cdk.DefaultStackSynthesizer(generate_bootstrap_version_rule=False)
        if context.get("local")
        else None,
    )
    for key, value in _tags(context.get("tags") or {}).items():
        cdk.Tags.of(stack).add(key, value)
    cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
    return stack


def main() -> None:
    app = cdk.App()
    try:
        build(app)
    except ConfigError as exc:
        print(f"sandbox-ledger: invalid context: {exc}", file=sys.stderr)
        raise SystemExit(2) from exc
    except RuntimeError as exc:
        # CDK wraps a bundling failure in its own error (the asset's path, a JavaScript
        # stack): the bundling's one line says what is missing and what to do.
        if bundling.last_failure is None:
            raise
        print(f"sandbox-ledger: {bundling.last_failure}", file=sys.stderr)
        raise SystemExit(1) from exc
    app.synth()


if __name__ == "__main__":
    main()
