"""``python -m tests.slow_decode_server serve ...``: the real server, every decode batch
``DECODE_DELAY_S`` slower (tests/test_interims_exact.py)."""

from tests.engine_wrappers import SlowDecodes, serve_with

if __name__ == "__main__":
    serve_with(SlowDecodes)
