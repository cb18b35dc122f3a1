"""``python -m tests.number_words_server serve ...``: the real server on the tone model, its words
written as Mandarin number words (tests/test_text_off_loop.py)."""

from tests.engine_wrappers import NumberWords, serve_with

if __name__ == "__main__":
    serve_with(NumberWords)
