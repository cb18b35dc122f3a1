"""``python -m tests.short_input_server serve ...``: the real server on the tone model, its engine
reading only 2 s of a decode (tests/test_openai_compat.py)."""

from tests.engine_wrappers import ShortInput, serve_with

if __name__ == "__main__":
    serve_with(ShortInput)
