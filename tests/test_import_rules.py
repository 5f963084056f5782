"""The one-way dependency rule of DESIGN.md, checked on every import statement."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# folder -> venus subpackages it must never import
FORBIDDEN = {
    "hw": {"engines", "capabilities", "daemon", "export", "datagen", "evaluation", "demo"},
    "engines": {"hw", "capabilities", "daemon", "export", "datagen", "evaluation", "demo"},
    "capabilities": {"hw", "engines", "daemon", "export", "datagen", "evaluation", "demo"},
    "daemon": {"export", "datagen", "evaluation", "train", "demo"},
    "datagen": {"hw", "engines", "daemon", "export", "evaluation", "train", "demo"},  # offline
    "evaluation": {"export", "train", "demo"},  # runs the daemon's offline path; never torch
    # offline, torch; shares the model, engines, data; evaluation's recogniser measures the voice
    "train": {"daemon", "demo"},
    # venus demo: the daemon's offline path with the evaluation's harness; never torch
    "demo": {"export", "train"},
    "venus": set(),
}
# bench may import everything, but venus.export (torch) only inside functions: checked below.
# Third-party modules a package must not import (the daemon installs without torch).
FORBIDDEN_THIRD_PARTY = {
    "hw": {"torch", "onnxruntime", "tensorrt"},
    "engines": {"torch"},
    "capabilities": {"torch", "onnxruntime", "tensorrt", "numpy", "cv2"},
    "daemon": {"torch"},
    "datagen": {"torch", "onnxruntime", "tensorrt"},
    "evaluation": {"torch"},
    "demo": {"torch"},
}


def imported_modules(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), str(path))
    out: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append(node.module)
    return out


def violations() -> list[str]:
    found = []
    for folder, banned in FORBIDDEN.items():
        for path in (REPO / folder).rglob("*.py"):
            for module in imported_modules(path):
                parts = module.split(".")
                if parts[0] == "venus" and len(parts) > 1 and parts[1] in banned:
                    found.append(f"{path.relative_to(REPO)} imports {module}")
                if parts[0] in FORBIDDEN_THIRD_PARTY.get(folder, set()):
                    found.append(f"{path.relative_to(REPO)} imports {module}")
    return found


def test_packages_import_one_way() -> None:
    assert violations() == []


def test_the_checker_sees_a_violation(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from venus.daemon.config import load_config\nimport torch.nn\n")
    assert imported_modules(bad) == ["venus.daemon.config", "torch.nn"]


def test_bench_imports_export_lazily() -> None:
    for path in (REPO / "bench").rglob("*.py"):
        tree = ast.parse(path.read_text(), str(path))
        for node in tree.body:  # module level only
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("venus.export"):
                raise AssertionError(
                    f"{path.relative_to(REPO)}: import venus.export inside a function"
                )
            if isinstance(node, ast.Import) and any(
                a.name.startswith(("torch", "venus.export")) for a in node.names
            ):
                raise AssertionError(f"{path.relative_to(REPO)}: imports torch at module level")
