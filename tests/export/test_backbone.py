"""Backbone parity with transformers' Qwen3 (via our converter), and KV-cache decoding."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from transformers import Qwen3Config, Qwen3ForCausalLM

from venus.export.convert.qwen3 import backbone_config_from_qwen3, qwen3_tensors
from venus.export.convert.upstream import HFCheckpoint
from venus.export.model.backbone import Backbone
from venus.export.model.config import SPECIAL_TOKENS

TOL = 1e-5


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).abs().max() / b.abs().max()).detach())


def make_qwen3(
    tmp_path: Path, tie: bool, dtype: torch.dtype = torch.float32
) -> tuple[Path, Qwen3ForCausalLM]:
    torch.manual_seed(0)
    # Deliberately unlike the real config: odd heads, head_dim != hidden / heads, GQA 3:1.
    hc = Qwen3Config(
        vocab_size=97,
        hidden_size=36,
        intermediate_size=70,
        num_hidden_layers=3,
        num_attention_heads=6,
        num_key_value_heads=2,
        head_dim=10,
        rope_theta=5000.0,
        rms_norm_eps=1e-5,
        tie_word_embeddings=tie,
        max_position_embeddings=256,
    )
    hf = Qwen3ForCausalLM(hc).eval()
    # Random norms so a loader that ignores them fails.
    with torch.no_grad():
        for name, p in hf.named_parameters():
            if "norm" in name:
                p.uniform_(0.5, 1.5)
    hf.to(dtype).save_pretrained(tmp_path / "qwen3")
    return tmp_path / "qwen3", hf.float()


def load_converted(path: Path) -> Backbone:
    ck = HFCheckpoint(path)
    cfg = backbone_config_from_qwen3(ck.config, str(path))
    model = Backbone(cfg).eval()
    state = dict(qwen3_tensors(ck, cfg, torch.Generator().manual_seed(0)))
    missing, unexpected = model.load_state_dict(
        {k: v.float() for k, v in state.items()}, strict=False
    )
    assert not unexpected
    assert set(missing) <= ({"lm_head.weight"} if cfg.tie_embeddings else set())
    return model


@pytest.mark.parametrize("tie", [False, True])
def test_full_forward_matches_transformers(tmp_path: Path, tie: bool) -> None:
    path, hf = make_qwen3(tmp_path, tie)
    ours = load_converted(path)
    ids = torch.randint(0, 97, (2, 11))
    with torch.no_grad():
        ref = hf(ids).logits
        logits, hidden = ours.step(ours.embed(ids), ours.new_cache(2))
    assert rel_err(logits[..., :97], ref) <= TOL
    assert logits.shape[-1] == 97 + len(SPECIAL_TOKENS)
    assert hidden.shape == (2, 11, 36)


def test_kv_cache_decode_matches_full_forward(tmp_path: Path) -> None:
    path, hf = make_qwen3(tmp_path, tie=False)
    ours = load_converted(path)
    ids = torch.randint(0, 97, (1, 12))
    with torch.no_grad():
        ref = hf(ids).logits
        cache = ours.new_cache(1)
        pieces = [ours.step(ours.embed(ids[:, :6]), cache)[0]]
        pieces += [ours.step(ours.embed(ids[:, i : i + 1]), cache)[0] for i in range(6, 12)]
    assert cache.length == 12
    assert rel_err(torch.cat(pieces, 1)[..., :97], ref) <= TOL


def test_special_tokens_get_new_rows_reproducibly(tmp_path: Path) -> None:
    path, _ = make_qwen3(tmp_path, tie=False)
    a, b = load_converted(path), load_converted(path)
    rows = a.embed_tokens.weight[97:]
    assert rows.shape[0] == len(SPECIAL_TOKENS)
    assert torch.equal(rows, b.embed_tokens.weight[97:])
    assert len({tuple(r.tolist()) for r in rows}) == len(SPECIAL_TOKENS)  # all distinct


def test_bf16_upstream_stays_bf16(tmp_path: Path) -> None:
    path, _ = make_qwen3(tmp_path, tie=False, dtype=torch.bfloat16)
    ck = HFCheckpoint(path)
    cfg = backbone_config_from_qwen3(ck.config, str(path))
    dtypes = {t.dtype for _, t in qwen3_tensors(ck, cfg, torch.Generator().manual_seed(0))}
    assert dtypes == {torch.bfloat16}


def test_cache_reset_starts_a_new_stream(tmp_path: Path) -> None:
    path, _ = make_qwen3(tmp_path, tie=True)
    ours = load_converted(path)
    ids = torch.randint(0, 97, (1, 5))
    cache = ours.new_cache(1)
    with torch.no_grad():
        first, _ = ours.step(ours.embed(ids), cache)
        cache.reset()
        again, _ = ours.step(ours.embed(ids), cache)
    assert torch.equal(first, again)


def test_training_pass_matches_the_masked_forward_on_right_padded_rows(tmp_path: Path) -> None:
    """``hidden_states`` (plain causal attention, no LM head) gives each row's tokens the
    states the exported forward gives them under its padding mask; each row alone agrees."""
    path, _hf = make_qwen3(tmp_path, tie=False)
    ours = load_converted(path)
    ids = torch.randint(0, 97, (3, 13))
    lengths = [13, 9, 4]
    mask = torch.tensor([[1] * n + [0] * (13 - n) for n in lengths])
    positions = torch.arange(13)[None].expand(3, 13)
    empty = ours.new_cache(3)
    with torch.no_grad():
        _logits, ref, _k, _v = ours(ours.embed(ids), mask, positions, empty.keys, empty.values)
        got = ours.hidden_states(ours.embed(ids))
        alone = ours.hidden_states(ours.embed(ids[1:2, :9]))
    assert got.shape == ref.shape == (3, 13, 36)
    for row, n in enumerate(lengths):
        assert rel_err(got[row, :n], ref[row, :n]) <= TOL
    assert rel_err(alone[0], ref[1, :9]) <= TOL
    assert rel_err(ours.lm_head(got[0]), _logits[0]) <= TOL
