"""``python -m tests.english_numbers_server serve ...``: the real server on the tone model, its words
written as English sentences with number words (tests/test_text_itn_phrases.py)."""

from tests.engine_wrappers import EnglishNumbers, serve_with

if __name__ == "__main__":
    serve_with(EnglishNumbers)
