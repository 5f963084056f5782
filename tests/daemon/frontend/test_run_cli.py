"""`venus demo` and `venus run --offline` as a user runs them, and the shipped engines."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
from conftest import TinyExport
from support.frontend import config, write_wav

from venus.daemon.frontend.channel import NoHarness
from venus.daemon.frontend.deadline import MIN_SPEECH_FRACTION, Deadlines
from venus.daemon.frontend.session import check_schedule
from venus.daemon.frontend.step import ChunkInput, ChunkStep, Samplers, StepSettings
from venus.engines.options import EngineOptions
from venus.engines.runners import Engines
from venus.engines.sampler import LogitBias, Sampler
from venus.errors import ConfigError
from venus.hw.frames import Frame
from venus.hw.synthetic_camera import draw_frame

REPO = Path(__file__).resolve().parents[3]
SHIPPED_RECIPE = "venus-tiny-wide-gpu.toml"  # what scripts/make-tiny-engines trains
SHIPPED_LISTEN = "venus-tiny-listen-long.toml"  # its listening stage (make-venus-tiny)
VENUS = Path(sys.executable).with_name("venus")


def venus(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(VENUS), *args], cwd=cwd, capture_output=True, text=True, timeout=600, check=False
    )


def test_venus_demo_writes_every_output_and_says_what_the_assistant_did(
    tmp_path: Path,
) -> None:
    scenario = json.loads((REPO / "demo" / "scenario" / "scenario.json").read_text())
    chunks = math.ceil(scenario["duration_s"])
    done = venus("demo", "--out", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"chunk {chunks:>4}/{chunks}" in done.stdout and "real time" in done.stdout
    out = tmp_path / "out"
    with wave.open(str(REPO / "demo" / "scenario" / "scenario.wav")) as w:
        frames, rate = w.getnframes(), w.getframerate()
    with wave.open(str(out / "output.wav")) as w:
        assert (w.getnframes(), w.getframerate(), w.getnchannels()) == (frames, rate, 1)
    with wave.open(str(out / "conversation.wav")) as w:
        assert (w.getnframes(), w.getnchannels()) == (frames, 2)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["chunks"] == chunks
    lines = (out / "timeline.jsonl").read_text().splitlines()
    assert len(lines) == chunks and all(json.loads(line)["vision"] for line in lines)
    # the weights it ran, said as the manifest records them
    shipped = json.loads((REPO / "demo" / "engines" / "tiny" / "manifest.json").read_text())
    assert summary["weights"] == shipped.get("trained")
    assert summary["trained"] is (shipped.get("trained") is not None)
    assert summary["weights_said"] in done.stdout
    # what the assistant did about each of the user's turns, printed and in the summary
    judged = [
        m for m in summary["behaviour"] if m["what"] in {e["kind"] for e in scenario["events"]}
    ]
    assert [m["at_s"] for m in judged] == [e["start_s"] for e in scenario["events"]]
    assert "what the assistant did:" in done.stdout
    assert all(m["line"] in done.stdout for m in summary["behaviour"])
    # the delegations it made went to the harness: items.jsonl lists the calls (a cancel
    # or retry naming no item of the session makes none)
    spans = [d for line in lines for d in json.loads(line)["delegations"]]
    valid = [d for d in spans if d["valid"]]
    calls = [d for d in valid if d["name"] not in ("cancel", "retry")]
    items = (out / "items.jsonl").read_text().splitlines()
    assert len(calls) <= len(items) <= len(valid) <= len(spans)
    assert {json.loads(i)["span"] for i in items} <= {d["raw"] for d in valid}
    assert (out / "journal.sqlite3").is_file()
    # each run starts a fresh journal: a stale one (here not even SQLite) and its
    # evidence are replaced, not opened
    (out / "journal.sqlite3").write_text("not a journal")
    (out / "journal.evidence").mkdir(exist_ok=True)
    (out / "journal.evidence" / "stale").write_text("x")
    again = venus("demo", "--out", "out", "--quiet", cwd=tmp_path)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "chunk    1/" not in again.stdout
    assert not (out / "journal.evidence" / "stale").exists()
    # the same items again, ids included: item ids are drawn from the seed, and the
    # results the model reads name them
    assert (out / "items.jsonl").read_text().splitlines() == items


def test_the_demo_says_how_trained_weights_were_trained() -> None:
    """Engines exported from a `venus train` checkpoint carry its record in the manifest
    (``trained``); the demo's banner and summary say it instead of UNTRAINED."""
    from venus.demo.cli import demo_meta

    record = {"by": "venus train", "step": 1500, "steps": 1500, "preset": "small",
              "validation": {"opening_accuracy": 0.912}}  # fmt: skip
    meta = demo_meta(record)
    assert meta["trained"] is True and meta["weights"] == record
    said = str(meta["weights_said"])
    assert "UNTRAINED" not in said
    assert "small preset, step 1500 of 1500" in said and "first chunk 91% right" in said
    assert "UNTRAINED" in str(demo_meta(None)["weights_said"])
    kept = record | {"step": 1250, "recipe": {"train": {"keep": "balanced_events"}}}
    said = str(demo_meta(kept)["weights_said"])  # a step chosen in validation, not the last
    assert "step 1250 of 1500 (its best validation, train.keep = balanced_events)" in said
    last = kept | {"step": 1500, "beside": 1250}  # OUT/last, the run's last step
    said = str(demo_meta(last)["weights_said"])
    assert "step 1500 of 1500 (the run's last; train.keep = balanced_events held step 1250)" in said
    assert "best validation" not in said


