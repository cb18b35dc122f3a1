"""What the benchmarks in ``utils/performance`` share, so each tool stays a thin script: a bench
server on the user's model cache and ``--set`` overrides (``server``), percentiles and report
cells (``stats``), Markdown tables (``tables``), the ``/metrics`` scraper (``prometheus``), the
segment-start flooder (``flooder``), the real-time victim it is measured against (``victim``) and
malformed frames with the answers they must get (``malformed``).  Speech, noise and text distance
stay in ``speech.py``, ``cabin_noise.py`` and ``text_distance.py`` beside the tools."""
