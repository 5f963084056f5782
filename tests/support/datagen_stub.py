"""A stand-in for ``venus.datagen.sample.generate_sample``: real plans, tone audio.

For the runner's mechanics (order, resume, jobs) and the set-level outputs (report, plots,
Full-Duplex-Bench layout) without text-to-speech: each turn is a tone burst over its
planned span, ``clean_input.wav`` is ``input.wav`` without the overlap events' turns (the
same noise), and ``trajectory.json`` follows the documented format. Never used by a test
that claims the real pipeline works.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import wave
from pathlib import Path
from typing import Any

import numpy as np

from venus.datagen.config import GenerationConfig
from venus.datagen.plan import Plan, plain_text, to_dict
from venus.datagen.planner import plan_sample
from venus.datagen.sample import SampleRecord

RATE = 16_000
TONE_HZ = {"user": 220.0, "other": 330.0, "background": 510.0, "assistant": 180.0}
LEVEL = {"user": 0.3, "other": 0.25, "background": 0.08, "assistant": 0.3}
NOISE = 0.002


class StubFailure(RuntimeError):
    """Raised at ``fail_at``: a run cut short."""


def generate(
    config: GenerationConfig, index: int, seed: int, out_dir: Path, fail_at: int | None = None
) -> SampleRecord:
    if index == fail_at:
        raise StubFailure(f"sample {index}: stopped on purpose")
    plan = plan_sample(config, index, seed)
    sample = out_dir / "samples" / plan.sample_id
    tmp = out_dir / "samples" / f".tmp-{plan.sample_id}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    inputs, clean, assistant = render(plan)
    write_wav(tmp / "input.wav", inputs)
    write_wav(tmp / "clean_input.wav", clean)
    write_wav(tmp / "assistant.wav", assistant)
    text = json.dumps(trajectory(plan), ensure_ascii=False, separators=(",", ":"))
    (tmp / "trajectory.json").write_text(text, encoding="utf-8")
    shutil.rmtree(sample, ignore_errors=True)
    tmp.rename(sample)
    kinds: dict[str, int] = {}
    for e in plan.events:
        kinds[e.kind] = kinds.get(e.kind, 0) + 1
    overlap = sum(b - a for a, b in (plan.event_window_s(e) for e in plan.events))
    return SampleRecord(
        plan.sample_id, index, plan.group, plan.category, plan.duration_s, kinds,
        len(plan.delegations), round(overlap, 3), f"samples/{plan.sample_id}/trajectory.json",
        hashlib.sha256(text.encode()).hexdigest(),
    )  # fmt: skip


def render(plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    n = round(plan.duration_s * RATE)
    rng = np.random.default_rng([plan.seed, plan.index])
    noise = NOISE * rng.standard_normal(n)
    inputs, clean, assistant = noise.copy(), noise.copy(), np.zeros(n)
    event_turns = {e.turn for e in plan.events}
    for i, t in enumerate(plan.turns):
        a, b = round(t.start_s * RATE), min(n, round(t.end_s * RATE))
        tone = LEVEL[t.speaker] * np.sin(2 * np.pi * TONE_HZ[t.speaker] * np.arange(b - a) / RATE)
        if t.speaker == "assistant":
            assistant[a:b] += tone
            continue
        inputs[a:b] += tone
        if i not in event_turns:
            clean[a:b] += tone
    return inputs, clean, assistant


def write_wav(path: Path, audio: np.ndarray) -> None:
    pcm = np.clip(np.round(audio * 32767), -32768, 32767).astype("<i2")
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())


def trajectory(plan: Plan) -> dict[str, Any]:
    chunk_s = plan.chunk_s
    windows = [plan.event_window_s(e) for e in plan.events]
    turns = [
        {"index": i, "speaker": t.speaker, "role": t.role, "text": plain_text(t.text),
         "start_s": t.start_s, "end_s": t.end_s, "planned_start_s": t.start_s,
         "cut_at_s": t.cut_at_s}
        for i, t in enumerate(plan.turns)
    ]  # fmt: skip
    events = [
        {"index": k, "kind": e.kind, "intent": e.intent, "action": e.action,
         "delegation_decision": e.delegation_decision, "delegation": e.delegation,
         "turn": e.turn, "window_s": list(windows[k])}
        for k, e in enumerate(plan.events)
    ]  # fmt: skip

    def chunk_of(t: float) -> int:
        return int(t / chunk_s + 1e-6)

    delegations = []
    for d in plan.delegations:
        cancel = None
        if d.cancel_turn is not None:
            cancel = chunk_of(plan.turns[d.cancel_turn].start_s)
        else:
            later = [x for x in plan.delegations if x.supersedes == d.item_id]
            if d.status == "cancelled" and later:
                cancel = chunk_of(plan.turns[later[0].call_turn].start_s)
        delegations.append(
            {"item_id": d.item_id, "capability": d.capability, "arguments": dict(d.arguments),
             "form": d.form, "supersedes": d.supersedes, "status": d.status,
             "result_text": d.result_text, "call_chunk": chunk_of(plan.turns[d.call_turn].start_s),
             "result_chunk": None if d.result_at_s is None else chunk_of(d.result_at_s),
             "cancel_chunk": cancel}
        )  # fmt: skip
    chunks = []
    for k in range(round(plan.duration_s / chunk_s)):
        t0, t1 = k * chunk_s, (k + 1) * chunk_s
        decision, text = "listen", ""
        for t in plan.turns:
            if t.speaker != "assistant" or not (t.start_s < t1 and t.end_s > t0):
                continue
            decision = "turn_eos" if t.end_s <= t1 else "speak"
            if chunk_of(t.start_s) == k:
                text = t.text
        chunks.append({
            "index": k, "start_s": round(t0, 3), "decision": decision,
            "action": next((e.action for e, w in zip(plan.events, windows, strict=True)
                            if chunk_of(w[0]) == k), None),
            "text": text,
            "delegate": [plan.delegate_span(d) for d in plan.delegations
                         if chunk_of(plan.turns[d.call_turn].start_s) == k],
            "results": [d.injected() for d in plan.delegations
                        if d.result_at_s is not None and chunk_of(d.result_at_s) == k],
            "events": [i for i, w in enumerate(windows) if w[0] < t1 and w[1] > t0],
            "frame": plan.group == "video",
        })  # fmt: skip
    return {
        "v": 1, "sample_id": plan.sample_id, "seed": plan.seed, "index": plan.index,
        "attempt": plan.attempt, "group": plan.group, "category": plan.category,
        "duration_s": plan.duration_s, "chunk_s": chunk_s, "sample_rate": RATE,
        "files": {"input": "input.wav", "clean_input": "clean_input.wav",
                  "assistant": "assistant.wav", "video": None},
        "turns": turns, "events": events, "delegations": delegations, "chunks": chunks,
        "alignment": {"max_onset_error_ms": 0.0, "turns_measured": len(turns)},
        "acoustics": to_dict(plan.acoustics),
        "levels": {"peak_dbfs": -1.0, "input_gain_db": 0.0, "assistant_gain_db": 0.0},
    }  # fmt: skip
