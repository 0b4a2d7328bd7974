"""The built wheel, installed with its runtime dependencies alone (what a Lambda worker gets):
every public module a worker uses imports, and what needs an extra says which one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Imported in the fresh environment: every module, each either importing or failing with a
# message that names the extra to install.
PROBE = r"""
import importlib, pkgutil, sys
import sandbox_ledger
extras = {}
for info in pkgutil.walk_packages(sandbox_ledger.__path__, "sandbox_ledger."):
    try:
        importlib.import_module(info.name)
    except ModuleNotFoundError as exc:
        extras[info.name] = str(exc)
for name, message in sorted(extras.items()):
    print(f"{name}\t{message}")
"""


def wheel_in_venv(tmp_path: Path, extras: str = "") -> Path:
    """The built wheel (with ``extras``, e.g. ``[cdk]``) installed into a fresh virtualenv
    under ``tmp_path``; returns its python."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", tmp_path, ROOT],
        check=True,
    )
    [wheel] = tmp_path.glob("*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", venv], check=True)
    python = venv / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "--quiet", f"{wheel}{extras}"], check=True)
    return python


@pytest.mark.slow
def test_wheel_with_runtime_dependencies_only(tmp_path: Path) -> None:
    python = wheel_in_venv(tmp_path)
    venv = python.parent.parent
    installed = subprocess.run(
        [python, "-m", "pip", "list", "--format=freeze"], capture_output=True, text=True
    ).stdout
    assert not any(
        line.lower().startswith(("typer", "moto", "pytest", "aws-cdk"))
        for line in installed.splitlines()
    )

    probe = subprocess.run([python, "-c", PROBE], capture_output=True, text=True, cwd=tmp_path)
    assert probe.returncode == 0, probe.stderr
    needing_extras = dict(line.split("\t", 1) for line in probe.stdout.splitlines())
    for module, message in needing_extras.items():
        assert module.startswith(
            (
                "sandbox_ledger.cli.",
                "sandbox_ledger.testing",
                "sandbox_ledger.handlers",
                "sandbox_ledger.sdk.tls",
                "sandbox_ledger.ui",
            )
        ), module
        assert "pip install 'sandbox-ledger-dynamodb[" in message or module.startswith(
            "sandbox_ledger.cli."
        ), (module, message)
    assert "[testing]" in needing_extras["sandbox_ledger.testing"]
    assert "[lambda]" in needing_extras["sandbox_ledger.handlers"]
    assert "[async]" in needing_extras["sandbox_ledger.sdk.tls"]  # aiobotocore's TLS session
    assert "[ui]" in needing_extras["sandbox_ledger.ui"]  # the console: Starlette, Jinja2
    assert not any(line.lower().startswith(("aioboto3", "aiohttp")) for line in installed.split())

    command = subprocess.run(
        [venv / "bin" / "sandbox-ledger", "--help"], capture_output=True, text=True
    )
    assert command.returncode == 1
    assert command.stdout == ""
    assert command.stderr.strip().splitlines() == [
        "sandbox-ledger: the command line needs the 'cli' extra: "
        "pip install 'sandbox-ledger-dynamodb[cli]' (missing module: typer)"
    ]


def test_cli_without_its_extra_prints_one_line() -> None:
    code = (
        "import sys\n"
        "sys.modules['typer'] = None\n"  # as if the `cli` extra were not installed
        "from sandbox_ledger.cli import main\n"
        "main()\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "sandbox-ledger: the command line needs the 'cli' extra: "
        "pip install 'sandbox-ledger-dynamodb[cli]' (missing module: typer)"
    ]


# A platform team's own CDK app: the construct from the installed wheel, its own function
# granted one role, cdk-nag over the whole app.
USER_APP = r"""
import json, sys
from pathlib import Path

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from cdk_nag import AwsSolutionsChecks

from sandbox_ledger_cdk import LedgerConfig, SandboxLedger

app = cdk.App(outdir=sys.argv[1])
stack = cdk.Stack(
    app, "PlatformLedger",
    synthesizer=cdk.DefaultStackSynthesizer(generate_bootstrap_version_rule=False),
)
ledger = SandboxLedger(
    stack, "Ledger", config=LedgerConfig(shard_count=8), tags={"team": "platform"}
)
role = iam.Role(stack, "AppRole", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"))
fn = lambda_.Function(
    stack, "AppWorker", runtime=lambda_.Runtime.PYTHON_3_14, handler="worker.handler",
    code=lambda_.Code.from_asset(str(Path(__file__).parent / "worker")), role=role,
    environment={"TABLE_NAME": ledger.ledger.table.table_name},
)
ledger.ledger.grant_ledger(fn)
cdk.Validations.of(app).add_plugins(AwsSolutionsChecks(app))
app.synth()
"""


