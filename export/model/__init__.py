"""The Venus reference model in torch: one module per component, streaming state in one object.

``config`` is torch-free (``venus model info`` uses it without torch); everything else
imports torch.
"""
