"""A tiny checkpoint whose weights force a known conversation (for the frontend tests).

Every backbone layer's output projections are zeroed, so the final hidden state at a
position is the (normalised) embedding of the token there: the next-token logits depend
on the last token only. Embeddings of the tokens in the script are orthogonal basis
vectors, and the untied LM head maps each to its successor: a bigram model.

    <|audio_end|> -> <|listen|>          (a chunk without results: listen)
    <|/result|>   -> <|speak|>           (a result was injected: answer it)
    <|speak|> -> "Sure" -> <|delegate|> -> CALL -> <|/delegate|> -> "done" -> <|chunk_end|>

``CALL`` is one token of a word-level tokenizer whose text is a JSON tool call (or, in a
copy of the engines with another tokenizer, malformed text). The speech decoder's
``end`` row is zeroed so that it always fills its budget (the random vocoder is calibrated
to speak at about -20 dBFS by ``venus init``, so what it says is clearly not silence).
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CALL = '{"name": "weather", "arguments": {"city": "Paris"}}'
WORDS = {"[UNK]": 0, "Sure": 300, "done": 301, CALL: 302, "sunny": 303, "Paris": 304}
SCALE = 40.0  # logit of the scripted successor; random rows stay far below


@dataclass(frozen=True)
class Scripted:
    checkpoint: Path
    engines: Path


def word_tokenizer(path: Path, words: dict[str, int]) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers

    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path.write_text(tok.to_str(pretty=True) + "\n", encoding="utf-8")


def build(root: Path, preset: str = "tiny-audio") -> Scripted:
    import torch

    from venus.export.checkpoint import load_model, save_model
    from venus.export.model.config import PRESETS, config_to_dict

    venus = Path(sys.executable).with_name("venus")
    cfg = config_to_dict(PRESETS[preset]())
    cfg["model"]["backbone"]["tie_embeddings"] = False
    (root / "config.json").write_text(json.dumps(cfg))
    subprocess.run(
        [str(venus), "init", "--config", str(root / "config.json"), "--out", str(root / "init")],
        check=True,
        capture_output=True,
        timeout=300,
    )
    model = load_model(root / "init")
    ids = model.cfg.special_token_ids
    chain = [
        (ids["<|audio_end|>"], ids["<|listen|>"]),
        (ids["<|/result|>"], ids["<|speak|>"]),
        (ids["<|speak|>"], WORDS["Sure"]),
        (WORDS["Sure"], ids["<|delegate|>"]),
        (ids["<|delegate|>"], WORDS[CALL]),
        (WORDS[CALL], ids["<|/delegate|>"]),
        (ids["<|/delegate|>"], WORDS["done"]),
        (WORDS["done"], ids["<|chunk_end|>"]),
    ]
    bb = model.backbone
    with torch.no_grad():
        for layer in bb.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        tokens = sorted({t for pair in chain for t in pair})
        basis = torch.eye(bb.shape.hidden)
        for n, token in enumerate(tokens):
            bb.embed_tokens.weight[token] = basis[n]
        for before, after in chain:
            bb.lm_head.weight[after] = SCALE * basis[tokens.index(before)]
        sd = model.speech_decoder
        sd.lm_head.weight[model.cfg.speech.end_token] = 0.0
    save_model(model, root / "ckpt")
    word_tokenizer(root / "ckpt" / "tokenizer.json", WORDS)
    subprocess.run(
        [str(venus), "export", str(root / "ckpt"), "--out", str(root / "engines")],
        check=True,
        capture_output=True,
        timeout=600,
    )
    return Scripted(root / "ckpt", root / "engines")


def swap_tokenizer(engines: Path, out: Path, words: dict[str, int]) -> Path:
    """A copy of ``engines`` whose tokenizer reads the same ids as other ``words``."""
    import shutil

    from venus.engines.manifest import sha256_file

    shutil.copytree(engines, out)
    word_tokenizer(out / "tokenizer.json", words)
    manifest = json.loads((out / "manifest.json").read_text())
    entry = manifest["tokenizer"]
    entry["bytes"] = (out / "tokenizer.json").stat().st_size
    entry["sha256"] = sha256_file(out / "tokenizer.json")
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2))
    return out
