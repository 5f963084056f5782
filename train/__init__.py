"""Training (``venus train``): the tiny model taught by the data pipeline's trajectories.
Offline and torch-based, like ``venus.export``; the daemon never imports it."""
