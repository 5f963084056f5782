"""``venus doctor``'s device checks: the audio devices, the microphone's level, the camera.

Each returns a frozen ``Check`` and catches what its device can throw; the runner in
``doctor`` adds a deadline around each.
"""

from __future__ import annotations

import math
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from venus.daemon.config.schema import AudioConfig, VideoConfig
from venus.daemon.doctor_checks import Check
from venus.errors import DeviceError
from venus.hw.events import DeviceLost, HwEvent

if TYPE_CHECKING:
    from venus.hw.audio import AudioDevice
    from venus.hw.backends import BackendName
    from venus.hw.camera import Camera
    from venus.hw.frames import Frame

SILENT_DBFS = -70.0  # below this RMS level the input counts as silent
FLOOR_DBFS = -120.0  # levels are reported no lower than this (log of zero)
CLIPPED = 0.999  # peak sample magnitude counted as clipping
RECORD_TIMEOUT_S = 4.0  # for the one-second chunk, including opening the stream
FIRST_FRAME_TIMEOUT_S = 8.0  # a V4L2 open, or an RTSP connect (FFmpeg gives up at 5 s)
MEASURE_FPS_S = 1.0  # frames counted over this long to measure the rate
SHOWN_DEVICES = 4  # device names in the summary line; the table lists them all

NO_MIC_FIX = (
    "check `pactl list short sources` (or `arecord -l`), then set audio.device to an "
    "input device's name or index"
)


def check_audio_devices(backend: BackendName) -> Check:
    """The audio devices with their channels and default rates; fail without an input."""
    from venus.hw.audio import list_devices

    try:
        devices = list_devices(backend=backend)
    except (DeviceError, OSError) as e:
        portaudio = isinstance(e, OSError)  # sounddevice's import: no libportaudio
        fix = "install PortAudio: `sudo apt-get install libportaudio2`" if portaudio else NO_MIC_FIX
        summary = f"cannot list audio devices ({backend}): {e}"
        return Check("audio", "fail", summary, {"backend": backend}, fix=fix)
    rows = [_device_row(d) for d in devices]
    inputs = [r for r in rows if r["inputs"] > 0]
    outputs = [r for r in rows if r["outputs"] > 0]
    details = {"backend": backend, "devices": rows}
    if not rows:
        return Check(
            "audio",
            "fail",
            f"no audio devices ({backend})",
            details,
            fix="microphone: none found — " + NO_MIC_FIX,
        )
    names = ", ".join(r["name"] for r in rows[:SHOWN_DEVICES])
    more = f" and {len(rows) - SHOWN_DEVICES} more" if len(rows) > SHOWN_DEVICES else ""
    plural = "s" * (len(outputs) != 1)
    summary = (
        f"{len(inputs)} input, {len(outputs)} output device{plural} ({backend}): {names}{more}"
    )
    if not inputs:
        return Check(
            "audio",
            "fail",
            f"no input device; {summary}",
            details,
            fix="microphone: none found — " + NO_MIC_FIX,
        )
    if not outputs:
        return Check(
            "audio",
            "warn",
            f"no output device; {summary}",
            details,
            fix="speaker: none found — check `pactl list short sinks` (or `aplay -l`)",
        )
    return Check("audio", "ok", summary, details)


def _device_row(device: AudioDevice) -> dict[str, Any]:
    flags = (("in", device.default_input), ("out", device.default_output))
    return {
        "index": device.index,
        "name": device.name,
        "inputs": device.max_input_channels,
        "outputs": device.max_output_channels,
        "rate_hz": device.default_rate_hz,
        "default": [kind for kind, on in flags if on],
    }


