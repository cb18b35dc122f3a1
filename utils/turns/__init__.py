"""The labelled end-of-turn set (``corpus``: complete turns and turns cut at word boundaries, from
registry packages, with a speaker per clip), its features cached per clip (``extract``), and the
deterministic training of the fused decision's weights (``train``)."""