@pytest.mark.slow  # installs aws-cdk-lib into a fresh venv (about 70 s with pip's cache warm)
def test_a_users_cdk_app_uses_the_construct_from_the_wheel(
    tmp_path: Path, moto_endpoint: str
) -> None:
    """The wheel installed with ``[cdk]`` alone: a user's app imports the construct, grants
    its own function the ledger role, synthesizes with cdk-nag clean (a finding fails the
    synth) and creates the stack in moto's CloudFormation."""
    import json

    from deploy.moto_cloudformation import create_stack

    python = wheel_in_venv(tmp_path, "[cdk]")
    app = tmp_path / "platform"
    (app / "worker").mkdir(parents=True)
    (app / "worker" / "worker.py").write_text("def handler(event, context):\n    return event\n")
    (app / "app.py").write_text(USER_APP)
    out = tmp_path / "cdk.out"
    done = subprocess.run(
        [python, "app.py", str(out)],
        cwd=app,
        capture_output=True,
        text=True,
        env={**os.environ, "JSII_SILENCE_WARNING_END_OF_LIFE_NODE_VERSION": "20"},
    )
    assert done.returncode == 0, done.stderr
    template = json.loads((out / "PlatformLedger.template.json").read_text())
    functions = [r for r in template["Resources"].values() if r["Type"] == "AWS::Lambda::Function"]
    assert {f["Properties"]["Handler"] for f in functions} >= {
        "worker.handler",
        "expire_stale_resources.handler.handler",
        "on_ttl_expiry.handler.handler",
    }
    [app_policy] = [
        r
        for name, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Policy" and name.startswith("AppRoleDefaultPolicy")
    ]
    granted = {
        a
        for s in app_policy["Properties"]["PolicyDocument"]["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert "dynamodb:PutItem" in granted and "dynamodb:Scan" not in granted
    outputs, descriptor_call = create_stack(template, out, "PlatformLedger", moto_endpoint)
    # Outputs of a construct below the stack carry its path and a hash: LedgerShardCount<hash>.
    assert [v for key, v in outputs.items() if key.startswith("LedgerShardCount")] == ["8"]
    assert '"shardCount":{"N":"8"}' in "".join(
        p for p in descriptor_call["Fn::Join"][1] if isinstance(p, str)
    )


# A sync worker where the `async` extra is not installed: the async stack cannot be imported.
SYNC_WORKER = r"""
import sys
for name in ("aioboto3", "aiobotocore", "aiohttp"):
    sys.modules[name] = None
endpoint, table = sys.argv[1], sys.argv[2]
from sandbox_ledger import LedgerEntry
from sandbox_ledger.dynamodb import DynamoDBAdapter, SyncDynamoDBAdapter
from sandbox_ledger.resources import ResourceRecordStore, SyncResourceRecordStore
from resources.resource_fixtures import record

with SyncDynamoDBAdapter(table, endpoint_url=endpoint) as ledger:
    ledger.create_table()
    entry = LedgerEntry(ts=1, name="n", sandbox_id="s", step_index=-1, event="sandbox.created")
    ledger.append(entry)
    print(len(ledger.read_all("n", "s")))
with SyncResourceRecordStore(table, endpoint_url=endpoint) as store:
    stored = store.put(record())
    print(store.get(stored.record.id) is not None)
for cls in (DynamoDBAdapter, ResourceRecordStore):
    try:
        cls(table, endpoint_url=endpoint)
    except ModuleNotFoundError as exc:
        print(exc)
"""


def test_a_sync_worker_runs_without_the_async_extra(moto_endpoint: str, table_name: str) -> None:
    """pydantic and boto3 are all the sync adapter and the sync resource store need; the
    async twins, without the ``async`` extra, refuse in one line that names it."""
    done = subprocess.run(
        [sys.executable, "-c", SYNC_WORKER, moto_endpoint, table_name],
        capture_output=True,
        text=True,
        cwd=ROOT / "tests",
    )
    assert done.returncode == 0, done.stderr
    missing = (
        "the async adapter and store need the 'async' extra: "
        "pip install 'sandbox-ledger-dynamodb[async]' (missing module: aioboto3)"
    )
    assert done.stdout.splitlines() == ["1", "True", missing, missing]


@pytest.mark.slow  # builds the wheel (hatchling from the index, in pip's isolated build)
def test_the_wheel_is_ready_for_publishing(tmp_path: Path) -> None:
    """Both packages typed (``py.typed``: the construct library had none), the licence file
    and the metadata the index shows (it had no classifiers, authors or licence file)."""
    import zipfile
    from email.parser import Parser

    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", tmp_path, ROOT],
        check=True,
    )
    [wheel] = tmp_path.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        [metadata_name] = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(archive.read(metadata_name).decode())
    assert {"sandbox_ledger/py.typed", "sandbox_ledger_cdk/py.typed"} <= names
    # The console's templates and stylesheet ship in the wheel (no CDN: it works offline).
    assert {
        "sandbox_ledger/ui/static/ui.css",
        "sandbox_ledger/ui/templates/base.html",
        "sandbox_ledger/ui/templates/sessions.html",
        "sandbox_ledger/ui/templates/session.html",
    } <= names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert metadata["License-Expression"] == "Apache-2.0"
    assert metadata["License-File"] == "LICENSE"
    assert metadata["Summary"] and metadata["Author"]
    assert metadata["Description-Content-Type"] == "text/markdown"
    classifiers = metadata.get_all("Classifier") or []
    assert "Typing :: Typed" in classifiers and "Framework :: AWS CDK :: 2" in classifiers
    assert (ROOT / "CHANGELOG.md").read_text().startswith("# Changelog")
