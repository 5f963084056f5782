"""``venus doctor``'s checks as functions: engines, broker, camera, the runner and verdict."""

from __future__ import annotations

import hashlib
import json
import os
import socket
import threading
import time
from pathlib import Path

import cv2
import numpy as np
import pytest
from support.services import Broker, free_port

from venus.daemon.config import parse_config
from venus.daemon.doctor import Planned, run_one, verdict
from venus.daemon.doctor_broker import check_broker
from venus.daemon.doctor_checks import Check, check_engines, check_gpu
from venus.daemon.doctor_devices import check_camera


def fake_engines(root: Path) -> Path:
    """A one-component engine directory with a valid manifest (not a runnable model)."""
    root.mkdir()
    blob = b"\x00" * 1000
    (root / "audio.onnx").write_bytes(blob)
    entry = {"path": "audio.onnx", "bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    schedule = dict.fromkeys(
        [
            "sample_rate_in",
            "hop_length",
            "n_mels",
            "mel_frames",
            "audio_tokens",
            "vision_tokens",
            "image_size",
            "speech_tokens",
            "speech_codebook",
            "speech_end_token",
            "speech_start_token",
            "mel_frames_out",
            "lookahead_tokens",
            "prompt_frames",
            "sample_rate_out",
            "hop_out",
        ],
        1,
    )
    manifest = {
        "format": "venus-engines",
        "version": 1,
        "model": "tiny",
        "frontend": "audio",
        "precision": "fp32",
        "backend": "onnx",
        "opset": 17,
        "special_tokens": {},
        "control_tokens": [],
        "schedule": {"chunk_s": 1.0, **schedule},
        "source": {},
        "tools": {},
        "components": {
            "audio_encoder": {"files": [entry], "inputs": [], "outputs": [], "precision": "fp32"}
        },
    }
    (root / "manifest.json").write_text(json.dumps(manifest))
    return root


def test_engines_sizes_and_optional_hashes(tmp_path: Path) -> None:
    root = fake_engines(tmp_path / "engines")
    model = parse_config({"model": {"engines": str(root)}}).model
    ok = check_engines(model)
    assert ok.status == "ok", ok
    assert "tiny (audio, fp32 onnx, untrained), 1 files" in ok.summary
    assert ok.summary.endswith(
        "; sampling temperature 0.7 (default), top_p 0.9 (default), flow_temperature 1 (default)"
    )
    manifest = json.loads((root / "manifest.json").read_text())
    (root / "manifest.json").write_text(json.dumps({**manifest, "sampling": {"temperature": 0}}))
    advised = check_engines(model)
    assert advised.details["sampling"]["temperature_from"] == "engines"
    assert "sampling temperature 0 (engines)" in advised.summary
    own = parse_config({"model": {"engines": str(root), "temperature": 0.3}}).model
    assert "sampling temperature 0.3 (config)" in check_engines(own).summary
    (root / "audio.onnx").write_bytes(b"\x01" * 1000)  # same size, other content
    assert check_engines(model).status == "ok"
    corrupt = check_engines(model, hashes=True)
    assert corrupt.status == "fail"
    assert "sha256 does not match" in corrupt.summary
    (root / "audio.onnx").write_bytes(b"\x01" * 10)
    truncated = check_engines(model)
    assert truncated.status == "fail" and "10 bytes" in truncated.summary
    wrong = parse_config({"model": {"engines": str(root), "frontend": "omni"}}).model
    (root / "audio.onnx").write_bytes(b"\x01" * 1000)
    mismatch = check_engines(wrong)
    assert mismatch.status == "fail" and "model.frontend" in mismatch.fix


def test_broker_check_speaks_mqtt(mosquitto: Broker) -> None:
    harness = parse_config({"harness": {"broker_url": mosquitto.url}}).harness
    check = check_broker(harness)
    assert check.status == "ok", check
    assert check.details["connack"] == "Success"
    assert "venus-doctor" in mosquitto.log()  # not the daemon's own client id
    off = parse_config({"harness": {"broker_url": ""}}).harness
    assert check_broker(off).status == "skipped"


def test_a_port_that_is_not_mqtt_fails_in_time() -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    harness = parse_config({"harness": {"broker_url": f"mqtt://127.0.0.1:{port}"}}).harness
    try:
        began = time.monotonic()
        check = check_broker(harness, timeout_s=0.5)
    finally:
        listener.close()
    assert check.status == "fail"
    assert "no MQTT answer" in check.summary
    assert time.monotonic() - began < 5


