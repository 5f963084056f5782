"""The listening loss (train/heard.py): which turns and frames it reads, its decoding and
error count, and a run with it: the head trains and resumes, and stays out of the
checkpoint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from support.states import assert_same_states

from venus.train.heard import (
    ALPHABET,
    BLANK,
    Heard,
    HeardResult,
    character_errors,
    heard_turns,
    normalise,
    shifted,
    turn_frames,
)


def test_only_the_users_turns_are_heard_in_chunk_units() -> None:
    turns = [
        {"speaker": "user", "text": "What's 2+2?  Tell-me!", "start_s": 1.0, "end_s": 2.5},
        {"speaker": "assistant", "text": "Four.", "start_s": 3.0, "end_s": 3.5},
        {"speaker": "background", "text": "News at ten.", "start_s": 4.0, "end_s": 5.0},
        {"speaker": "user", "text": "?!", "start_s": 6.0, "end_s": 6.2},  # nothing to spell
    ]
    [h] = heard_turns(turns, chunk_s=0.5)
    assert (h.start, h.end, h.text) == (2.0, 5.0, "what's 2 2 tell me")
    assert "".join(ALPHABET[c - 1] for c in h.labels) == h.text
    assert normalise("  Ünïcode — OK ") == "n code ok"


def test_an_example_holds_only_whole_turns_in_its_own_chunks() -> None:
    turns = (Heard(1.2, 2.8, "a", (3,)), Heard(4.5, 6.1, "b", (4,)), Heard(7.0, 9.5, "c", (5,)))
    assert [h.text for h in shifted(turns, 0, 12)] == ["a", "b", "c"]
    crop = shifted(turns, 4, 5)  # chunks 4..8: a before, c past the end
    assert [(h.start, h.end, h.text) for h in crop] == [(0.5, pytest.approx(2.1), "b")]


def test_a_turn_is_read_from_just_before_it_to_just_after_within_the_example() -> None:
    h = Heard(1.0, 2.0, "x", (3,))
    assert turn_frames(h, 4, 50, 1.0) == (45, 115)  # 0.1 s before, 0.3 s after, at 50 Hz
    assert turn_frames(Heard(0.0, 3.9, "x", (3,)), 4, 50, 1.0) == (0, 200)  # clipped


def test_greedy_decoding_merges_repeats_and_drops_blanks() -> None:
    def cls(c: str) -> int:
        return BLANK if c == "_" else ALPHABET.index(c) + 1

    path = "hh_e_ll_lo_ _ww"
    log_probs = torch.full((len(path) + 3, 1, len(ALPHABET) + 1), -9.0)
    for t, c in enumerate(path + "abc"):  # frames past the turn's length are not read
        log_probs[t, 0, cls(c)] = 0.0
    said = Heard(0.0, 1.0, "hello w", ())
    result = HeardResult(torch.tensor(0.0), 1, log_probs, [len(path)], [0], [said])
    assert result.transcripts() == ["hello w"] == result.texts


def test_character_errors_count_edits_against_the_reference() -> None:
    assert character_errors("hello world", "helo world") == (1, 11)
    assert character_errors("abc", "") == (3, 3)
    assert character_errors("", "ab") == (2, 0)


@pytest.mark.slow  # trains twice, then exports: about 60 s
def test_a_run_with_the_listening_loss_trains_its_head_resumes_and_exports_without_it(
    small_set: Path, tmp_path: Path
) -> None:
    from venus.cli import main
    from venus.export.checkpoint import INDEX
    from venus.train.config import TrainConfig
    from venus.train.loop import train

    def cfg() -> TrainConfig:
        return TrainConfig(steps=4, batch_size=2, warmup_steps=1, checkpoint_every=2,
                           validation=0.34, threads=1, ctc_weight=1.0)  # fmt: skip

    whole = train(cfg(), small_set, tmp_path / "whole", lambda _l: None)
    assert whole.metrics["heard_turns"] > 0 and whole.metrics["heard_cer"] > 0
    assert whole.metrics["ctc_loss"] < whole.baseline["ctc_loss"]  # the head learns
    train(cfg(), small_set, tmp_path / "parts", lambda _l: None, stop_after=3)
    train(cfg(), small_set, tmp_path / "parts", lambda _l: None)
    assert_same_states(tmp_path / "whole", tmp_path / "parts", ("model", "listen"))
    history = (tmp_path / "whole" / "train" / "history.jsonl").read_text().splitlines()
    assert all("ctc_loss" in json.loads(h) for h in history if "loss" in json.loads(h))
    names = json.loads((tmp_path / "whole" / INDEX).read_text())["weight_map"]
    assert names and not any("listen" in n or n == "proj.weight" for n in names)
    assert main(["export", str(tmp_path / "whole"), "--out", str(tmp_path / "engines")]) == 0
