"""Audio handling per seat: the growable PCM buffer (``buffer``), the fixed ring of the last
seconds for the end-of-turn model (``ring``), the webrtcvad segmenter with its pre-roll ring
(``vad``), and WAV file reading and writing (``wavfile``)."""
