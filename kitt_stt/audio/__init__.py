"""Audio handling per seat: the growable PCM buffer (``buffer``), the fixed ring of the last
seconds for the end-of-turn model (``ring``), the segmenter with its pre-roll ring (``vad``), the
speech detectors it asks frame by frame (``detector``: the interface; ``webrtc``, ``silero``: the
engines; ``engines``: which one a seat gets) behind the cabin front end (``frontend``: high-pass
filter, noise floor), and WAV file reading and writing (``wavfile``)."""
