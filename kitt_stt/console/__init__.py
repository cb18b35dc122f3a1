"""The browser console: a page, served by the service itself, that streams a microphone or a WAV
file to the WebSocket endpoint and shows interims, finals, commits and their timings live.

What lives here: ``routes.py`` mounts the page under ``/console/`` when ``server.console`` is on;
``static/`` holds the page (HTML, CSS, ES modules, the AudioWorklet that resamples to 16 kHz),
written without a build step; ``package.json`` and ``package-lock.json`` pin the one third-party
browser library, the msgpack codec, which ``make`` installs from the npm registry into the
git-ignored ``node_modules/`` beside them (``npm ci``: exact version, integrity hash checked).
Nothing the page loads comes from anywhere but this service (docs/console.md).
"""
