"""The size of a worker's Lambda bundle, built as Lambda builds it.

    python benchmarks/worker_bundle.py

Builds the wheel, installs it with its dependencies as a Lambda deployment package is built
(``pip install --platform manylinux2014_aarch64 --only-binary=:all: --python-version 3.14
--target``, no bytecode), leaves out boto3 and everything it depends on (the Lambda Python
runtime ships them), and prints the folder's size and its size zipped (deflate, level 9).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import zipfile
from importlib.metadata import distributions
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
RUNTIME_SHIPS = "boto3"
MB = 1024 * 1024


LAMBDA = (
    "--platform",
    "manylinux2014_aarch64",
    "--only-binary=:all:",
    "--python-version",
    "3.14",
    "--implementation",
    "cp",
)
"""How Lambda's Python 3.14 on arm64 is targeted; without it, pip installs for this machine."""


def build(target: Path, platform: tuple[str, ...] = LAMBDA) -> None:
    """The wheel and its dependencies installed into ``target`` (for Lambda by default)."""
    wheels = target.parent / "wheel"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--quiet"]
    subprocess.run([*pip, "wheel", "--no-deps", "-w", wheels, ROOT], check=True)
    [wheel] = wheels.glob("*.whl")
    # capture_output: pip warns about the development environment's packages.
    subprocess.run(
        [*pip, "install", "--no-compile", *platform, "--target", target, wheel],
        check=True,
        capture_output=True,
    )


def remove_runtime_packages(target: Path) -> list[str]:
    """Remove boto3 and its dependencies (by the installed metadata); returns their names."""
    installed = {canonicalize_name(d.metadata["Name"]): d for d in distributions(path=[target])}
    removed, pending = [], [RUNTIME_SHIPS]
    while pending:
        name = canonicalize_name(pending.pop())
        dist = installed.pop(name, None)
        if dist is None:
            continue
        removed.append(name)
        pending += [
            r.name
            for r in map(Requirement, dist.requires or [])
            if r.marker is None or r.marker.evaluate({"extra": ""})
        ]
        for file in dist.files or []:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                path.unlink()
    for folder in sorted(target.rglob("*"), reverse=True):  # now-empty package folders
        if folder.is_dir() and not any(folder.iterdir()):
            folder.rmdir()
    shutil.rmtree(target / "bin", ignore_errors=True)
    return removed


def zipped_size(target: Path) -> int:
    """The folder zipped as a Lambda deployment package, in bytes."""
    archive = target.parent / "bundle.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as out:
        for path in sorted(target.rglob("*")):
            if path.is_file():
                out.write(path, path.relative_to(target).as_posix())
    return archive.stat().st_size


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        target = Path(tmp) / "bundle"
        build(target)
        removed = remove_runtime_packages(target)
        unpacked = sum(p.stat().st_size for p in target.rglob("*") if p.is_file())
        packages = sorted(d.metadata["Name"] for d in distributions(path=[target]))
        print(f"left out (the runtime ships them): {', '.join(sorted(removed))}")
        print(f"bundled: {', '.join(packages)}")
        print(f"unzipped {unpacked / MB:.1f} MB, zipped {zipped_size(target) / MB:.2f} MB")


if __name__ == "__main__":
    main()