def check_microphone(audio: AudioConfig) -> Check:
    """Record one second from ``audio.device`` and report its RMS and peak level."""
    from venus.hw.audio import SAMPLE_RATE, Microphone

    events: list[HwEvent] = []
    details: dict[str, Any] = {"device": audio.device, "backend": audio.backend}
    name = audio.device
    try:
        mic = Microphone(
            audio.device,
            backend=audio.backend,
            sample_rate=audio.sample_rate,
            channels=audio.channels,
            block_ms=audio.block_ms,
            chunk_s=1.0,
            on_event=events.append,
        )
        with mic:
            chunk = mic.read(timeout_s=RECORD_TIMEOUT_S)
    except TimeoutError:
        return Check(
            "microphone",
            "fail",
            f"{name}: opened, but no audio in {RECORD_TIMEOUT_S:g} s",
            details,
            fix="the device delivers nothing: " + NO_MIC_FIX,
        )
    except (DeviceError, OSError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        details["error"] = str(e)
        return Check(
            "microphone",
            "fail",
            f"{name}: cannot record: {first}",
            details,
            fix=NO_MIC_FIX,
        )
    samples = chunk.samples.astype(np.float64)
    rms = math.sqrt(float(np.mean(samples**2))) if samples.size else 0.0
    peak = float(np.max(np.abs(samples))) if samples.size else 0.0
    seconds = samples.size / SAMPLE_RATE
    details |= {"rms_dbfs": dbfs(rms), "peak_dbfs": dbfs(peak), "seconds": seconds}
    if chunk.filled_s > 0:
        lost = "; ".join(e.reason for e in events if isinstance(e, DeviceLost)) or "device lost"
        return Check(
            "microphone",
            "fail",
            f"{name}: lost while recording ({lost})",
            details,
            fix="the device went away: check cables and `pactl list short sources`",
        )
    level = f"RMS {dbfs(rms):.1f} dBFS, peak {dbfs(peak):.1f} dBFS over {seconds:g} s"
    muted = " (audio.muted = true: the daemon starts muted)" if audio.muted else ""
    if peak == 0.0:
        return Check(
            "microphone",
            "warn",
            f"{name}: silent, every sample zero over {seconds:g} s{muted}",
            details,
            fix=_SILENT_FIX,
        )
    if dbfs(rms) < SILENT_DBFS:
        return Check(
            "microphone", "warn", f"{name}: silent, {level}{muted}", details, fix=_SILENT_FIX
        )
    if peak >= CLIPPED:
        return Check(
            "microphone",
            "warn",
            f"{name}: clipping, {level}{muted}",
            details,
            fix="lower the input volume (`pactl set-source-volume @DEFAULT_SOURCE@ 70%`)",
        )
    return Check("microphone", "ok", f"{name}: {level}{muted}", details)


_SILENT_FIX = (
    "the input carries nothing: unmute it and raise its volume (`pactl set-source-mute "
    "@DEFAULT_SOURCE@ 0`, `pactl set-source-volume @DEFAULT_SOURCE@ 100%`), speak while "
    "checking, or pick another audio.device"
)


def dbfs(level: float) -> float:
    """A linear level (1.0 = full scale) in dBFS, no lower than ``FLOOR_DBFS``."""
    return round(max(FLOOR_DBFS, 20 * math.log10(level)) if level > 0 else FLOOR_DBFS, 1)


def check_camera(video: VideoConfig) -> Check:
    """Open ``video.source``; report resolution and frame rate, or why there is none."""
    from venus.hw.camera import Camera, parse_source

    details: dict[str, Any] = {"source": video.source}
    if not video.enabled:
        return Check("camera", "skipped", "disabled (video.enabled = false)", details)
    try:
        source = parse_source(video.source)
    except DeviceError as e:
        return Check("camera", "fail", str(e), details, fix="correct video.source")
    if source.kind == "v4l2":
        arg = source.argument
        node = Path(f"/dev/video{arg}" if isinstance(arg, int) else arg)
        if not node.exists():
            return Check(
                "camera",
                "fail",
                f"no camera: {node} not found",
                details,
                fix=f"{node} not found — set video.enabled = false or plug a "
                "camera (`v4l2-ctl --list-devices` lists them)",
            )
    lost = threading.Event()
    events: list[HwEvent] = []

    def on_event(event: HwEvent) -> None:
        events.append(event)
        if isinstance(event, DeviceLost):
            lost.set()  # the first failure is the answer; the camera would retry

    camera = Camera(
        video.source,
        capture_width=video.capture_width,
        capture_height=video.capture_height,
        reconnect_max_s=video.reconnect_max_s,
        on_event=on_event,
    )
    try:
        camera.start()
        first = _first_frame(camera, lost)
        if first is None:
            reasons = "; ".join(e.reason for e in events if isinstance(e, DeviceLost))
            why = reasons or f"no frame within {FIRST_FRAME_TIMEOUT_S:g} s"
            return Check(
                "camera",
                "fail",
                f"no camera: {video.source}: {why}",
                details,
                fix="check the source (`v4l2-ctl --list-devices`, or open the URL "
                "with ffplay), or set video.enabled = false",
            )
        info = camera.info()
        last, began = first, time.monotonic()
        while (left_s := MEASURE_FPS_S - (time.monotonic() - began)) > 0:
            newer = camera.wait_frame(last.seq, left_s)
            if newer is None:
                break
            last = newer
    except DeviceError as e:
        return Check(
            "camera",
            "fail",
            f"no camera: {e}",
            details,
            fix="correct video.source, or set video.enabled = false",
        )
    finally:
        camera.stop()
    span_s = last.captured_at_s - first.captured_at_s
    measured = (last.seq - first.seq) / span_s if span_s > 0 else 0.0
    details |= {
        "width": info.width,
        "height": info.height,
        "fps": info.fps,
        "measured_fps": round(measured, 1),
        "backend": info.backend,
    }
    summary = (
        f"{info.width}x{info.height} at {info.fps:g} fps ({info.backend}), "
        f"measured {measured:.1f} fps"
    )
    return Check("camera", "ok", summary, details)


def _first_frame(camera: Camera, lost: threading.Event) -> Frame | None:
    """The first frame, or None once the camera reports itself lost or the time is up."""
    got: list[Frame] = []

    def wait() -> None:  # returns at once when the camera is stopped
        frame = camera.wait_frame(0, FIRST_FRAME_TIMEOUT_S)
        if frame is not None:
            got.append(frame)
        lost.set()

    threading.Thread(target=wait, name="doctor-camera-wait", daemon=True).start()
    lost.wait(FIRST_FRAME_TIMEOUT_S)
    return got[0] if got else None
