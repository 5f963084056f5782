"""Hand-written trajectories (the documented format) for the report and plot tests."""

from __future__ import annotations

import copy
import json
import wave
from pathlib import Path
from typing import Any

import numpy as np

CHUNK_S = 1.0


def chunks(decisions: str, events: dict[int, list[int]] | None = None) -> list[dict[str, Any]]:
    """One chunk per letter: l listen, s speak, e turn_eos."""
    names = {"l": "listen", "s": "speak", "e": "turn_eos"}
    return [
        {"index": k, "start_s": float(k), "decision": names[c], "action": None, "text": "",
         "delegate": [], "results": [], "events": (events or {}).get(k, []), "frame": False}
        for k, c in enumerate(decisions)
    ]  # fmt: skip


def turn(i: int, speaker: str, role: str, text: str, start: float, end: float,
         cut: float | None = None) -> dict[str, Any]:  # fmt: skip
    return {"index": i, "speaker": speaker, "role": role, "text": text, "start_s": start,
            "end_s": end, "planned_start_s": start, "cut_at_s": cut}  # fmt: skip


def duplex() -> dict[str, Any]:
    """10 s, audio, proactive duplex: a question, a long answer with a background line
    (3.5-5.0 s) and an interruption that stops it (6.2-7.0 s, cut at 8 s)."""
    return {
        "v": 1, "sample_id": "0-000000", "seed": 0, "index": 0, "attempt": 0,
        "group": "audio", "category": "proactive_duplex", "duration_s": 10.0,
        "chunk_s": CHUNK_S, "sample_rate": 16000,
        "files": {"input": "input.wav", "clean_input": "clean_input.wav",
                  "assistant": "assistant.wav", "video": None},
        "turns": [
            turn(0, "user", "question", "Tell me {um} about the moon.", 0.5, 1.8),
            turn(1, "assistant", "answer", "The moon is Earth's only natural satellite.",
                 2.0, 8.0, cut=8.0),
            turn(2, "background", "tv_line", "And now the weather.", 3.5, 5.0),
            turn(3, "user", "interruption", "Stop, please.", 6.2, 7.0),
        ],
        "events": [
            {"index": 0, "kind": "background", "intent": None, "action": "continue_speaking",
             "delegation_decision": "retain", "delegation": None, "turn": 2,
             "window_s": [3.5, 5.0]},
            {"index": 1, "kind": "interruption", "intent": "stop", "action": "stop_output",
             "delegation_decision": "retain", "delegation": None, "turn": 3,
             "window_s": [6.2, 7.0]},
        ],
        "delegations": [],
        "chunks": chunks("llssssssll", {3: [0], 4: [0], 6: [1]}),
        "alignment": {"max_onset_error_ms": 12.5, "turns_measured": 4},
        "acoustics": {},
    }  # fmt: skip


def delegation() -> dict[str, Any]:
    """8 s, video, delegation: a request, a holding line, the result announced at 6 s."""
    return {
        "v": 1, "sample_id": "0-000001", "seed": 0, "index": 1, "attempt": 0,
        "group": "video", "category": "delegation", "duration_s": 8.0,
        "chunk_s": CHUNK_S, "sample_rate": 16000,
        "files": {"input": "input.wav", "clean_input": "clean_input.wav",
                  "assistant": "assistant.wav", "video": "video.avi"},
        "turns": [
            turn(0, "user", "request", "What's the weather in Oslo?", 0.4, 1.6),
            turn(1, "assistant", "holding", "Let me check.", 2.0, 2.9),
            turn(2, "assistant", "announcement", "It is 4 degrees in Oslo.", 6.0, 7.5),
        ],
        "events": [],
        "delegations": [
            {"item_id": "0a1b2c3d", "capability": "weather", "arguments": {"city": "Oslo"},
             "form": "call", "supersedes": None, "status": "completed",
             "result_text": "4 degrees", "call_chunk": 2, "result_chunk": 6,
             "cancel_chunk": None},
        ],
        "chunks": chunks("llellles"),
        "alignment": {"max_onset_error_ms": 3.0, "turns_measured": 3},
        "acoustics": {},
    }  # fmt: skip


def record(t: dict[str, Any]) -> dict[str, Any]:
    kinds: dict[str, int] = {}
    for e in t["events"]:
        kinds[e["kind"]] = kinds.get(e["kind"], 0) + 1
    return {
        "sample_id": t["sample_id"], "index": t["index"], "group": t["group"],
        "category": t["category"], "duration_s": t["duration_s"], "events": kinds,
        "delegations": len(t["delegations"]), "overlap_s": 0.0,
        "path": f"samples/{t['sample_id']}/trajectory.json", "sha256": "",
    }  # fmt: skip


class Loaded:
    """A TrajectorySource over trajectories in memory."""

    def __init__(self, *trajectories: dict[str, Any]) -> None:
        self.by_id = {t["sample_id"]: copy.deepcopy(t) for t in trajectories}

    def load(self, record: dict[str, Any]) -> dict[str, Any]:
        return self.by_id[record["sample_id"]]


def read_wav(path: Path) -> np.ndarray:
    with wave.open(str(path), "rb") as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 16000), path
        return np.frombuffer(w.readframes(w.getnframes()), "<i2").astype(np.float64)


AUDIBLE_DB = 40.0  # below the loudest 10 ms: silent (venus.datagen.fdb's definition)


def check_window(folder: Path, tolerance_s: float = 0.05) -> tuple[float, float]:
    """Assert that ``input.wav - clean_input.wav`` of an FDB sample folder is audible
    exactly inside ``metadata.json``'s ``timestamps`` (each edge within ``tolerance_s``)
    and silent outside; the span measured. Audible: a 10 ms frame (from the file's start)
    whose RMS is within ``AUDIBLE_DB`` of the loudest frame's and above -90 dBFS."""
    meta = json.loads((folder / "metadata.json").read_text())
    inputs, clean = read_wav(folder / "input.wav"), read_wav(folder / "clean_input.wav")
    assert len(inputs) == len(clean), folder
    diff = inputs - clean
    frames = len(diff) // 160
    power = np.mean(diff[: frames * 160].reshape(frames, 160) ** 2, axis=1)
    threshold = max(power.max() * 10 ** (-AUDIBLE_DB / 10), 32767.0**2 * 1e-9)
    audible = power > threshold
    assert audible.any(), f"{folder}: the overlap is not audible"
    ts = meta["timestamps"]
    first, last = round((ts[0] - tolerance_s) * 100), round((ts[1] + tolerance_s) * 100)
    assert not audible[: max(first, 0)].any() and not audible[last:].any(), (folder, ts)
    loud = np.flatnonzero(audible)
    start_s, end_s = loud[0] / 100, (loud[-1] + 1) / 100
    assert abs(start_s - ts[0]) <= tolerance_s and abs(end_s - ts[1]) <= tolerance_s, (
        folder, ts, (start_s, end_s))  # fmt: skip
    return start_s, end_s
