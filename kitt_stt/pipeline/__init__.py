"""Per-seat streaming logic: session settings (``settings``), the open segment and its interim
cadence (``segment``), pause-chunked decoding (``chunks``), which chunks a tail's text joins
(``tail``), a final's words on the seat's clock (``final_words``), turns and the end-of-turn policies (``turn``, ``eot``), rate limiting (``rate_limit``)
and the seat pipeline that ties VAD, ASR and turns together (``seat``)."""
