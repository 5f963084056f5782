"""``Engines.open``: verify an engine directory and open a runner for every component.

The inference path reads top to bottom: manifest -> verified files -> sessions (one per
graph, providers chosen once) -> model-level runners. Every runner is shared and
stateless; each stream's state comes from ``runner.new_state()`` and resets in one call.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path

from venus.engines.backbone import BackboneRunner
from venus.engines.encoders import AudioEncoderRunner, VisionRunner
from venus.engines.flow import FlowRunner
from venus.engines.hashcache import HashCache, verify_engines
from venus.engines.manifest import Manifest, load_manifest
from venus.engines.options import EngineOptions, Provider
from venus.engines.providers import choose_providers
from venus.engines.rope import rope_of
from venus.engines.session import Session, open_component
from venus.engines.speech import SpeechDecoderRunner
from venus.engines.tokenizer import Tokenizer
from venus.engines.vocoder import VocoderRunner
from venus.errors import EngineError

log = logging.getLogger(__name__)

REQUIRED = ("embedding", "audio_encoder", "backbone", "speech_decoder", "flow_decoder", "vocoder")


@dataclass(frozen=True)
class Engines:
    """Every component of one engine directory, ready to run (numpy in and out)."""

    root: Path
    manifest: Manifest
    providers: tuple[Provider, ...]  # chosen, in order of preference
    sessions: dict[str, Session]
    audio: AudioEncoderRunner
    vision: VisionRunner | None  # None for an audio frontend
    backbone: BackboneRunner
    speech: SpeechDecoderRunner
    flow: FlowRunner
    vocoder: VocoderRunner
    tokenizer: Tokenizer

    @classmethod
    def open(
        cls, root: Path, options: EngineOptions | None = None, hashes: HashCache | None = None
    ) -> Engines:
        """Load ``root/manifest.json``, verify every file, open every graph.

        ``hashes`` defaults to the sha256 cache in ``options.cache_dir`` (see ``hashcache``).
        Raises EngineError naming the file or component at fault.
        """
        options = options or EngineOptions()
        manifest = load_manifest(root)
        missing = [c for c in REQUIRED if c not in manifest.components]
        if manifest.frontend == "omni" and "vision_encoder" not in manifest.components:
            missing.append("vision_encoder")
        if missing:
            raise EngineError(
                f"{root}: the manifest lists no {', '.join(missing)} engine; re-run `venus export`"
            )
        if manifest.tokenizer is None:
            raise EngineError(
                f"{root}: the manifest lists no tokenizer (exported by an older release); "
                "re-run `venus export`"
            )
        verify_engines(root, manifest, hashes or HashCache.load(options.cache_dir))
        tokenizer = Tokenizer.open(root / manifest.tokenizer.path, text_vocab(root, manifest))
        providers = choose_providers(options.providers)
        sessions = {
            name: open_component(root, name, entry, options, providers)
            for name, entry in manifest.components.items()
        }
        s, c = manifest.schedule, manifest.components
        log.info(
            "engines %s (%s, %s) open on %s",
            root,
            manifest.model,
            manifest.precision,
            ", ".join(sessions["backbone"].providers),
        )
        return cls(
            root=root,
            manifest=manifest,
            providers=providers,
            sessions=sessions,
            audio=AudioEncoderRunner(sessions["audio_encoder"], s.mel_frames),
            vision=VisionRunner(sessions["vision_encoder"]) if "vision_encoder" in c else None,
            backbone=BackboneRunner(
                sessions["embedding"], sessions["backbone"], c["backbone"], rope_of(manifest)
            ),
            speech=SpeechDecoderRunner(
                sessions["speech_decoder"],
                c["speech_decoder"],
                s.speech_start_token,
                s.speech_end_token,
                rope_of(manifest, "speech_decoder"),
            ),
            flow=FlowRunner(sessions["flow_decoder"], c["flow_decoder"], s),
            vocoder=VocoderRunner(sessions["vocoder"], s.hop_out),
            tokenizer=tokenizer,
        )

    def token_id(self, name: str) -> int:
        """The id of special token ``name`` (e.g. ``<|listen|>``)."""
        try:
            return self.manifest.special_tokens[name]
        except KeyError:
            raise EngineError(
                f"{self.root}: the manifest has no special token {name!r} (it has "
                f"{', '.join(self.manifest.special_tokens)})"
            ) from None

    @property
    def control_token_ids(self) -> tuple[int, ...]:
        """Ids of the control tokens (``<|listen|>``, ``<|speak|>``, ``<|turn_eos|>``)."""
        return tuple(self.token_id(t) for t in self.manifest.control_tokens)


def text_vocab(root: Path, manifest: Manifest) -> int:
    """The backbone's upstream text vocabulary: ids below it are text, special tokens follow.

    From the checkpoint config the manifest carries (``model.backbone.vocab_size``), else
    the smallest special-token id (they are numbered from the end of the text vocabulary).
    """
    config = manifest.model_config.get("model", manifest.model_config)
    backbone = config.get("backbone") if isinstance(config, dict) else None
    size = backbone.get("vocab_size") if isinstance(backbone, dict) else None
    if isinstance(size, int) and size > 0:
        return size
    if manifest.special_tokens:
        return min(manifest.special_tokens.values())
    raise EngineError(
        f"{root}: the manifest gives neither the backbone's vocab_size nor special-token "
        "ids, so text and special tokens cannot be told apart; re-run `venus export`"
    )
