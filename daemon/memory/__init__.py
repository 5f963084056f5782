"""Long-session memory: past chunks' vision and audio embeddings kept within a fixed byte
budget (``store``, its key index in ``keys``), the ones most like the current input found
again for the model's context, and saved next to the journal so that a daemon restart
keeps them (``persist``)."""