def test_runner_turns_hangs_and_exceptions_into_failures() -> None:
    release = threading.Event()

    def hangs() -> Check:
        release.wait(10)
        return Check("slow", "ok", "late")

    def raises() -> Check:
        raise RuntimeError("driver bug")

    abandoned: list[threading.Thread] = []
    hung = run_one(Planned("slow", 0.2, hangs, "re-plug it"), abandoned)
    assert (hung.status, hung.summary, hung.fix) == ("fail", "no answer within 0.2 s", "re-plug it")
    assert len(abandoned) == 1
    release.set()
    broken = run_one(Planned("broken", 5.0, raises, ""), abandoned)
    assert broken.status == "fail"
    assert "RuntimeError: driver bug" in broken.summary
    assert len(abandoned) == 1


def test_camera_check_reads_a_video_file_and_fails_fast_on_a_dead_stream(tmp_path: Path) -> None:
    clip = tmp_path / "clip.avi"
    writer = cv2.VideoWriter(str(clip), cv2.VideoWriter_fourcc(*"MJPG"), 25.0, (320, 240))
    for i in range(60):
        writer.write(np.full((240, 320, 3), i * 4, np.uint8))
    writer.release()
    ok = check_camera(parse_config({"video": {"source": str(clip)}}).video)
    assert ok.status == "ok", ok
    assert ok.summary.startswith("320x240 at 25 fps")
    assert ok.details["measured_fps"] == pytest.approx(25.0, abs=3.0)

    url = f"rtsp://127.0.0.1:{free_port()}/stream"
    began = time.monotonic()
    dead = check_camera(parse_config({"video": {"source": url}}).video)
    assert dead.status == "fail"
    assert dead.summary.startswith(f"no camera: {url}: could not connect")
    assert time.monotonic() - began < 6  # the first failure answers; no reconnect wait


def test_verdict_names_problems_and_warnings() -> None:
    ok = Check("a", "ok", "")
    assert verdict([ok]) == "verdict: ready: every check passed"
    warned = [ok, Check("gpu", "warn", "")]
    assert verdict(warned) == "verdict: ready, with 1 warning (gpu); worth a look:"
    failed = [*warned, Check("camera", "fail", ""), Check("engines", "fail", "")]
    assert verdict(failed).startswith("verdict: NOT READY: 2 problems (camera, engines)")


# What nvidia-smi printed on an H200 runner for the doctor's query (driver 580).
H200 = "NVIDIA H200, 580.159.04, 143771, 9.0"


@pytest.mark.parametrize("knows_compute_cap", [True, False])
def test_gpu_check_reads_nvidia_smi(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, knows_compute_cap: bool
) -> None:
    fake = tmp_path / "nvidia-smi"
    old_driver = "" if knows_compute_cap else 'case "$1" in *compute_cap*) exit 2;; esac\n'
    line = H200 if knows_compute_cap else H200.rsplit(",", 1)[0]
    fake.write_text(f"#!/bin/sh\n{old_driver}echo '{line}'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    check = check_gpu()
    assert check.status == "ok", check
    cap = ", compute 9.0" if knows_compute_cap else ""
    assert check.summary == f"NVIDIA H200, 143771 MiB, driver 580.159.04{cap}"
    assert check.details["gpus"][0]["name"] == "NVIDIA H200"


def test_memory_check_reads_the_file_and_never_creates_it(tmp_path: Path) -> None:
    from venus.daemon.config.schema import MemoryConfig
    from venus.daemon.doctor_checks import check_memory
    from venus.daemon.memory.persist import MemoryFile
    from venus.daemon.memory.store import MemorySettings, MemoryStore

    journal = tmp_path / "state" / "journal.sqlite3"

    def memory(**keys: object) -> MemoryConfig:
        return parse_config({"memory": keys}).memory

    assert check_memory(memory(enabled=False), journal).status == "ok"
    assert "in RAM only" in check_memory(memory(), journal).summary
    path = tmp_path / "state" / "memory.sqlite3"
    missing = check_memory(memory(persist=True), journal)
    assert missing.status == "ok" and "no file yet" in missing.summary and not path.exists()
    (tmp_path / "state").mkdir()
    store = MemoryStore(MemorySettings(budget_bytes=1 << 20))
    store.add("vision", 0, 0.0, 1.0, np.ones((2, 4)))
    with MemoryFile(path) as file:
        file.save("s1", *store.take_changes(), last_chunk=0)
    found = check_memory(memory(persist=True), journal)
    assert found.status == "ok" and "1 session(s)" in found.summary
    assert found.details["sessions"] == [{"id": "s1", "entries": 1, "bytes": 32, "ended": False}]
    path.chmod(0o644)
    assert check_memory(memory(persist=True), journal).status == "warn"
    path.write_bytes(b"not sqlite" * 50)
    broken = check_memory(memory(persist=True), journal)
    assert broken.status == "fail" and "--file-gone" in broken.fix
    assert path.read_bytes() == b"not sqlite" * 50