def test_the_shipped_engines_are_the_venus_tiny_recipe_trained_to_its_end() -> None:
    """demo/engines/tiny is what scripts/make-tiny-engines writes: the checkpoint `venus
    train` made with train/recipes/venus-tiny-wide-gpu.toml as it stands (the manifest
    records the recipe it resolved; read as `venus train` reads a recipe to resume, so a key
    added since with its default changes nothing), trained to its end and holding the step
    its ``train.keep`` chose (a validation step), or the run's last step written beside it
    (``beside``: the kept step) when the closed loop preferred it, started from the listening
    stage (venus-tiny-listen-long.toml, to its last step), every file's hash checking, in a
    few MB."""
    from venus.train.config import load_train_config, parse_train_config

    shipped_dir = REPO / "demo" / "engines" / "tiny"
    shipped = json.loads((shipped_dir / "manifest.json").read_text())
    trained = shipped["trained"]
    assert trained is not None, "demo/engines/tiny is untrained: run scripts/make-tiny-engines"
    recipe = load_train_config(REPO / "train" / "recipes" / SHIPPED_RECIPE)
    assert parse_train_config(trained["recipe"], "the shipped manifest") == recipe, (
        f"train/recipes/{SHIPPED_RECIPE} changed since demo/engines/tiny was trained: run "
        "scripts/make-tiny-engines"
    )
    assert trained["by"] == "venus train" and trained["preset"] == recipe.preset
    assert trained["steps"] == recipe.steps
    beside = trained.get("beside")
    if recipe.keep == "last" or beside is not None:  # the last step (OUT/last: beside the kept)
        assert trained["step"] == recipe.steps
        assert beside is None or (
            0 < beside < recipe.steps and beside % recipe.checkpoint_every == 0
        )
    else:  # a step validated on the way (every checkpoint_every), the best by train.keep
        assert 0 < trained["step"] <= recipe.steps
        assert trained["step"] % recipe.checkpoint_every == 0
    listen = load_train_config(REPO / "train" / "recipes" / SHIPPED_LISTEN)
    init = trained.get("init")
    assert init is not None, "venus-tiny starts from its listening stage (--init)"
    assert parse_train_config(init["recipe"], "the shipped manifest's init") == listen, (
        f"train/recipes/{SHIPPED_LISTEN} changed since demo/engines/tiny was trained: "
        "run scripts/make-tiny-engines"
    )
    assert init["step"] == listen.steps
    Engines.open(shipped_dir, EngineOptions())  # every hash checks
    size = sum(p.stat().st_size for p in shipped_dir.iterdir())
    assert size < 20_000_000, f"demo/engines/tiny is {size / 1e6:.1f} MB"


