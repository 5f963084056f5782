"""The deadline policy: skip vision first, then shorten speech, only when late."""

from __future__ import annotations

from venus.daemon.frontend.deadline import HEADROOM, MIN_SPEECH_FRACTION, Deadlines


def test_nothing_is_degraded_while_the_chunk_fits() -> None:
    d = Deadlines(1.0)
    for stage in ("vision_encoder", "prefill", "speech_decoder"):
        d.observe(stage, 0.05)
    d.observe_speech(0.25, 25)
    assert not d.skip_vision(elapsed_s=0.1)
    assert d.speech_budget(elapsed_s=0.3, full=25) == 25


def test_a_late_chunk_skips_vision_then_shortens_speech() -> None:
    d = Deadlines(1.0)
    d.observe("vision_encoder", 0.4)
    d.observe("prefill", 0.2)
    assert d.skip_vision(elapsed_s=0.5)
    d.observe_speech(1.0, 25)  # 40 ms a token
    left = HEADROOM * 1.0 - 0.5
    assert d.speech_budget(elapsed_s=0.5, full=25) == int(left / 0.04)
    # never below the floor, however late
    assert d.speech_budget(elapsed_s=5.0, full=25) == round(MIN_SPEECH_FRACTION * 25)


def test_the_offline_clock_never_degrades() -> None:
    d = Deadlines(1.0, enabled=False)
    d.observe("vision_encoder", 10.0)
    d.observe_speech(10.0, 1)
    assert not d.skip_vision(elapsed_s=5.0)
    assert d.speech_budget(elapsed_s=5.0, full=25) == 25


def test_estimates_follow_recent_chunks() -> None:
    d = Deadlines(1.0)
    d.observe("prefill", 0.1)
    for _ in range(30):
        d.observe("prefill", 0.5)
    assert abs(d.stage_s["prefill"] - 0.5) < 1e-3
