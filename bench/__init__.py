"""Benchmarks (``venus bench``): speed and memory measured side by side with a baseline.

May import every other subpackage; the torch reference (``venus.export``) only lazily,
for side-by-side runs, so estimates and engine benchmarks work without torch.
"""