def test_venus_run_offline_from_the_command_line(tiny_export: TinyExport, tmp_path: Path) -> None:
    wav = write_wav(tmp_path / "in.wav", 3)
    args = ("run", "--engines", str(tiny_export.engines), "--offline", str(wav))
    done = venus(*args, "--out", "o", "--seed", "3", "--quiet", cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "chunks        3" in done.stdout or "chunks       3" in done.stdout
    assert {p.name for p in (tmp_path / "o").iterdir()} == {
        "timeline.jsonl",
        "output.wav",
        "conversation.wav",
        "summary.json",
    }
    paced = venus(*args, "--out", "p", "--seed", "3", "--quiet", "--paced", cwd=tmp_path)
    assert paced.returncode == 0, paced.stderr[-3000:]
    summary = json.loads((tmp_path / "p" / "summary.json").read_text())
    assert summary["wall_s"] >= 3.0 - 1.0  # a chunk per second: the last waited for its end
    unpaced = json.loads((tmp_path / "o" / "summary.json").read_text())
    assert summary["paced"] and not unpaced["paced"]
    assert summary["sampling"] == {  # these engines recommend the daemon's own defaults
        "temperature": 0.7, "top_p": 0.9, "temperature_from": "engines", "top_p_from": "engines",
        "flow_temperature": 1.0, "flow_temperature_from": "engines",
    }  # fmt: skip
    # no harness: pacing changes the wall time, not what the assistant did
    wav = "output.wav"
    assert (tmp_path / "p" / wav).read_bytes() == (tmp_path / "o" / wav).read_bytes()

    def decided(out: str) -> list[tuple[str, str]]:
        lines = (tmp_path / out / "timeline.jsonl").read_text().splitlines()
        return [(r["decision"], r["text"]) for r in map(json.loads, lines)]

    assert decided("p") == decided("o")
    missing = venus(*args, cwd=tmp_path)
    assert missing.returncode == 1 and "--offline needs --out DIR" in missing.stderr
    bad = venus(
        "run",
        "--engines",
        str(tmp_path / "nowhere"),
        "--offline",
        str(wav),
        "--out",
        "x",
        cwd=tmp_path,
    )
    assert bad.returncode == 1 and "nowhere" in bad.stderr


def test_a_chunk_period_the_engines_were_not_exported_for_is_refused(
    tiny_export: TinyExport,
) -> None:
    engines = Engines.open(tiny_export.engines, EngineOptions())
    with pytest.raises(ConfigError, match=r"schedule.chunk_s is 0.5 s .* exported for 1.0 s"):
        check_schedule(config(tiny_export.engines, chunk_s=0.5), engines)


def test_a_late_chunk_skips_vision_then_shortens_speech(tiny_export: TinyExport) -> None:
    engines = Engines.open(tiny_export.engines, EngineOptions())
    never = -1e3
    samplers = Samplers(  # speak, and say a full chunk of text: then speech must follow
        control=Sampler(
            bias=LogitBias({engines.token_id(t): never for t in ("<|listen|>", "<|turn_eos|>")})
        ),
        text=Sampler(
            bias=LogitBias(
                {
                    engines.token_id(t): never
                    for t in ("<|chunk_end|>", "<|turn_eos|>", "<|delegate|>")
                }
            )
        ),
        speech=Sampler(),
    )
    size = engines.manifest.schedule.image_size
    frame = Frame(
        image=draw_frame(1, size=size),
        seq=1,
        captured_at_s=0.0,
        source_width=size,
        source_height=size,
    )
    chunk = ChunkInput(0, 0.0, np.zeros(16000, np.float32), frame)

    late = Deadlines(1.0)
    late.observe("vision_encoder", 5.0)  # as if the last chunks took seconds
    late.observe_speech(4.0, 1)
    step = ChunkStep(engines, NoHarness(), samplers, late, StepSettings())
    result = step(step.new_stream(), chunk)
    assert result.decision == "speak" and result.text_tokens == StepSettings().max_text_tokens
    assert result.degraded == ["vision_skipped", "speech_shortened"] and not result.vision
    assert 0 < result.speech.size <= round(MIN_SPEECH_FRACTION * 25)

    calm = ChunkStep(engines, NoHarness(), samplers, Deadlines(1.0), StepSettings())
    result = calm(calm.new_stream(), chunk)
    assert result.vision and result.degraded == [] and result.speech.size == 25


def test_the_chunk_that_ends_a_reply_may_say_half_a_chunk_more(tiny_export: TinyExport) -> None:
    """A reply's last word often runs past its second: the chunk that says <|turn_eos|>
    decodes up to ``final_chunk_tokens`` (37 at 25 a chunk); any other chunk 25."""
    from venus.engines.speech import final_chunk_tokens

    engines = Engines.open(tiny_export.engines, EngineOptions())
    end = engines.speech.end_token
    not_now = ("<|listen|>", "<|turn_eos|>")
    speak = Sampler(bias=LogitBias({engines.token_id(t): -1e3 for t in not_now}))

    def says(*tokens: int) -> Sampler:
        script = iter(tokens)
        return Sampler(choose=lambda _scores: next(script))

    word = engines.tokenizer.encode("a")[0]
    chunk = ChunkInput(0, 0.0, np.zeros(16000, np.float32), None)
    never_ends = Sampler(bias=LogitBias({end: -1e3}))
    for text, want in (((word, engines.token_id("<|turn_eos|>")), final_chunk_tokens(25)),
                       ((word, engines.token_id("<|chunk_end|>")), 25)):  # fmt: skip
        samplers = Samplers(control=speak, text=says(*text), speech=never_ends)
        step = ChunkStep(engines, NoHarness(), samplers, Deadlines(1.0), StepSettings())
        result = step(step.new_stream(), chunk)
        assert result.speech.size == want and result.reply_ended == (want > 25)
        assert result.degraded == []


def test_without_a_terminal_the_live_run_logs_a_summary_per_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from venus.daemon.frontend.timeline import ChunkRecord
    from venus.daemon.run_cli import SUMMARY_EVERY, _periodic_summary

    add = _periodic_summary()
    caplog.set_level("INFO")
    for i in range(2 * SUMMARY_EVERY - 1):
        add(
            ChunkRecord(
                index=i,
                start_s=float(i),
                decision="speak" if i % 3 == 0 else "listen",
                text="",
                text_tokens=0,
                speech_tokens=0,
                reply_id=None,
                reply_ended=False,
                delegations=(),
                results=(),
                context_tokens=10,
                evicted_tokens=0,
                vision=False,
                speech_ratio=0.0,
                playback_stopped=False,
                latency_ms={"mel": 1.0, "total": float(i % 10)},
                deadline_missed=i == 5,
                degraded=(),
            )
        )
    (line,) = [r.getMessage() for r in caplog.records if "last" in r.getMessage()]
    assert line == (
        f"last {SUMMARY_EVERY} chunks: listen 40, speak 20, turn_eos 0; "
        "chunk time p50 4 ms, p95 9 ms; 1 deadlines missed"
    )
