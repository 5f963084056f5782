"""Token-to-wave (flow decoder + vocoder, with and without its sine source): streaming
equals one-shot, causality, lengths."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import Tensor

from venus.export.model.config import PRESETS
from venus.export.model.flow import FlowDecoder, chunk_noise, token_groups, utterance_noise
from venus.export.model.vocoder import Vocoder

C = 25  # tokens per chunk (1 s at 25 Hz)
HOP = 480  # samples per mel frame (20 ms at 24 kHz)


@pytest.fixture(scope="module")
def flow() -> FlowDecoder:
    torch.manual_seed(0)
    return FlowDecoder(PRESETS["tiny"]().flow).eval()


@pytest.fixture(scope="module", params=["none", "sine"])
def vocoder(request: pytest.FixtureRequest) -> Vocoder:
    """The tiny vocoder, and with a sine source (its f0 head voiced throughout, so the
    phase it carries counts everywhere)."""
    torch.manual_seed(0)
    vocoder = Vocoder(replace(PRESETS["tiny"]().vocoder, source=request.param))
    if vocoder.source is not None:
        with torch.no_grad():
            vocoder.source.head.proj.bias[1] = 4.0
    return vocoder.eval()


def rel_err(a: Tensor, ref: Tensor) -> float:
    return float((a - ref).abs().max() / ref.abs().max())


def stream_flow(
    flow: FlowDecoder, tokens: Tensor, seed: int, final_empty: bool = False
) -> list[Tensor]:
    """Feed ``tokens`` in chunks of C (last one final); -> the mel of every step."""
    b, n = tokens.shape
    state = flow.new_state(b)
    starts = list(range(0, n, C))
    outs = []
    with torch.no_grad():
        for i, s in enumerate(starts):
            chunk = tokens[:, s : s + C]
            noise = chunk_noise(flow.cfg, b, chunk.shape[1], seed, i)
            final = i == len(starts) - 1 and not final_empty
            outs.append(flow.step(chunk, noise, state, final=final))
        if final_empty:
            empty = tokens[:, :0]
            outs.append(flow.step(empty, chunk_noise(flow.cfg, b, 0, seed, 99), state, final=True))
    return outs


def one_shot_flow(flow: FlowDecoder, tokens: Tensor, seed: int) -> Tensor:
    b, n = tokens.shape
    with torch.no_grad():
        return flow(tokens, utterance_noise(flow.cfg, b, n, seed))


def random_tokens(flow: FlowDecoder, n: int, batch: int = 2, seed: int = 1) -> Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, flow.cfg.codebook, (batch, n), generator=gen)


def test_flow_streaming_equals_one_shot(flow: FlowDecoder) -> None:
    tokens = random_tokens(flow, 4 * C)
    outs = stream_flow(flow, tokens, seed=7)
    streamed, ref = torch.cat(outs, dim=-1), one_shot_flow(flow, tokens, seed=7)
    assert [o.shape[-1] for o in outs] == [44, 50, 50, 56]  # lookahead 3 tokens = 6 frames
    assert streamed.shape == ref.shape == (2, flow.cfg.mel_bins, 4 * C * 2)
    assert rel_err(streamed, ref) <= 1e-5
    assert torch.isfinite(streamed).all()


def test_flow_reset_reproduces_the_stream(flow: FlowDecoder) -> None:
    tokens = random_tokens(flow, 2 * C, batch=1)
    state = flow.new_state(1)
    runs = []
    with torch.no_grad():
        for _ in range(2):
            outs = [
                flow.step(
                    tokens[:, i * C : (i + 1) * C],
                    chunk_noise(flow.cfg, 1, C, 3, i),
                    state,
                    final=i == 1,
                )
                for i in range(2)
            ]
            runs.append(torch.cat(outs, dim=-1))
            with pytest.raises(ValueError, match="reset"):
                flow.step(tokens[:, :C], chunk_noise(flow.cfg, 1, C, 3, 0), state)
            state.reset()
    assert torch.equal(runs[0], runs[1])


@pytest.mark.parametrize(
    ("n", "final_empty", "lengths"),
    [
        (60, False, [44, 50, 26]),  # short final chunk: 10 tokens + 3 held back
        (50, True, [44, 50, 6]),  # empty final chunk flushes the 3 held-back tokens
        (10, False, [20]),  # one short final chunk: everything at once
    ],
)
def test_flow_final_flush_length_rule(
    flow: FlowDecoder, n: int, final_empty: bool, lengths: list[int]
) -> None:
    tokens = random_tokens(flow, n)
    outs = stream_flow(flow, tokens, seed=5, final_empty=final_empty)
    assert [o.shape[-1] for o in outs] == lengths
    assert sum(lengths) == 2 * n
    if not final_empty:  # the one-shot path groups like a stream whose last chunk is non-empty
        assert rel_err(torch.cat(outs, dim=-1), one_shot_flow(flow, tokens, seed=5)) <= 1e-5


def test_token_groups_follow_the_rule() -> None:
    assert token_groups(100, C, 3) == [(0, 22), (22, 47), (47, 72), (72, 100)]
    assert token_groups(26, C, 3) == [(0, 22), (22, 26)]
    assert token_groups(0, C, 3) == []


def test_flow_is_chunk_causal(flow: FlowDecoder) -> None:
    tokens = random_tokens(flow, 4 * C)
    changed = tokens.clone()
    k = 2 * C  # first token of chunk 3
    changed[:, k] = (changed[:, k] + 1) % flow.cfg.codebook
    a = torch.cat(stream_flow(flow, tokens, seed=2), dim=-1)
    b = torch.cat(stream_flow(flow, changed, seed=2), dim=-1)
    first = 2 * (k - flow.cfg.lookahead_tokens)  # frames of tokens whose lookahead sees k
    assert torch.equal(a[..., :first], b[..., :first])
    assert (a[..., first:] - b[..., first:]).abs().max() > 1e-3


def test_flow_rejects_wrong_chunk_size(flow: FlowDecoder) -> None:
    state = flow.new_state(1)
    tokens = random_tokens(flow, 10, batch=1)
    with pytest.raises(ValueError, match="chunks of 25"):
        flow.step(tokens, chunk_noise(flow.cfg, 1, 10, 0, 0), state)
    with pytest.raises(ValueError, match="noise"):
        flow.step(tokens, chunk_noise(flow.cfg, 1, 9, 0, 0), state, final=True)


def smooth_mel(frames: int, bins: int = 80) -> Tensor:
    t = torch.arange(frames, dtype=torch.float32)[None, None]
    c = torch.arange(bins, dtype=torch.float32)[None, :, None]
    return -4.0 + 2.0 * torch.sin(2 * torch.pi * t / 60.0 + c / 8.0)


def stream_vocoder(vocoder: Vocoder, mel: Tensor, chunk: int) -> Tensor:
    state = vocoder.new_state(mel.shape[0])
    with torch.no_grad():
        parts = [
            vocoder.step(mel[..., s : s + chunk], state) for s in range(0, mel.shape[-1], chunk)
        ]
    return torch.cat(parts, dim=-1)


@pytest.mark.parametrize("chunk", [50, 7])
def test_vocoder_streaming_equals_one_shot(vocoder: Vocoder, chunk: int) -> None:
    torch.manual_seed(3)
    mel = torch.randn(2, 80, 100)
    with torch.no_grad():
        ref = vocoder(mel)
    streamed = stream_vocoder(vocoder, mel, chunk)
    assert ref.shape == streamed.shape == (2, 100 * HOP)
    assert rel_err(streamed, ref) <= 1e-5


def test_vocoder_is_causal(vocoder: Vocoder) -> None:
    torch.manual_seed(4)
    mel = torch.randn(1, 80, 60)
    changed = mel.clone()
    k = 30
    changed[..., k] += 1.0
    with torch.no_grad():
        a, b = vocoder(mel), vocoder(changed)
    assert torch.equal(a[:, : k * HOP], b[:, : k * HOP])
    assert (a[:, k * HOP :] - b[:, k * HOP :]).abs().max() > 0


def test_vocoder_joins_have_no_clicks(vocoder: Vocoder) -> None:
    """Equality implies it; also check the step at each join against its neighbourhood.

    With these weights a join's step is < 5x the local median step; feeding chunks through
    a fresh state each time (a click at every join) gives > 100x.
    """
    mel, chunk = smooth_mel(100), 7
    with torch.no_grad():
        ref = vocoder(mel)
    streamed = stream_vocoder(vocoder, mel, chunk)
    assert rel_err(streamed, ref) <= 1e-5
    steps = streamed[0].diff().abs()  # steps[j - 1] is the step into sample j
    for j in range(chunk * HOP, streamed.shape[-1], chunk * HOP):
        local = torch.cat((steps[j - 1 - HOP : j - 1], steps[j : j + HOP])).median()
        assert steps[j - 1] <= 20 * local, f"click at sample {j}"


def test_end_to_end_one_second(flow: FlowDecoder, vocoder: Vocoder) -> None:
    tokens = random_tokens(flow, C, batch=1)
    fstate, vstate = flow.new_state(1), vocoder.new_state(1)
    with torch.no_grad():
        mel = flow.step(tokens, chunk_noise(flow.cfg, 1, C, 0, 0), fstate, final=True)
        pcm = vocoder.step(mel, vstate)
    assert mel.shape == (1, 80, 50)
    assert pcm.shape == (1, 24000) and pcm.dtype == torch.float32
    assert torch.isfinite(pcm).all()


def test_random_init_vocoder_is_audible() -> None:
    """``init_model`` calibrates the vocoder: without it random weights sit near -95 dBFS."""
    from venus.export.model.init import init_component

    def level(v: Vocoder) -> float:
        mel = torch.randn((1, 80, 100), generator=torch.Generator().manual_seed(7))
        with torch.no_grad():
            pcm = v(mel)
        return float(20 * torch.log10(pcm.pow(2).mean().sqrt()))

    cfg = PRESETS["tiny"]().vocoder
    plain, calibrated, again = Vocoder(cfg), Vocoder(cfg), Vocoder(cfg)
    init_component(calibrated, 0, "vocoder")
    init_component(again, 0, "vocoder")
    with torch.no_grad():  # the draw without calibration: same N(0, 0.02) weights
        for p_plain, p_cal in zip(plain.parameters(), calibrated.parameters(), strict=True):
            p_plain.copy_(p_cal)
        plain.conv_post.weight.copy_(torch.randn(plain.conv_post.weight.shape) * 0.02)
    assert level(plain) < -60.0
    assert -24.0 < level(calibrated) < -16.0
    assert torch.equal(calibrated.conv_post.weight, again.conv_post.weight)
