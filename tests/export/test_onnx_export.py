"""`venus export` of the tiny preset at fp32: manifest, hashes, parity, KV cache, streaming.

The export is the session's shared one (``tiny_export`` in tests/conftest.py), run as a
user runs it: `venus init --config tiny` then `venus export --verify` in a subprocess.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
import torch
from conftest import TinyExport

from venus.engines.manifest import Manifest, Sampling, load_manifest, verify
from venus.errors import EngineError
from venus.export.checkpoint import load_model
from venus.export.model.backbone import KVCache
from venus.export.model.flow import chunk_noise
from venus.export.model.venus import VenusModel
from venus.export.onnx.manifest import checkpoint_sha256
from venus.export.onnx.session import open_session, run_session
from venus.export.onnx.verify import FP32_TOLERANCE, check_component

COMPONENTS = (
    "embedding",
    "audio_encoder",
    "vision_encoder",
    "backbone",
    "speech_decoder",
    "flow_decoder",
    "vocoder",
)


@dataclass(frozen=True)
class Exported:
    checkpoint: Path
    root: Path
    manifest: Manifest
    model: VenusModel
    run: subprocess.CompletedProcess[str]


@pytest.fixture(scope="module")
def exported(tiny_export: TinyExport) -> Exported:
    model = load_model(tiny_export.checkpoint)
    assert isinstance(model, VenusModel)
    return Exported(
        tiny_export.checkpoint,
        tiny_export.engines,
        load_manifest(tiny_export.engines),
        model,
        tiny_export.run,
    )


def rel_err(got: np.ndarray, ref: torch.Tensor) -> float:
    want = ref.double().numpy()
    return float(np.abs(got - want).max() / np.abs(want).max())


def test_export_verify_exits_0_with_progress_and_a_table(exported: Exported) -> None:
    err, out = exported.run.stderr, exported.run.stdout
    for name in COMPONENTS:
        assert f"venus.export.onnx.build: {name} " in err  # one progress line per graph
        assert any(line.startswith(name) and line.endswith("pass") for line in out.splitlines())
    assert "wrote engines/manifest.json in" in err
    assert "top-1 agreement 50/50" in out
    assert "Warning" not in err and "INFO    onnx" not in err  # the exporter's chatter is muted


def test_manifest_validates_and_its_hashes_match(exported: Exported) -> None:
    m, cfg = exported.manifest, exported.model.cfg
    verify(exported.root, m)
    assert (m.model, m.frontend, m.precision, m.backend, m.opset) == (
        "tiny",
        "omni",
        "fp32",
        "onnx",
        20,
    )
    assert tuple(m.components) == COMPONENTS
    assert [f.path for f in m.components["backbone"].files] == [
        "backbone.onnx",
        "backbone.onnx.data",
    ]
    assert [f.path for f in m.components["vocoder"].files] == ["vocoder.onnx"]
    assert m.special_tokens == cfg.special_token_ids
    assert m.schedule.lookahead_tokens == 3 and m.schedule.hop_out == 480
    assert m.source == {
        "path": str(exported.checkpoint.resolve()),
        "sha256": checkpoint_sha256(exported.checkpoint),
    }
    assert {"realtime-venus", "torch", "onnx", "onnxruntime", "onnxscript"} <= set(m.tools)
    assert m.model_config["model"]["name"] == "tiny"
    # --temperature, --top-p, --flow-temperature
    assert m.sampling == Sampling(temperature=0.7, top_p=0.9, flow_temperature=1.0)


@pytest.mark.parametrize(
    ("option", "message"),
    [(("--temperature", "2.5"), "--temperature 2.5: Input should be less than or equal to 2"),
     (("--top-p", "0"), "--top-p 0.0: Input should be greater than 0"),
     (("--flow-temperature", "-1"),
      "--flow-temperature -1.0: Input should be greater than or equal to 0")],
)  # fmt: skip
def test_a_sampling_recommendation_out_of_range_is_refused_before_the_export(
    exported: Exported, tmp_path: Path, option: tuple[str, str], message: str
) -> None:
    venus = Path(sys.executable).with_name("venus")
    done = subprocess.run(
        [str(venus), "export", str(exported.checkpoint), "--out", str(tmp_path / "e"), *option],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert done.returncode == 1 and message in done.stderr, done.stderr[-2000:]
    assert not (tmp_path / "e").exists()  # refused before anything was written


def test_manifest_shapes_follow_the_spec(exported: Exported) -> None:
    c = exported.manifest.components
    bb = c["backbone"]
    assert (bb.layers, bb.kv_heads, bb.head_dim) == (2, 2, 16)
    shapes = {t.name: (t.dtype, t.shape) for t in (*bb.inputs, *bb.outputs)}
    assert shapes["inputs_embeds"] == ("float32", ("batch", "sequence", 64))
    assert shapes["attention_mask"] == ("int64", ("batch", "total_sequence"))
    assert shapes["past_key_values.1.value"] == ("float32", ("batch", 2, "past_sequence", 16))
    assert shapes["logits"] == ("float32", ("batch", "sequence", 527))
    assert shapes["present.1.key"] == ("float32", ("batch", 2, "total_sequence", 16))
    sd = {t.name: t.shape for t in (*c["speech_decoder"].inputs, *c["speech_decoder"].outputs)}
    assert sd["position_ids"] == ("batch", "condition_length + sequence")
    assert sd["logits"] == ("batch", "condition_length + sequence", 6563)
    flow = {t.name: t.shape for t in (*c["flow_decoder"].inputs, *c["flow_decoder"].outputs)}
    assert flow["tokens"] == flow["token_mask"] == ("batch", "group + 3")
    assert flow["noise"] == flow["mel"] == ("batch", 80, "2 * group")
    assert [t.name for t in c["vocoder"].outputs][:2] == ["pcm", "present_conv.0"]


def test_a_corrupt_truncated_or_missing_file_is_named(exported: Exported, tmp_path: Path) -> None:
    root = tmp_path / "engines"
    shutil.copytree(exported.root, root)
    data = root / "backbone.onnx.data"
    blob = bytearray(data.read_bytes())
    blob[100] ^= 0xFF
    data.write_bytes(bytes(blob))
    with pytest.raises(
        EngineError, match=r"backbone\.onnx\.data: sha256 .*backbone engine is corrupt"
    ):
        verify(root, exported.manifest)
    data.write_bytes(bytes(blob[:-1]))
    with pytest.raises(EngineError, match=r"backbone\.onnx\.data: .* bytes.*truncated"):
        verify(root, exported.manifest)
    shutil.copy(exported.root / "backbone.onnx.data", data)
    (root / "vocoder.onnx").unlink()
    with pytest.raises(EngineError, match=r"vocoder\.onnx: missing \(vocoder engine\)"):
        verify(root, exported.manifest, sha256=None)


@pytest.mark.parametrize("component", COMPONENTS)
def test_every_graph_matches_torch_at_fp32(exported: Exported, component: str) -> None:
    check = check_component(exported.root, exported.manifest, component, exported.model, seed=7)
    assert check.result == "pass"
    assert check.rel <= FP32_TOLERANCE


def test_hand_opened_backbone_session_gives_the_reference_next_token_logits(
    exported: Exported,
) -> None:
    """An ONNX Runtime session opened by hand from the manifest's backbone entry, fed
    inputs_embeds from the embedding graph, gives the same next-token logits as the torch
    reference."""
    m, bb = exported.manifest, exported.model.backbone
    embedding = ort.InferenceSession(str(exported.root / m.components["embedding"].graph))
    entry = m.components["backbone"]
    backbone = ort.InferenceSession(str(exported.root / entry.graph))
    ids = np.array([[3, 141, 59, 265, 35, 512, 513]], dtype=np.int64)
    (embeds,) = embedding.run(["inputs_embeds"], {"input_ids": ids})
    n = ids.shape[1]
    feeds = {
        "inputs_embeds": embeds,
        "attention_mask": np.ones((1, n), np.int64),
        "position_ids": np.arange(n)[None],
    }
    assert entry.layers is not None and entry.kv_heads is not None and entry.head_dim is not None
    for t in entry.inputs:
        if t.name.startswith("past_key_values."):
            feeds[t.name] = np.zeros((1, entry.kv_heads, 0, entry.head_dim), np.float32)
    logits = backbone.run(["logits"], feeds)[0][:, -1]
    with torch.no_grad():
        ref, _ = bb.step(bb.embed(torch.from_numpy(ids)), bb.new_cache(1))
    assert rel_err(logits, ref[:, -1]) <= FP32_TOLERANCE
    assert logits.argmax() == int(ref[0, -1].argmax())


def test_kv_cache_prefill_then_three_decode_steps(exported: Exported) -> None:
    bb = exported.model.backbone
    session = open_session(exported.root / "backbone.onnx")
    cache: KVCache = bb.new_cache(1)
    empty = torch.zeros(1, 2, 0, 16)
    past = {f"past_key_values.{i}.{p}": empty for i in range(2) for p in ("key", "value")}
    ids = torch.tensor([[5, 77, 300, 12, 9]])
    with torch.no_grad():
        for _ in range(4):  # prefill, then three single-token decode steps
            start, n = cache.positions, ids.shape[1]
            embeds = bb.embed(ids)
            ref, ref_hidden = bb.step(embeds, cache)
            out = run_session(session, {
                "inputs_embeds": embeds,
                "attention_mask": torch.ones(1, start + n, dtype=torch.int64),
                "position_ids": torch.arange(start, start + n)[None],
                **past,
            })  # fmt: skip
            assert rel_err(out["logits"], ref) <= FP32_TOLERANCE
            assert rel_err(out["hidden_states"], ref_hidden) <= FP32_TOLERANCE
            past = {k: torch.from_numpy(out[k.replace("past_key_values", "present")]) for k in past}
            ids = ref[:, -1:].argmax(-1)
    assert cache.length == 8
    assert rel_err(past["past_key_values.1.value"].numpy(), cache.values[1]) <= FP32_TOLERANCE


def test_audio_encoder_graph_streams_like_step(exported: Exported) -> None:
    enc, gen = exported.model.audio_encoder, torch.Generator().manual_seed(1)
    session = open_session(exported.root / "audio_encoder.onnx")
    state, context = enc.new_state(1), torch.zeros(1, 0, 64)
    with torch.no_grad():
        for _ in range(4):  # context grows 0, 50, 100 frames, then stays at 2 chunks
            mel = torch.randn(1, 80, 100, generator=gen)
            ref = enc.step(mel, state)
            out = run_session(session, {"mel": mel, "context": context})
            assert rel_err(out["tokens"], ref) <= FP32_TOLERANCE
            assert rel_err(out["new_context"], state.context) <= FP32_TOLERANCE
            context = torch.from_numpy(out["new_context"])
    assert context.shape == (1, 100, 64)


def test_speech_decoder_graph_decodes_with_condition_length_0(exported: Exported) -> None:
    sd, gen = exported.model.speech_decoder, torch.Generator().manual_seed(2)
    session = open_session(exported.root / "speech_decoder.onnx")
    cache = sd.new_cache(1)
    past = {
        f"past_key_values.{i}.{p}": torch.zeros(1, 2, 0, 16)
        for i in range(2)
        for p in ("key", "value")
    }
    condition = torch.randn(1, 4, 64, generator=gen)  # one chunk's backbone hidden states
    ids = torch.tensor([[sd.cfg.start_token]])
    with torch.no_grad():
        for _ in range(4):  # the chunk's condition + start, then three tokens, condition empty
            ref, _ = sd.step(torch.cat((sd.condition(condition), sd.embed(ids)), dim=1), cache)
            n = cache.length
            new = condition.shape[1] + 1
            out = run_session(session, {
                "condition": condition,
                "input_ids": ids,
                "attention_mask": torch.ones(1, n, dtype=torch.int64),
                "position_ids": torch.arange(n - new, n)[None],
                **past,
            })  # fmt: skip
            assert rel_err(out["logits"], ref) <= FP32_TOLERANCE
            past = {k: torch.from_numpy(out[k.replace("past_key_values", "present")]) for k in past}
            ids, condition = ref[:, -1:].argmax(-1), torch.zeros(1, 0, 64)
    assert cache.length == 4 + 1 + 3


def test_flow_graph_groups_equal_flow_step(exported: Exported) -> None:
    """Driven as the engines runtime does: hold back the lookahead tokens (and their noise)
    of a non-final chunk; at the final flush pad the lookahead with masked tokens."""
    flow = exported.model.flow_decoder
    lookahead, fpt, prompt_frames = 3, 2, 8
    tokens = torch.randint(0, 6561, (1, 35), generator=torch.Generator().manual_seed(3))
    chunks = [tokens[:, :25], tokens[:, 25:]]
    noises = [chunk_noise(flow.cfg, 1, c.shape[1], 4, i) for i, c in enumerate(chunks)]
    with torch.no_grad():
        state = flow.new_state(1)
        ref = [
            flow.step(c, z, state, final=i == 1)
            for i, (c, z) in enumerate(zip(chunks, noises, strict=True))
        ]
    session = open_session(exported.root / "flow_decoder.onnx")
    past = {
        f"past_key_values.{i}.{p}": torch.zeros(1, 4, 0, 16)
        for i in range(2)
        for p in ("key", "value")
    }
    prompt, held, held_noise = (
        torch.zeros(1, 80, prompt_frames),
        tokens[:, :0],
        torch.zeros(1, 80, 0),
    )
    for i, (chunk, fresh) in enumerate(zip(chunks, noises, strict=True)):
        toks, noise = torch.cat((held, chunk), dim=1), torch.cat((held_noise, fresh), dim=-1)
        final = i == len(chunks) - 1
        group = toks.shape[1] if final else toks.shape[1] - lookahead
        pad = lookahead if final else 0
        out = run_session(session, {
            "tokens": torch.cat((toks, torch.zeros(1, pad, dtype=torch.int64)), dim=1),
            "token_mask": torch.cat((torch.ones(1, toks.shape[1]), torch.zeros(1, pad)), dim=1),
            "noise": noise[..., : group * fpt],
            "prompt": prompt,
            **past,
        })  # fmt: skip
        mel = torch.from_numpy(out["mel"])
        assert mel.shape == ref[i].shape == (1, 80, [44, 26][i])
        assert rel_err(out["mel"], ref[i]) <= FP32_TOLERANCE
        held, held_noise = toks[:, group:], noise[..., group * fpt :]
        prompt = torch.cat((prompt, mel), dim=-1)[..., -prompt_frames:]
        past = {k: torch.from_numpy(out[k.replace("past_key_values", "present")]) for k in past}
    assert past["past_key_values.0.key"].shape[2] == 35
