"""Deadlines: when a chunk would finish late, do less of it, in a fixed order.

Each chunk must be done (decision made, its speech handed to token-to-wave) within one
chunk period of its boundary, the moment its last audio sample was captured; otherwise
the next chunk starts late and the schedule falls behind. The stage times of recent
chunks are tracked (exponential moving average), and before each optional stage the
policy checks whether the chunk still fits:

1. the vision encoder is skipped for this chunk (the scene rarely changes within a
   second; the backbone still sees the audio), then
2. the speech budget is shortened: fewer speech tokens this chunk (the reply goes on
   next chunk).

Each degradation is counted in the chunk's timeline record. The offline clock turns the
policy off so that a run is deterministic; it still measures and records misses.
"""

from __future__ import annotations

from dataclasses import dataclass, field

SMOOTHING = 0.3  # weight of the newest observation in the moving average
HEADROOM = 0.9  # plan to finish within this fraction of the period
MIN_SPEECH_FRACTION = 0.2  # never shorten speech below this fraction of the full budget


@dataclass
class Deadlines:
    period_s: float
    enabled: bool = True
    stage_s: dict[str, float] = field(default_factory=dict)  # moving average per stage
    speech_token_s: float = 0.0  # moving average per speech token

    def observe(self, stage: str, seconds: float) -> None:
        old = self.stage_s.get(stage)
        self.stage_s[stage] = seconds if old is None else old + SMOOTHING * (seconds - old)

    def observe_speech(self, seconds: float, tokens: int) -> None:
        if tokens:
            per = seconds / tokens
            old = self.speech_token_s
            self.speech_token_s = per if old == 0 else old + SMOOTHING * (per - old)

    def expected(self, *stages: str) -> float:
        return sum(self.stage_s.get(s, 0.0) for s in stages)

    def skip_vision(self, elapsed_s: float) -> bool:
        """Skip the vision encoder if it and what must follow would overrun the period."""
        if not self.enabled:
            return False
        rest = self.expected("vision_encoder", "prefill", "decide", "text", "speech_decoder")
        return elapsed_s + rest > HEADROOM * self.period_s

    def speech_budget(self, elapsed_s: float, full: int) -> int:
        """Speech tokens that fit in what is left of the period (at most ``full``)."""
        if not self.enabled or self.speech_token_s <= 0:
            return full
        left = HEADROOM * self.period_s - elapsed_s
        fits = int(left / self.speech_token_s)
        floor = max(1, round(MIN_SPEECH_FRACTION * full))
        return max(min(full, fits), floor)
