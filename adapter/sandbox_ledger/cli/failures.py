"""Every failure as one clear line on stderr and the documented exit code (docs/cli.md)."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, ParamSpec, TypeVar, cast

import typer

from sandbox_ledger._redact import scrub
from sandbox_ledger.cli.connect import current_target
from sandbox_ledger.cli.interrupt import Terminated, interrupted_line, signal_number
from sandbox_ledger.cli.output import CommandError, ExitCode, quiet_stdout, say
from sandbox_ledger.errors import (
    NO_REGION_FIX,
    AccessDeniedError,
    ConfigurationError,
    InvalidInputError,
    LedgerError,
    StoreNotFoundError,
    TableNotFoundError,
)

if TYPE_CHECKING:
    from collections.abc import Callable

    from sandbox_ledger.cli.context import Target

P = ParamSpec("P")
R = TypeVar("R")


def handled(fn: Callable[P, R]) -> Callable[P, R]:
    """One clear line on stderr and the documented exit code for every failure (--debug
    re-raises); a closed stdout ends the command quietly."""

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        ctx = cast("typer.Context | None", kwargs.get("ctx"))  # every command takes it as ctx
        target = current_target(ctx) if ctx is not None else None
        try:
            return fn(*args, **kwargs)
        except (typer.Exit, typer.Abort, typer.TyperException):  # usage errors: click's
            raise
        except BrokenPipeError:
            quiet_stdout()
            raise typer.Exit(ExitCode.CLOSED_PIPE) from None
        except (KeyboardInterrupt, Terminated) as stop:
            number = signal_number(stop)
            try:
                command = ctx.command_path.split(" ", 1)[-1] if ctx is not None else ""
                so_far = target.so_far() if target is not None and target.so_far else None
                say(interrupted_line(command, number, so_far))
            except (KeyboardInterrupt, Terminated):
                # A second signal while saying so (Ctrl-C, then a supervisor's SIGTERM): the
                # first one's exit code still, not a traceback and exit 1.
                pass
            raise typer.Exit(ExitCode(128 + number)) from None
        except Exception as exc:
            if target is not None and target.debug:
                raise
            code, line = failure(exc, target)
            if code == ExitCode.FAILED and target and target.after_failure:
                done = target.after_failure()
                line = f"{line}; {done}" if done else line
            # Whatever the message quotes (a driver's error, a URL), no password or AWS secret.
            secrets = (target.store, target.endpoint_url) if target is not None else ()
            say(f"error: {scrub(line, *secrets)}")
            raise typer.Exit(code) from exc

    return wrapper


def failure(exc: BaseException, target: Target | None) -> tuple[ExitCode, str]:
    """The exit code and the one line for a failure."""
    from botocore.exceptions import BotoCoreError, ClientError

    from sandbox_ledger.errors import translate_client_error

    sdk = exc if isinstance(exc, ClientError | BotoCoreError) else exc.__cause__
    if isinstance(exc, LedgerError) or not isinstance(sdk, ClientError | BotoCoreError):
        error: BaseException = exc
    else:
        error = translate_client_error(sdk)
    text = " ".join(str(error).split())
    if isinstance(error, CommandError):
        return error.exit_code, text
    if isinstance(error, ConfigurationError) and text == NO_REGION_FIX:
        return ExitCode.FAILED, (
            "no AWS region configured: give --region REGION, or set AWS_REGION (or "
            "AWS_DEFAULT_REGION), or use a profile with a region (--profile NAME)"
        )
    if isinstance(error, StoreNotFoundError) and target is not None:
        return ExitCode.NOT_FOUND, (
            f"{text}; check the {target.describe()}, or create the ledger with a write such "
            f"as `{target.command('import', 'FILE')}`"
        )
    if isinstance(error, TableNotFoundError) and target is not None and target.table:
        return ExitCode.NOT_FOUND, (
            f"table {target.table} not found {target.place()}; create it with "
            f"`{target.command('table create')}` (or deploy the stack)"
        )
    if isinstance(error, InvalidInputError) and error.field == "table_name" and target:
        return ExitCode.USAGE, f"{target.table_source()}: {text.split(': ', 1)[-1]}"
    if isinstance(error, InvalidInputError):
        # Only our own input checks are usage errors: a bare ValueError is a failure (a bug,
        # a store read going wrong), not something the user can fix in the command line.
        return ExitCode.USAGE, text
    if not isinstance(error, LedgerError | OSError | ClientError | BotoCoreError):
        # Not a failure the library reports (a bug, a bare ValueError): say what it was.
        return ExitCode.FAILED, f"{text} ({type(error).__name__}; --debug shows the traceback)"
    if target is None or not isinstance(sdk, ClientError | BotoCoreError):
        return ExitCode.FAILED, text
    return ExitCode.FAILED, _sdk_failure(sdk, error, text, target)


def _sdk_failure(sdk: BaseException, error: BaseException, text: str, target: Target) -> str:
    """The line for a failure the AWS SDK reported."""
    from botocore.exceptions import ClientError, HTTPClientError, ReadTimeoutError
    from botocore.exceptions import ConnectionError as SDKConnectionError

    response = getattr(sdk, "response", None) or {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    details = response.get("Error", {})
    message, code = str(details.get("Message", "")), str(details.get("Code", ""))
    # botocore uses the HTTP status as the code when the body holds no AWS error (a proxy's
    # 404, a server's 500 page): the endpoint is not DynamoDB, or not for this region.
    not_dynamodb = code.isdigit() or message.lstrip().startswith("<") or status >= 500
    if isinstance(sdk, ClientError) and not_dynamodb:
        return (
            f"DynamoDB at {target.where()} answered HTTP {status} with no DynamoDB error in it; "
            "check the endpoint and the region"
        )
    if isinstance(sdk, ReadTimeoutError):
        # It took the request and did not answer in time: busy or slow, not unreachable.
        return (
            f"DynamoDB at {target.where()} took the request but did not answer in time (it "
            "is reachable, and busy or slow); nothing is known of a write it was sent: run "
            "the command again"
        )
    if isinstance(sdk, SDKConnectionError | HTTPClientError):
        return f"cannot reach DynamoDB at {target.where()}: {' '.join(str(sdk).split())}"
    if isinstance(error, AccessDeniedError) and target.table:
        return (
            f"{text} on {target.describe()}: the credentials' IAM policy must allow it (the "
            "stack's WorkerPolicyArn covers the ledger); check AWS_PROFILE or --profile"
        )
    if target.table:
        return f"{text} ({target.describe()})"
    return text
