"""Create a synthesized CDK stack in moto's CloudFormation (shared by the CDK tests)."""

from __future__ import annotations

import contextlib
import io
import json
import zipfile
from pathlib import Path
from typing import Any

import boto3


def zip_folder(directory: Path) -> bytes:
    """The folder as a zip archive, as the CDK CLI uploads a folder asset."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(directory.rglob("*")):
            if path.is_file():
                archive.write(path, path.relative_to(directory).as_posix())
    return buffer.getvalue()


def create_stack(
    template: dict[str, Any],
    outdir: Path,
    stack_name: str,
    endpoint: str,
    *,
    artifact: str | None = None,
) -> tuple[dict[str, str], dict[str, Any]]:
    """Upload the stack's file assets to moto's S3 and create the stack; returns its outputs
    and the descriptor's custom resource ``Create`` call. ``artifact``: the stack's name in
    the cloud assembly at ``outdir`` (its assets manifest), if not ``stack_name``.

    moto runs a custom resource's provider in docker (absent here): the stack is created
    without the descriptor's custom resource, whose exact call the caller makes itself. It
    also creates no alarms (it skips the type), so the dashboard, whose alarm widget names
    them, is left out too (the tests check it on the template)."""
    manifest = json.loads((outdir / f"{artifact or stack_name}.assets.json").read_text())
    s3 = boto3.client("s3", endpoint_url=endpoint)
    for asset in manifest["files"].values():
        for destination in asset["destinations"].values():
            bucket = (
                destination["bucketName"]
                .replace("${AWS::AccountId}", "123456789012")
                .replace("${AWS::Region}", "us-east-1")
            )
            with contextlib.suppress(s3.exceptions.BucketAlreadyOwnedByYou):
                s3.create_bucket(Bucket=bucket)
            source = outdir / asset["source"]["path"]
            body = zip_folder(source) if source.is_dir() else source.read_bytes()
            s3.put_object(Bucket=bucket, Key=destination["objectKey"], Body=body)
    deployable = json.loads(json.dumps(template))
    [descriptor_id] = [n for n, r in template["Resources"].items() if r["Type"] == "Custom::AWS"]
    descriptor_call = deployable["Resources"].pop(descriptor_id)["Properties"]["Create"]
    for resource in deployable["Resources"].values():
        if descriptor_id in resource.get("DependsOn", []):
            resource["DependsOn"].remove(descriptor_id)
    for name, resource in template["Resources"].items():
        if resource["Type"] == "AWS::CloudWatch::Dashboard":
            del deployable["Resources"][name]
            outputs = deployable.get("Outputs", {})
            for output in [o for o, v in outputs.items() if v["Value"] == {"Ref": name}]:
                del outputs[output]
    cfn = boto3.client("cloudformation", endpoint_url=endpoint)
    cfn.create_stack(
        StackName=stack_name,
        TemplateBody=json.dumps(deployable),
        Capabilities=["CAPABILITY_IAM", "CAPABILITY_NAMED_IAM"],
    )
    stack = cfn.describe_stacks(StackName=stack_name)["Stacks"][0]
    assert stack["StackStatus"] == "CREATE_COMPLETE", stack
    outputs = {o["OutputKey"]: o["OutputValue"] for o in stack["Outputs"]}
    return outputs, descriptor_call


def resolve_descriptor_call(create: dict[str, Any], refs: dict[str, str]) -> dict[str, Any]:
    """The descriptor's custom resource ``Create`` call (an ``Fn::Join``), parsed, with each
    ``Ref`` replaced by the value of the first of ``refs`` whose key starts its logical id."""
    return json.loads(  # type: ignore[no-any-return]
        "".join(
            part
            if isinstance(part, str)
            else next(v for prefix, v in refs.items() if part["Ref"].startswith(prefix))
            for part in create["Fn::Join"][1]
        )
    )


def remove_what_delete_stack_leaves(stack_name: str, endpoint: str) -> None:
    """Remove what moto's DeleteStack leaves of a stack that CloudFormation deletes: its
    functions and their event source mappings, roles and managed policies, buses, topics
    and rules (a test that deletes a stack leaves the server as it found it; the CDK tests
    share one)."""

    def client(service: str) -> Any:
        return boto3.client(service, endpoint_url=endpoint)

    lam, iam, events, sns = client("lambda"), client("iam"), client("events"), client("sns")
    for mapping in lam.list_event_source_mappings()["EventSourceMappings"]:
        if f":function:{stack_name}-" in mapping["FunctionArn"]:
            lam.delete_event_source_mapping(UUID=mapping["UUID"])
    for function in lam.list_functions()["Functions"]:
        if function["FunctionName"].startswith(f"{stack_name}-"):
            lam.delete_function(FunctionName=function["FunctionName"])
    for bus in events.list_event_buses()["EventBuses"]:
        for rule in events.list_rules(EventBusName=bus["Name"])["Rules"]:
            if rule["Name"].startswith(f"{stack_name}-"):
                targets = events.list_targets_by_rule(Rule=rule["Name"], EventBusName=bus["Name"])
                ids = [t["Id"] for t in targets["Targets"]]
                if ids:
                    events.remove_targets(Rule=rule["Name"], EventBusName=bus["Name"], Ids=ids)
                events.delete_rule(Name=rule["Name"], EventBusName=bus["Name"])
        if bus["Name"].startswith(f"{stack_name}-"):
            events.delete_event_bus(Name=bus["Name"])
    for topic in sns.list_topics()["Topics"]:
        if f":{stack_name}-" in topic["TopicArn"]:
            sns.delete_topic(TopicArn=topic["TopicArn"])
    for role in iam.list_roles()["Roles"]:
        name = role["RoleName"]
        if name.startswith(f"{stack_name}-"):
            for policy in iam.list_attached_role_policies(RoleName=name)["AttachedPolicies"]:
                iam.detach_role_policy(RoleName=name, PolicyArn=policy["PolicyArn"])
            for inline in iam.list_role_policies(RoleName=name)["PolicyNames"]:
                iam.delete_role_policy(RoleName=name, PolicyName=inline)
            iam.delete_role(RoleName=name)
    for policy in iam.list_policies(Scope="Local")["Policies"]:
        if policy["PolicyName"].startswith(f"{stack_name}-"):
            iam.delete_policy(PolicyArn=policy["Arn"])
