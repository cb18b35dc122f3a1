"""Adapters for voice-agent frameworks, and the framework-neutral pieces they share.

``pipecat`` (``KittSTTService``, extra ``kitt-stt[pipecat]``) and ``livekit`` (``STT``, extra
``kitt-stt[livekit]``) stream a session's audio to a kitt-stt server and turn its frames into
the framework's own turn events, so the server's end-of-turn decision drives the agent's turn.
``link`` holds what both need and neither framework provides in our terms: the options, the
msgpack frames, 20 ms re-framing, the audio kept since the last commit for replay after a
reconnect, and the backoff; ``turns`` follows one seat's turn through the server's frames.
Importing this package imports neither framework. See docs/integrations.md.
"""
