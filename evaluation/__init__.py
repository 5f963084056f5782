"""The evaluation suite (offline): full-duplex behaviour on Full-Duplex-Bench-style data,
delegation, baselines and reports (docs/evaluation.md)."""
