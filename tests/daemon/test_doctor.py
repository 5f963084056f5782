"""``venus doctor`` on this machine: a real subprocess, a private PulseAudio, a real broker.

The machine has no camera (no /dev/video*) and, unless it is a GPU runner, no NVIDIA GPU;
the PulseAudio null sink's monitor is the default source, so the microphone records
digital silence.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import wave
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.services import Broker, PulseServer, free_port, wait_until

VENUS = Path(sys.executable).with_name("venus")
HAS_GPU = shutil.which("nvidia-smi") is not None or Path("/etc/nv_tegra_release").exists()


def write_config(path: Path, broker: str, engines: Path, video: bool = True) -> Path:
    path.write_text(
        f'[model]\nengines = "{engines}"\n'
        f'[video]\nenabled = {str(video).lower()}\nsource = "0"\n'
        f'[harness]\nbroker_url = "{broker}"\n'
    )
    return path


def doctor(
    config: Path, pulse: PulseServer, *args: str, cwd: Path
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENUS), "--config", str(config), "doctor", *args],
        env={**os.environ, **pulse.env},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def by_name(stdout: str) -> dict[str, dict[str, Any]]:
    checks = json.loads(stdout)
    assert isinstance(checks, list)
    return {c["name"]: c for c in checks}


def test_doctor_reports_this_machine(
    tmp_path: Path, pulseaudio: PulseServer, mosquitto: Broker
) -> None:
    engines = tmp_path / "no-engines"
    config = write_config(tmp_path / "venus.toml", mosquitto.url, engines)

    began = time.monotonic()
    out = doctor(config, pulseaudio, "--json", cwd=tmp_path)
    assert time.monotonic() - began < 30, "doctor must end in seconds"
    assert out.returncode == 1, out.stderr
    checks = by_name(out.stdout)

    assert list(checks) == [
        "config",
        "audio",
        "microphone",
        "camera",
        "providers",
        "gpu",
        "broker",
        "engines",
        "memory",
    ]
    assert checks["config"]["status"] == "ok"
    assert checks["memory"]["status"] == "ok"  # in RAM only: persist is off by default
    audio = checks["audio"]
    assert audio["status"] == "ok", audio
    names = {d["name"] for d in audio["details"]["devices"]}
    assert {"pulse", "default"} <= names
    assert all(d["rate_hz"] > 0 for d in audio["details"]["devices"])
    mic = checks["microphone"]
    assert mic["status"] == "warn", mic
    assert "silent" in mic["summary"]
    assert mic["details"]["rms_dbfs"] <= -70.0
    assert mic["details"]["seconds"] == pytest.approx(1.0)
    camera = checks["camera"]
    assert camera["status"] == "fail"
    assert camera["summary"] == "no camera: /dev/video0 not found"
    assert "video.enabled = false" in camera["fix"]
    providers = checks["providers"]
    assert providers["status"] == "ok"
    assert "CPUExecutionProvider" in providers["details"]["available"]
    if HAS_GPU:
        assert checks["gpu"]["status"] == "ok"
    else:
        assert checks["gpu"]["status"] == "warn"
        assert "no NVIDIA GPU" in checks["gpu"]["summary"]
    broker = checks["broker"]
    assert broker["status"] == "ok", broker
    assert mosquitto.url in broker["summary"]
    assert checks["engines"]["status"] == "fail"
    assert checks["engines"]["summary"] == f"{engines}: not found"
    assert "venus export" in checks["engines"]["fix"]

    # The same as a person reads it: aligned columns, devices, a verdict, the fixes.
    text = doctor(config, pulseaudio, cwd=tmp_path)
    assert text.returncode == 1, text.stderr
    lines = text.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.split()[:2] == ["check", "status"])
    table = lines[header : lines.index("", header)]
    rows = {line.split()[0]: line for line in table}
    assert list(rows)[1:] == list(checks)
    for name, status in [("camera", "FAIL"), ("microphone", "WARN"), ("broker", "ok")]:
        assert rows[name].split()[1] == status
    columns = {row.index(row.split()[1], len(row.split()[0]) + 2) for row in rows.values()}
    assert len(columns) == 1  # the status column lines up
    assert any(line.startswith("audio devices") for line in lines)
    verdict_line = next(line for line in lines if line.startswith("verdict:"))
    assert "NOT READY" in verdict_line
    assert "camera, engines" in verdict_line
    fixes = lines[lines.index(verdict_line) + 1 :]
    assert any(f.split()[0] == "camera:" and "video.enabled = false" in f for f in fixes)
    assert any(f.split()[0] == "engines:" and "venus export" in f for f in fixes)


def test_disabled_camera_is_skipped_and_a_closed_broker_fails(
    tmp_path: Path, pulseaudio: PulseServer
) -> None:
    url = f"mqtt://127.0.0.1:{free_port()}"
    config = write_config(tmp_path / "venus.toml", url, tmp_path / "none", video=False)
    out = doctor(config, pulseaudio, "--json", cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    checks = by_name(out.stdout)
    assert checks["camera"]["status"] == "skipped"
    assert "video.enabled = false" in checks["camera"]["summary"]
    assert checks["broker"]["status"] == "fail"
    assert url in checks["broker"]["summary"]
    assert "connection refused" in checks["broker"]["summary"]
    assert "harness.broker_url" in checks["broker"]["fix"]


def test_without_a_config_file_the_defaults_are_checked(
    tmp_path: Path, pulseaudio: PulseServer
) -> None:
    missing = tmp_path / "absent.toml"
    out = doctor(missing, pulseaudio, "--json", cwd=tmp_path)
    config = by_name(out.stdout)["config"]
    assert config["status"] == "warn"
    assert config["summary"] == f"{missing} not found; checking with the defaults"
    assert "systemd/venus.toml" in config["fix"]


def test_an_invalid_config_fails_and_the_rest_still_runs(
    tmp_path: Path, pulseaudio: PulseServer
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[audio]\nsample_rte = 16000\n")
    out = doctor(bad, pulseaudio, "--json", cwd=tmp_path)
    assert out.returncode == 1
    checks = by_name(out.stdout)
    assert checks["config"]["status"] == "fail"
    assert "audio.sample_rte" in checks["config"]["details"]["error"]
    assert "venus config check" in checks["config"]["fix"]
    assert len(checks) == 9


def test_a_tone_played_into_the_sink_is_heard_at_its_level(
    tmp_path: Path, pulseaudio: PulseServer
) -> None:
    rate = 48000
    t = np.arange(8 * rate) / rate
    pcm = np.round(0.25 * np.sin(2 * np.pi * 440 * t) * 32767).astype("<i2")
    with wave.open(str(tmp_path / "tone.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    config = write_config(tmp_path / "venus.toml", "", tmp_path / "none", video=False)
    player = subprocess.Popen(
        ["paplay", f"--device={pulseaudio.sink}", str(tmp_path / "tone.wav")],
        env={**os.environ, **pulseaudio.env},
    )
    try:
        wait_until(lambda: pulseaudio.pactl("list", "short", "sink-inputs").strip(), "paplay")
        out = doctor(config, pulseaudio, "--json", cwd=tmp_path)
    finally:
        player.terminate()
        player.wait(timeout=10)
    mic = by_name(out.stdout)["microphone"]
    assert mic["status"] == "ok", mic
    # A 0.25 peak sine: peak -12 dBFS, RMS -15 dBFS (give or take the sink's volume).
    assert mic["details"]["peak_dbfs"] == pytest.approx(-12.0, abs=1.5)
    assert mic["details"]["rms_dbfs"] == pytest.approx(-15.0, abs=1.5)
    assert by_name(out.stdout)["broker"]["status"] == "skipped"


HUNG_DOCTOR = """
import sys, threading
from venus.cli import main
from venus.daemon import doctor
from venus.daemon.doctor_checks import Check

def hang() -> Check:
    threading.Event().wait()  # a driver call that never returns
    return Check("stuck", "ok", "")

doctor.plan = lambda cfg, hashes=False: [doctor.Planned("stuck", 0.5, hang, "re-plug it")]
sys.exit(main(["--config", sys.argv[1], "doctor"]))
"""


def test_a_hung_check_does_not_keep_the_command_alive(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-c", HUNG_DOCTOR, str(tmp_path / "absent.toml")],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert out.returncode == 1, out.stderr
    assert "stuck       FAIL    no answer within 0.5 s" in out.stdout
    assert "  stuck:      re-plug it" in out.stdout
    assert out.stdout.rstrip().endswith("re-plug it")
