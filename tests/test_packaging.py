"""The wheel carries every ``venus.*`` package, and a non-editable install imports."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# Top-level folders mapped to subpackages (DESIGN.md layout); plain folders are not.
SUBPACKAGE_FOLDERS = ("bench", "daemon", "engines", "export", "capabilities", "hw", "demo")
PLAIN_FOLDERS = ("tests", "systemd", "scripts", "docs")


def expected_packages() -> set[str]:
    """Every package in the source tree: a folder with an __init__.py, by import name."""
    found = {"venus"}
    for top in SUBPACKAGE_FOLDERS:
        root = REPO / top
        assert (root / "__init__.py").is_file(), f"{top}/ is not a package"
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root).parts
            found.add(".".join(("venus", top, *rel)))
    return found


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wheel built from a copy of the tree (the checkout itself stays clean)."""
    src = tmp_path_factory.mktemp("src") / "realtime-venus"
    # out/: the work of scripts/make-venus-tiny and the like (git ignores it; tens of GB)
    ignore = shutil.ignore_patterns(
        ".venv", ".git", "build", "*.egg-info", "__pycache__", ".*cache", "out"
    )
    shutil.copytree(REPO, src, ignore=ignore)
    out = tmp_path_factory.mktemp("dist")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(out),
            str(src),
        ],
        check=True,
        timeout=300,
    )
    (built,) = out.glob("realtime_venus-*.whl")
    return built


def test_wheel_contains_every_package(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    missing = sorted(
        pkg for pkg in expected_packages() if f"{pkg.replace('.', '/')}/__init__.py" not in names
    )
    assert not missing, f"packages left out of the wheel (add them to pyproject.toml): {missing}"
    assert "venus/py.typed" in names
    for folder in PLAIN_FOLDERS:
        assert not any(n.startswith(f"{folder}/") for n in names), (
            f"{folder}/ leaked into the wheel"
        )


def test_wheel_declares_the_console_script(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        (ep,) = [n for n in zf.namelist() if n.endswith("entry_points.txt")]
        assert "venus = venus.cli:main" in zf.read(ep).decode()


def test_core_dependencies_have_no_torch(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        (meta,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        requires = [
            line.split(":", 1)[1].strip()
            for line in zf.read(meta).decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
    core = [r for r in requires if "extra ==" not in r]
    assert core, "no core dependencies"
    assert not any(r.startswith(("torch", "onnx ", "tensorrt")) for r in core), core


def test_non_editable_install_imports_from_outside_the_repo(wheel: Path, tmp_path: Path) -> None:
    target = tmp_path / "site"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-index",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        timeout=300,
    )
    code = (
        "import venus, venus.bench, venus.daemon, venus.daemon.config, venus.engines, venus.hw, "
        "venus.capabilities, venus.export; print(venus.daemon.__file__)"
    )
    env = {"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-c", code],
        check=False,
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    # Imported from the installed copy, not from the checkout.
    assert out.stdout.strip().startswith(str(target)), out.stdout
