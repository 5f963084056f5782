"""The data pipeline (offline): duplex and delegation trajectories on one timeline,
for training and evaluation (docs/data.md)."""
