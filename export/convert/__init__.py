"""Assemble a Venus checkpoint from Hugging Face-layout upstream checkpoints (files only)."""
