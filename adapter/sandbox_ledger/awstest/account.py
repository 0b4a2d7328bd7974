"""Whether a run may start: the opt-in, the credentials and the region, and who they are."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Mapping

OPT_IN = "SANDBOX_LEDGER_AWS_TESTS"


class Refused(Exception):
    """The run does not start; the message says why and what to do."""


@dataclass(frozen=True)
class Account:
    """Where the run goes: the account, the identity, the region, and an endpoint (None:
    AWS itself; a local server in this repository's own tests of the run)."""

    account_id: str
    arn: str
    region: str
    endpoint_url: str | None
    session: Any


def resolve(environ: Mapping[str, str], endpoint_url: str | None = None) -> Account:
    """Check the opt-in, then resolve credentials and a region the way boto3 does (the
    environment, a profile, SSO, an instance role) and ask STS who they are.

    Raises:
        Refused: no opt-in, no credentials, no region, or credentials STS refuses.
    """
    if environ.get(OPT_IN) != "1":
        raise Refused(
            f"it works on a real AWS account (a run creates a table and costs cents; the "
            f"clean-up deletes tables): set {OPT_IN}=1 to run it"
        )
    import boto3
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        session = boto3.session.Session()
        credentials = session.get_credentials()
    except (BotoCoreError, ClientError) as exc:
        raise Refused(f"the AWS credentials do not resolve: {exc}") from exc
    if credentials is None:
        raise Refused(
            "no AWS credentials resolve (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
            "AWS_PROFILE, SSO or an instance role): configure some, then run again"
        )
    region = session.region_name or environ.get("AWS_REGION")  # boto3 reads only the other
    if not region:
        raise Refused(
            "no AWS region: set AWS_DEFAULT_REGION or AWS_REGION (or a profile's region), then "
            "run again"
        )
    try:
        sts = session.client("sts", endpoint_url=endpoint_url, region_name=region)
        who = sts.get_caller_identity()
    except (BotoCoreError, ClientError) as exc:
        raise Refused(f"STS refuses the credentials: {exc}") from exc
    return Account(str(who["Account"]), str(who["Arn"]), region, endpoint_url, session)
