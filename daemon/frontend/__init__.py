"""The frontend loop: one step per chunk (perceive, decide, speak, delegate), in real time
or offline, with the playback controller and the per-chunk timeline."""
