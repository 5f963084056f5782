"""What a `venus train-voice` run reports: the line of a measurement and the plot of its
history (``voice_run.py`` runs it)."""

from __future__ import annotations

import json
from pathlib import Path

from venus.evaluation.markdown import pct
from venus.train.runlog import pyplot

WER_KEYS = ("wer_original", "wer_vocoder", "wer_chain", "wer_units")
LOSS_KEYS = ("flow_loss", "flow_prior", "vocoder_loss", "vocoder_mel", "vocoder_f0")


def measure_line(step: int, m: dict[str, float | None]) -> str:
    def percent(key: str) -> str:
        return pct(m[key], "n/a")

    f0 = ""
    if "voicing_agreement" in m:
        cents = "no frame voiced in both" if m["f0_cents"] is None else f"{m['f0_cents']} cents"
        f0 = f"; f0 head {cents}, voicing {percent('voicing_agreement')}"
    return (
        f"train-voice: measured at step {step}: WER original {percent('wer_original')}, "
        f"vocoder {percent('wer_vocoder')}, chain {percent('wer_chain')} (units "
        f"{percent('wer_units')}); log-mel L1 vocoder {m['vocoder_mel_l1']}, chain "
        f"{m['chain_mel_l1']} (units {m['units_mel_l1']}); RTF flow {m['flow_rtf']}, "
        f"vocoder {m['vocoder_rtf']}{f0}"
    )


def plot_voice_history(history: Path, png: Path) -> bool:
    """Training losses per step and the measured word error rates, as a PNG; False (and a
    warning) without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    rows = [json.loads(line) for line in history.read_text("utf-8").splitlines() if line]
    vals = [r for r in rows if "validation" in r]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.6))
    for key in LOSS_KEYS:
        got = [r for r in rows if key in r]
        a.plot([r["step"] for r in got], [r[key] for r in got], label=key.replace("_", " "),
               linewidth=0.8)  # fmt: skip
    a.set_xlabel("step")
    a.set_ylabel("training loss")
    a.set_yscale("log")
    a.legend(fontsize=7)
    for key in WER_KEYS:
        got = [r for r in vals if r["validation"].get(key) is not None]
        b.plot([r["step"] for r in got], [r["validation"][key] for r in got], marker="o",
               label=key.replace("_", " "))  # fmt: skip
    b.set_xlabel("step")
    b.set_ylabel("word error rate (held out)")
    b.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(png, dpi=90, metadata={"Software": None})
    plt.close(fig)
    return True
