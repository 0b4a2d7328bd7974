"""Region and credentials found the way the AWS tools find them, one typed error when they
are missing, and the library's logging of retries, conflicts and give-ups."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from dynamodb.faults import FailShare, PartialBatches
from sandbox_ledger import (
    ConfigurationError,
    LedgerEntry,
    LedgerEvent,
    StorageError,
    ThrottledError,
)
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.resources import SyncResourceRecordStore


@pytest.fixture
def bare_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No region anywhere, an empty AWS config; credentials stay (tests add what they need)."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    config = tmp_path / "config"
    config.write_text("")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "credentials"))
    return config


def region_of(**kwargs: str) -> str:
    with SyncDynamoDBAdapter("tbl", **kwargs) as adapter:  # type: ignore[arg-type]
        return str(adapter.client().meta.region_name)


def test_region_from_aws_region_alone(
    bare_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert region_of() == "eu-west-1"
    assert SyncResourceRecordStore("tbl").client().meta.region_name == "eu-west-1"


async def test_region_from_aws_region_alone_async(
    bare_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_REGION", "ap-southeast-2")
    async with DynamoDBAdapter("tbl") as adapter:
        assert (await adapter.client()).meta.region_name == "ap-southeast-2"


def test_region_precedence(bare_environment: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bare_environment.write_text("[default]\nregion = sa-east-1\n")
    assert region_of() == "sa-east-1"  # the profile
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-west-2")
    assert region_of() == "us-west-2"  # AWS_DEFAULT_REGION over the profile
    monkeypatch.setenv("AWS_REGION", "eu-central-1")
    assert region_of() == "eu-central-1"  # AWS_REGION over AWS_DEFAULT_REGION
    assert region_of(region_name="eu-north-1") == "eu-north-1"  # the argument over all


def test_missing_region_is_one_configuration_error(bare_environment: Path) -> None:
    adapter = SyncDynamoDBAdapter("tbl")
    with pytest.raises(ConfigurationError, match="AWS_REGION") as caught:
        adapter.get_sandbox_details("n", "s")
    assert "region_name=" in str(caught.value)


async def test_missing_region_async(bare_environment: Path) -> None:
    with pytest.raises(ConfigurationError, match="AWS_REGION"):
        await DynamoDBAdapter("tbl").get_sandbox_details("n", "s")


def test_missing_credentials_is_one_configuration_error(
    bare_environment: Path, monkeypatch: pytest.MonkeyPatch, moto_endpoint: str
) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    adapter = SyncDynamoDBAdapter("tbl", endpoint_url=moto_endpoint)
    with pytest.raises(ConfigurationError, match="AWS_ACCESS_KEY_ID"):
        adapter.get_sandbox_details("n", "s")


def _entry(ts: int, event: str = LedgerEvent.ExecComplete) -> LedgerEntry:
    return LedgerEntry(ts=ts, name="log", sandbox_id="sb", step_index=0, event=event)


@pytest.mark.usefixtures("fast_sdk_backoff")
@pytest.mark.usefixtures("fast_sdk_backoff")  # 40 conflicts (steps.MAX_CONFLICTS) at 2 s each
def test_conflict_retries_and_give_ups_are_logged(
    moto_endpoint: str, sync_table: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sandbox_ledger")
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    conflicts = FailShare(
        1.0,
        "TransactionCanceledException",
        operations={"TransactWriteItems"},
        aio=False,
        CancellationReasons=[{"Code": "None"}, {"Code": "TransactionConflict"}],
    ).attach(adapter.client())
    with pytest.raises(StorageError, match="cancelled"):
        adapter.append(_entry(1))
    retries = [r for r in caplog.records if "transaction cancelled" in r.getMessage()]
    assert len(retries) == conflicts.injected >= 2
    assert retries[0].levelno == logging.INFO and "log/sb" in retries[0].getMessage()
    assert "retry 1" in retries[0].getMessage()
    assert any(
        r.levelno == logging.WARNING and "giving up" in r.getMessage() for r in caplog.records
    )


@pytest.mark.usefixtures("fast_sdk_backoff")
def test_partial_batches_and_sdk_give_ups_are_logged(
    moto_endpoint: str, sync_table: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="sandbox_ledger")
    adapter = SyncDynamoDBAdapter(sync_table, endpoint_url=moto_endpoint)
    for ts in range(30):
        adapter.append(_entry(ts, LedgerEvent.ExecStarted))
    PartialBatches(0.5).attach(adapter.client())
    adapter.delete_sandbox("log", "sb")
    assert adapter.read_all("log", "sb") == []
    assert any("unprocessed" in r.getMessage() for r in caplog.records)
    caplog.clear()
    FailShare(1.0, "ProvisionedThroughputExceededException", aio=False).attach(adapter.client())
    with pytest.raises(ThrottledError):
        adapter.get_sandbox_details("log", "sb")
    [give_up] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert give_up.getMessage().startswith("get_item: ")
    assert "SDK retries" in give_up.getMessage()


def test_the_library_is_silent_unless_logging_is_configured() -> None:
    code = (
        "import sandbox_ledger\n"
        "from sandbox_ledger.sdk.steps import log\n"
        "log.warning('should not be printed')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0 and result.stderr == ""


def test_unknown_profile_is_one_configuration_error(
    bare_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    with pytest.raises(ConfigurationError, match=r"no-such-profile.*AWS_PROFILE"):
        SyncDynamoDBAdapter("tbl", region_name="us-east-1").get_sandbox_details("n", "s")


async def test_unknown_profile_async(
    bare_environment: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    with pytest.raises(ConfigurationError, match="no-such-profile"):
        await DynamoDBAdapter("tbl", region_name="us-east-1").get_sandbox_details("n", "s")
