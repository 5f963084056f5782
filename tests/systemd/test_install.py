"""systemd/install.sh, run for real into a staging root (``--root DIR --no-apt``).

The install is the real one: a virtual environment in ``DIR/opt/venus`` with the daemon
pip-installed from this checkout (dependencies from the pip cache or the index: ~20 s
warm), the configuration, directories and units. Only apt and systemctl are left out,
which ``--root`` does by design. As root (CI), the staging root gets a minimal
/etc/passwd and group files, so the user and its groups are created in it with
``useradd --prefix`` and ownership is checked; otherwise those checks are skipped.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
INSTALL = REPO / "systemd" / "install.sh"
IS_ROOT = os.geteuid() == 0
UNITS = {
    "etc/systemd/system/venus.service": "venus.service",
    "etc/systemd/system/venus-worker@.service": "venus-worker@.service",
    "etc/systemd/user/venus.service": "user/venus.service",
}
INSTALL_TIMEOUT_S = 600  # a cold pip cache downloads ~150 MB of wheels


def run_install(*args: str, timeout: float = INSTALL_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHON=sys.executable)
    return subprocess.run(
        ["bash", str(INSTALL), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )


def installed(proc: subprocess.CompletedProcess[str]) -> None:
    assert proc.returncode == 0, f"install.sh exited {proc.returncode}:\n{proc.stderr[-4000:]}"


def minimal_etc(root: Path) -> None:
    """/etc/passwd and friends as on a fresh Debian, without venus and render."""
    etc = root / "etc"
    etc.mkdir(parents=True)
    (etc / "passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (etc / "group").write_text("root:x:0:\naudio:x:29:\nvideo:x:44:\n")
    (etc / "shadow").write_text("root:*:19000:0:99999:7:::\n")
    (etc / "gshadow").write_text("root:*::\naudio:*::\nvideo:*::\n")
    (etc / "shadow").chmod(0o640)
    (etc / "gshadow").chmod(0o640)


@dataclass(frozen=True)
class Staged:
    root: Path
    log: str


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Staged:
    root = tmp_path_factory.mktemp("root")
    if IS_ROOT:
        minimal_etc(root)
    proc = run_install("--root", str(root), "--no-apt")
    installed(proc)
    return Staged(root, proc.stderr)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_help_describes_the_options() -> None:
    proc = run_install("--help", timeout=30)
    assert proc.returncode == 0, proc.stderr
    for option in ("--root", "--no-apt", "--no-enable", "--with-export", "--uninstall", "--purge"):
        assert option in proc.stdout


def test_unknown_option_fails_and_says_so() -> None:
    proc = run_install("--frobnicate", timeout=30)
    assert proc.returncode == 2
    assert "unknown option --frobnicate; see systemd/install.sh --help" in proc.stderr


def test_missing_root_directory_fails(tmp_path: Path) -> None:
    proc = run_install("--root", str(tmp_path / "absent"), timeout=30)
    assert proc.returncode == 1
    assert "absent: no such directory" in proc.stderr


def test_units_land_as_shipped(staged: Staged) -> None:
    for target, source in UNITS.items():
        path = staged.root / target
        assert path.read_text() == (REPO / "systemd" / source).read_text(), target
        assert mode(path) == 0o644


def test_configuration_and_directories(staged: Staged) -> None:
    etc = staged.root / "etc/venus"
    assert mode(etc) == 0o750
    config = etc / "venus.toml"
    assert config.read_text() == (REPO / "systemd/venus.toml").read_text()
    assert mode(config) == 0o640
    assert (etc / "workers/worker.env.example").is_file()
    assert mode(etc / "workers") == 0o750
    for state in ("var/lib/venus", "var/cache/venus"):
        assert mode(staged.root / state) == 0o750
    assert "systemd is not running" not in staged.log, "--root must not touch systemctl"


@pytest.mark.skipif(not IS_ROOT, reason="useradd --prefix and chown need root (CI runs as root)")
def test_user_and_ownership(staged: Staged) -> None:
    passwd = {
        line.split(":")[0]: line.split(":")
        for line in (staged.root / "etc/passwd").read_text().splitlines()
    }
    venus = passwd["venus"]
    uid, gid, home, shell = int(venus[2]), int(venus[3]), venus[5], venus[6]
    assert home == "/var/lib/venus" and shell == "/usr/sbin/nologin"
    assert uid < 1000, "a system user"
    groups = {
        line.split(":")[0]: line.split(":")[3].split(",")
        for line in (staged.root / "etc/group").read_text().splitlines()
    }
    for group in ("audio", "video", "render"):  # render was missing: created
        assert "venus" in groups[group], group
    etc = staged.root / "etc/venus"
    for path in (etc, etc / "venus.toml"):
        assert (path.stat().st_uid, path.stat().st_gid) == (0, gid), path
    assert (etc / "workers").stat().st_gid == 0, "worker secrets: root only"
    for state in ("var/lib/venus", "var/cache/venus"):
        st = (staged.root / state).stat()
        assert (st.st_uid, st.st_gid) == (uid, gid), state


def test_the_daemon_runs_from_the_venv(staged: Staged) -> None:
    venus = staged.root / "opt/venus/bin/venus"
    proc = subprocess.run(
        [str(venus), "run", "--help"], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 0, proc.stderr
    assert "--journal" in proc.stdout
    # The daemon install carries no torch (only the [export] extra does).
    python = staged.root / "opt/venus/bin/python"
    proc = subprocess.run(
        [str(python), "-c", "import importlib.util as u; print(u.find_spec('torch') is None)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.stdout.strip() == "True", proc.stdout + proc.stderr


def test_reinstall_uninstall_purge(staged: Staged, tmp_path: Path) -> None:
    """On a copy of the staged root: a second run keeps an edited configuration and
    restores the units; --uninstall removes units and venv and keeps configuration and
    state; --purge removes those too."""
    root = tmp_path / "root"
    shutil.copytree(staged.root, root, symlinks=True)
    config = root / "etc/venus/venus.toml"
    config.write_text(config.read_text() + "\n# edited by the admin\n")
    unit = root / "etc/systemd/system/venus.service"
    unit.write_text("stale\n")
    journal = root / "var/lib/venus/journal.sqlite3"
    journal.write_text("work items")

    proc = run_install("--root", str(root), "--no-apt")
    installed(proc)
    assert config.read_text().endswith("# edited by the admin\n"), "config overwritten"
    assert "keeping the existing" in proc.stderr
    assert unit.read_text() == (REPO / "systemd/venus.service").read_text()
    assert (root / "opt/venus/bin/venus").is_file()

    wants = root / "etc/systemd/system/multi-user.target.wants"
    wants.mkdir()
    (wants / "venus.service").symlink_to("/etc/systemd/system/venus.service")
    (wants / "venus-worker@w1.service").symlink_to("/etc/systemd/system/venus-worker@.service")
    installed(run_install("--root", str(root), "--uninstall", timeout=120))
    for target in UNITS:
        assert not (root / target).exists(), target
    assert list(wants.iterdir()) == [], "enablement symlinks left behind"
    assert not (root / "opt/venus").exists()
    assert config.read_text().endswith("# edited by the admin\n")
    assert journal.read_text() == "work items"
    assert (root / "var/cache/venus").is_dir()

    installed(run_install("--root", str(root), "--purge", timeout=120))
    for gone in ("etc/venus", "var/lib/venus", "var/cache/venus", "opt/venus"):
        assert not (root / gone).exists(), gone
