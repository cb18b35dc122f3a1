"""Audio handling per seat: the growable PCM buffer (``buffer``), the webrtcvad segmenter with
its pre-roll ring (``vad``), and WAV file reading (``wavfile``)."""
