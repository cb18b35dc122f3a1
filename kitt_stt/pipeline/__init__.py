"""Per-seat streaming logic, one room per concern. The seat (``seat``) is thin wiring from VAD
events to: the open segment and its interim cadence (``segment``), pause-chunked decoding
(``chunks``), the segment's chunk, interim and final decodes (``segment_decoder``; which chunks a
tail's text joins: ``tail``; how texts join across a pause: ``text_join``), the end-of-turn
model's runs (``turn_predictor``), turns (``turn``, the record; ``turn_tracker``, decisions and
commits) and their policies (``eot``, ``turn_text``); also session settings (``settings``),
admission (``admission``), rate limiting (``rate_limit``), the seat's tasks (``seat_tasks``) and
where it reports (``observers``)."""
