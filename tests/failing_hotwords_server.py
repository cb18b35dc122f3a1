"""``python -m tests.failing_hotwords_server serve ...``: the real server, whose engine fails to
prepare a hotword list holding ``boom`` (tests/test_e2e_hotword_budget.py)."""

from tests.engine_wrappers import FailingHotwords, serve_with

if __name__ == "__main__":
    serve_with(FailingHotwords)
