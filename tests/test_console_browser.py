"""The browser console in a real browser: Debian's Chromium, headless, driven by Playwright
(its own browser download does not work here; the system Chromium does, and ``make test``
installs it when missing). Chromium's fake capture device plays a tone-model WAV as the
microphone, so the page's AudioWorklet resamples real 44.1/48 kHz capture to 16 kHz and the tone
model still has to hear the exact text. Each test saves a screenshot under
``.cache/test-artefacts/``. A browser that cannot start fails these tests with the reason: they
are never skipped."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import numpy as np
import pytest
from playwright.sync_api import Browser, Error, Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from kitt_stt.audio.wavfile import write_wav_16k_mono
from tests.helpers import RunningServer, run_server, tone_pcm

ROOT = Path(__file__).resolve().parent.parent
ARTEFACTS = Path(os.environ.get("KITT_STT_TEST_ARTEFACTS", ROOT / ".cache" / "test-artefacts"))
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
#: What these machines need (root, a closed network; docs/console.md). Playwright adds --headless
#: and a fresh, empty --user-data-dir for every launch.
CHROMIUM_FLAGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync",
    "--use-fake-ui-for-media-stream",  # grant the microphone without a prompt
    "--use-fake-device-for-media-stream",  # ...which is a fake capture device
]
#: A name for this machine that is not loopback to the browser: a page there is not a secure context.
REMOTE_NAME = "kitt.test"
TOKEN = "console-test-token"
SPOKEN = "打开车门"  # through the fake microphone
FILE_TEXT = "关车窗"  # through a WAV file


def wav_of(path: Path, text: str, lead_ms: float, tail_ms: float) -> Path:
    write_wav_16k_mono(path, np.frombuffer(tone_pcm(text, lead_ms=lead_ms, tail_ms=tail_ms), dtype="<i2"))
    return path


@pytest.fixture(scope="module")
def console_server(tmp_path_factory: pytest.TempPathFactory, model_cache: Path) -> Iterator[RunningServer]:
    """A tone-model server that wants a token, so the page's ``?token=`` is exercised too."""
    with run_server(tmp_path_factory.mktemp("console"), model_cache, {"server": {"auth_token": TOKEN}}) as running:
        yield running


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Browser]:
    # Chromium loops the capture file: the silence after the speech lets the VAD end the segment
    # and the turn commit before the speech comes round again.
    microphone = wav_of(tmp_path_factory.mktemp("capture") / "microphone.wav", SPOKEN, lead_ms=500, tail_ms=4000)
    with sync_playwright() as playwright:
        try:
            launched = playwright.chromium.launch(
                executable_path=CHROMIUM, args=[*CHROMIUM_FLAGS, f"--use-file-for-fake-audio-capture={microphone}",
                                                f"--host-resolver-rules=MAP {REMOTE_NAME} 127.0.0.1"])
        except Error as exc:
            pytest.fail(f"Chromium ({CHROMIUM}) did not start: {exc}\n`make test` installs Debian's chromium "
                        "(apt-get install chromium); elsewhere set CHROMIUM to a Chromium or Chrome binary")
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser, console_server: RunningServer, request: pytest.FixtureRequest) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1100, "height": 800})
    page = context.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    # the browser logs a refused WebSocket upgrade as an error; the page explains it (tested below)
    page.on("console", lambda message: problems.append(message.text)
            if message.type == "error" and "WebSocket handshake" not in message.text else None)
    page.goto(f"{console_server.http}/console/")
    loaded(page)
    yield page
    ARTEFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=ARTEFACTS / f"console-{request.node.name}-py{sys.version_info[0]}{sys.version_info[1]}.png",
                    full_page=True)
    context.close()
    assert not problems, problems


# The page's Content-Security-Policy forbids evaluating strings, which Playwright's
# wait_for_function does in the page: so these tests wait for selectors, and every test runs the
# page under its real policy (a violation is a console error, which fails the test).


def loaded(page: Page) -> None:
    """The page has its settings and is wired (console.js fills the languages last)."""
    page.wait_for_selector("#language option", state="attached")


def status_is(page: Page, text: str) -> None:
    page.wait_for_selector(f"#status:text-is('{text}')")


def shown(page: Page, selector: str, what: str) -> None:
    """Wait up to 20 s for ``selector``; fail with what the page does show."""
    try:
        page.wait_for_selector(selector, timeout=20_000)
    except PlaywrightTimeout:
        raise AssertionError(f"no {what} in 20 s; the page shows:\n{page.inner_text('body')}") from None


def first_turn(page: Page, seat: str) -> dict[str, Any]:
    """Wait for the seat's first commit; its texts as the page shows them."""
    card = f'.seat[data-seat="{seat}"]'
    shown(page, f'{card} .turn[data-turn="1"] .commit', f"commit on seat {seat}")
    turn = f'{card} .turn[data-turn="1"]'
    return {
        "commit": page.inner_text(f"{turn} .commit .text"),
        "finals": page.locator(f"{turn} .segment.final .text").all_inner_texts(),
        "decision": page.inner_text(f"{turn} .decision"),
        "detail": page.inner_text(f"{turn} .segment.final .detail"),
        "timeline_bars": page.locator(f"{turn} svg.timeline .bar").count(),
    }


def test_microphone_speech_appears_as_interims_final_and_commit(page: Page) -> None:
    # every text the interim line shows, recorded as it changes (it is replaced by the final)
    page.evaluate("""() => {
        window.interimsSeen = [];
        new MutationObserver(() => {
            const line = document.querySelector('.seat[data-seat="driver"] .interim');
            if (line && !line.hidden && line.textContent !== window.interimsSeen.at(-1)) {
                window.interimsSeen.push(line.textContent);
            }
        }).observe(document.getElementById("seats"), { subtree: true, childList: true, characterData: true,
                                                         attributes: true });
    }""")
    page.fill("#token", TOKEN)
    page.fill("#seat", "driver")
    page.click("#mic")
    turn = first_turn(page, "driver")
    assert turn["finals"] == [SPOKEN] and turn["commit"] == SPOKEN
    interims = page.evaluate("window.interimsSeen")
    assert interims and all(text.startswith("#1 ") and SPOKEN.startswith(text[3:]) for text in interims), interims
    assert "end of turn: timeout" in turn["decision"] and "waited" in turn["decision"]  # TEST_CONFIG: no model
    assert "ms after the segment ended" in turn["detail"] and "end: silence" in turn["detail"]
    assert turn["timeline_bars"] == 4  # speech, VAD silence, final, end-of-turn wait
    assert "tone (tone) on cpu" in page.inner_text("#ready")
    assert "resampled to 16 kHz" in page.inner_text("#microphone-state")
    page.click("#mic")  # stop: finalize, the session stays open
    page.wait_for_selector("#mic:has-text('Start microphone')")


def test_a_wav_file_streams_through_the_page(page: Page, tmp_path: Path) -> None:
    page.fill("#token", TOKEN)
    page.fill("#seat", "passenger")
    page.set_input_files("#file", str(wav_of(tmp_path / "close-window.wav", FILE_TEXT, lead_ms=300, tail_ms=300)))
    page.click("#file-start")
    turn = first_turn(page, "passenger")
    assert turn["finals"] == [FILE_TEXT] and turn["commit"] == FILE_TEXT
    # after the file, silence flows until the turn is committed; then the source stops by itself
    page.wait_for_selector("#file-start:has-text('Stream file')", timeout=10_000)
    assert page.locator('.seat[data-seat="driver"]').count() == 0


def test_a_wrong_token_is_explained(page: Page) -> None:
    page.fill("#token", "not-the-token")
    page.click("#connect")
    page.wait_for_selector(".errors .error")
    assert "requires a token" in page.inner_text(".errors")
    assert page.inner_text("#status") == "disconnected"


def test_a_refused_setting_is_explained(page: Page) -> None:
    page.fill("#token", TOKEN)
    page.click("#connect")
    status_is(page, "connected")
    page.fill("#hotwords", "ratio:high")  # `high` is no boost: the server answers bad_field
    page.dispatch_event("#hotwords", "change")
    page.wait_for_selector(".errors .error")
    assert page.inner_text(".errors").startswith("The server refused a setting or a field: ")
    assert "ratio:high" in page.inner_text(".errors")
    assert page.inner_text("#status") == "connected"  # not fatal


def test_audio_on_a_plain_http_remote_page_says_it_needs_https(browser: Browser,
                                                               console_server: RunningServer) -> None:
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"http://{REMOTE_NAME}:{console_server.port}/console/")
    loaded(page)
    assert page.evaluate("window.isSecureContext") is False
    page.fill("#token", TOKEN)
    page.click("#mic")
    page.wait_for_selector(".errors .error")
    assert "Cannot start the microphone: audio needs a secure page" in page.inner_text(".errors")
    assert page.locator("#mic").inner_text() == "Start microphone"
    context.close()


def receive(page: Page, frame: dict[str, Any]) -> None:
    """Hand the page one server message, msgpack-encoded, as its socket would."""
    page.evaluate("bytes => kittConsole.receive(new Uint8Array(bytes))", list(msgpack.packb(frame)))


def final_frame(segment_id: int, text: str) -> dict[str, Any]:
    return {"type": "final", "seat": "driver", "segment_id": segment_id, "text": text, "start_ms": 0, "end_ms": 600,
            "lang": "zh", "emotion": None, "event": None, "server_latency_ms": 3.0, "timing": {"decode_ms": 2.0},
            "end_reason": "silence"}


def test_frames_the_page_does_not_know_are_shown_raw(page: Page) -> None:
    receive(page, {"type": "speech_start", "seat": "driver", "segment_id": 1, "audio_ms": 0})
    receive(page, {"type": "speaker_change", "seat": "driver", "segment_id": 1, "speaker": "hey kitt",
                   "audio_ms": 900, "audio": b"\x00\x01\x02"})
    receive(page, final_frame(1, "打开"))
    receive(page, {"type": "fleet_notice", "message": "no seat here"})
    unknown = page.locator('.seat[data-seat="driver"] pre.raw[data-type="speaker_change"]')
    assert unknown.count() == 1
    assert '"speaker":"hey kitt"' in unknown.inner_text() and "<bin 3 bytes>" in unknown.inner_text()
    assert page.locator("pre.raw").count() == 2  # speech_start and final are rendered, not dumped
    assert page.locator('#other pre.raw[data-type="fleet_notice"]').count() == 1
    assert page.inner_text('.seat[data-seat="driver"] .segment.final .text') == "打开"


def test_a_commit_takes_its_segments_and_its_raw_frames_and_noise_leaves(page: Page) -> None:
    for segment_id, text in ((1, ""), (2, "打开"), (3, "车门")):
        receive(page, {"type": "speech_start", "seat": "driver", "segment_id": segment_id, "audio_ms": 0})
        receive(page, final_frame(segment_id, text))
    receive(page, {"type": "turn_eager", "seat": "driver", "turn_id": 1, "text": "打开", "probability": 0.7})
    receive(page, {"type": "late_frame", "seat": "driver", "turn_id": 1})
    assert page.locator('.turn.open .segment').count() == 3  # noise shown until a later turn commits
    receive(page, {"type": "commit", "seat": "driver", "turn_id": 1, "text": "打开", "segment_ids": [2],
                   "metadata": {"eot": {"decision": {"reason": "model", "probability": 0.93, "threshold": 0.9,
                                                     "wait_ms": 120.0, "model_ms": 40.0, "text_ending": "open"}}}})
    turn = page.locator('.turn[data-turn="1"]')
    assert turn.locator(".segment").all_inner_texts() == [page.locator('.segment[data-segment="2"]').inner_text()]
    assert turn.locator(".mark.eager").inner_text() == (
        "turn_eager: turn 1 is probably over (probability 0.7); an agent may start on “打开”")
    assert turn.locator('pre.raw[data-type="late_frame"]').count() == 1  # what came during the turn, with it
    assert turn.locator("svg.timeline").count() == 1
    assert turn.locator(".decision").inner_text() == (
        "end of turn: model · probability 0.93 ≥ threshold 0.9 · waited 120 ms after the speech ended · "
        "model 40 ms · text ending open")
    # segment 1 (no text) left with the commit; segment 3 waits for its own turn
    assert page.locator(".turn.open .segment").all_inner_texts() == [
        page.locator('.segment[data-segment="3"]').inner_text()]


def test_wake_filtered_eager_and_resumed_are_drawn(page: Page) -> None:
    """The 0.2 frames (docs/protocol.md): ``filtered`` ends its turn as a commit does, ``wake`` marks
    its segment, ``turn_eager`` / ``turn_resumed`` mark their turn; none is shown raw."""
    def say(frame: dict[str, Any]) -> None:
        receive(page, {"seat": "driver", **frame})

    say({"type": "speech_start", "segment_id": 1, "audio_ms": 0})
    say({"type": "wake", "segment_id": 1, "phrase": "你好小凯", "text": "你好小开", "audio_ms": 900})
    say({**final_frame(1, "打开车门"), "wake": {"phrase": "你好小凯", "text": "你好小开"}})
    say({"type": "turn_eager", "turn_id": 1, "text": "打开车门", "probability": 0.71})
    say({"type": "turn_resumed", "turn_id": 1})
    say({"type": "speech_start", "segment_id": 2, "audio_ms": 2000})
    say(final_frame(2, "和车窗"))
    say({"type": "commit", "turn_id": 1, "text": "打开车门和车窗", "segment_ids": [1, 2],
         "metadata": {"eot": {"decision": {"reason": "model", "probability": 0.95, "threshold": 0.9}},
                      "wake": {"woken": True, "phrase": "你好小凯", "follow_up": False}}})
    for segment_id, text in ((3, "我们先去吃饭吧"), (4, "")):
        say({"type": "speech_start", "segment_id": segment_id, "audio_ms": 9000})
        say({**final_frame(segment_id, text), "wake": None})
    assert page.evaluate("kittConsole.pending('driver')") is True
    say({"type": "filtered", "turn_id": 2, "segment_ids": [3], "text": "我们先去吃饭吧", "reason": "no_wake"})
    # a turn that was only the wake phrase: no commit, no filtered; it stays, as such
    say({"type": "speech_start", "segment_id": 5, "audio_ms": 20000})
    say({"type": "wake", "segment_id": 5, "phrase": "你好小凯", "text": "你好小凯", "audio_ms": 20900})
    say({**final_frame(5, ""), "wake": {"phrase": "你好小凯", "text": "你好小凯"}})
    say({"type": "speech_start", "segment_id": 6, "audio_ms": 22000})
    say(final_frame(6, "关窗"))
    assert page.evaluate("kittConsole.pending('driver')") is True
    say({"type": "commit", "turn_id": 3, "text": "关窗", "segment_ids": [6],
         "metadata": {"eot": {"decision": {"reason": "timeout"}},
                      "wake": {"woken": True, "phrase": "你好小凯", "follow_up": True}}})
    assert page.evaluate("kittConsole.pending('driver')") is False

    card = page.locator('.seat[data-seat="driver"]')
    assert card.locator("pre.raw").count() == 0
    woken = card.locator('.turn.committed[data-turn="1"]')
    assert woken.locator(".commit .text").inner_text() == "打开车门和车窗"
    assert woken.locator(".wake-state").inner_text() == "woken by “你好小凯”"
    first = woken.locator('.segment[data-segment="1"]')
    assert first.locator(".mark.wake").inner_text() == "wake phrase “你好小凯” heard as “你好小开”"
    assert "wake phrase “你好小凯” left out of the text" in first.locator(".detail").inner_text()
    assert woken.locator(".mark").all_inner_texts()[:2] == [
        "turn_eager: turn 1 is probably over (probability 0.71); an agent may start on “打开车门”",
        "turn_resumed: turn 1 goes on (speech resumed after turn_eager)"]
    assert woken.locator("svg.timeline").count() == 1
    filtered = card.locator('.turn.filtered[data-turn="2"]')
    assert filtered.locator(".filtered-head .text").inner_text() == "我们先去吃饭吧"
    assert filtered.locator(".verdict").inner_text() == "filtered: not addressed to the assistant (no wake phrase)"
    assert filtered.locator(".segment").count() == 1 and filtered.locator(".commit, .decision").count() == 0
    assert card.locator('.segment[data-segment="4"]').count() == 0  # noise left with the filtered turn
    only = card.locator(".turn.wake-only")
    assert only.locator('.segment[data-segment="5"] .text').inner_text() == "(only the wake phrase)"
    assert only.locator(".mark.wake").count() == 1 and "only the wake phrase" in only.locator(".verdict").inner_text()
    follow_up = card.locator('.turn.committed[data-turn="3"]')
    assert follow_up.locator(".wake-state").inner_text() == (
        "follow-up: no wake phrase needed, it began soon after a woken turn")
    # newest first: turn 3, the wake phrase alone before it, the filtered turn 2, turn 1
    order = card.locator(".turns > .turn:not(.open)").evaluate_all(
        "turns => turns.map((t) => t.dataset.turn ?? t.className)")
    assert order == ["3", "turn wake-only", "2", "1"]


MARKUP = '<img src=x onerror="window.pwned=1"><b>bold</b>'


def test_server_text_with_markup_is_shown_as_text(page: Page) -> None:
    """Server text reaches the page only as text: markup in any field is shown, never parsed."""
    dialogs: list[str] = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    seat = "<i>seat</i>"

    def say(frame: dict[str, Any]) -> None:
        receive(page, {"seat": seat, **frame})

    say({"type": "speech_start", "segment_id": 1, "audio_ms": 0})
    say({"type": "interim", "segment_id": 1, "text": MARKUP, "audio_ms": 500})
    say({"type": "wake", "segment_id": 1, "phrase": MARKUP, "text": MARKUP, "audio_ms": 500})
    say({**final_frame(1, MARKUP), "seat": seat, "lang": MARKUP, "end_reason": MARKUP,
         "wake": {"phrase": MARKUP, "text": MARKUP}})
    say({"type": "turn_eager", "turn_id": 1, "text": MARKUP, "probability": 0.6})
    say({"type": "commit", "turn_id": 1, "text": MARKUP, "segment_ids": [1],
         "metadata": {"eot": {"decision": {"reason": MARKUP, MARKUP: MARKUP}}}})
    say({"type": "speech_start", "segment_id": 2, "audio_ms": 0})
    say(final_frame(2, MARKUP) | {"seat": seat})
    say({"type": "filtered", "turn_id": 2, "segment_ids": [2], "text": MARKUP, "reason": MARKUP})
    say({"type": MARKUP, "text": MARKUP})
    receive(page, {"type": "error", "code": MARKUP, "message": MARKUP, "fatal": False, "seat": None})
    page.wait_for_timeout(200)  # an image that had been made would have fired its onerror by now
    assert page.locator("img, b, i").count() == 0
    assert page.evaluate("window.pwned") is None and dialogs == []
    card = page.locator(".seat").first
    assert card.locator("h2").inner_text() == seat
    assert card.locator(".commit .text").inner_text() == MARKUP
    assert card.locator(".filtered-head .text").inner_text() == MARKUP
    assert card.locator(".segment .text").all_inner_texts() == [MARKUP, MARKUP]
    assert MARKUP in card.locator(".decision").inner_text() and MARKUP in card.locator(".verdict").inner_text()
    assert MARKUP in card.locator(".mark.wake").inner_text() and MARKUP in card.locator(".mark.eager").inner_text()
    assert MARKUP in card.locator("pre.raw").inner_text() and MARKUP in page.inner_text(".errors")


def test_the_page_sends_wake_and_eager_only_when_set(page: Page) -> None:
    sent: list[dict[str, Any]] = []
    page.on("websocket", lambda socket: socket.on(
        "framesent", lambda payload: sent.append(msgpack.unpackb(payload)) if isinstance(payload, bytes) else None))
    page.fill("#token", TOKEN)
    page.click("#connect")
    status_is(page, "connected")
    [start] = [frame for frame in sent if frame["type"] == "start"]
    assert "wake" not in start and "eager" not in start and "hotwords" not in start, start
    assert page.inner_text("#wake-mode option:first-child") == "mode: server default (off)"
    page.fill("#wake-phrases", "ABC， hey kitt ,")
    page.press("#wake-phrases", "Tab")  # leaving the field: "change"
    page.select_option("#wake-mode", "required")
    page.check("#eager")
    page.wait_for_timeout(300)
    configures = [frame for frame in sent if frame["type"] == "configure"]
    assert configures == [{"type": "configure", "wake": {"phrases": ["ABC", "hey kitt"]}},
                          {"type": "configure", "wake": {"phrases": ["ABC", "hey kitt"], "mode": "required"}},
                          {"type": "configure", "eager": True}]
    assert page.inner_text(".errors") == ""  # the server took them
    page.click("#connect")  # disconnect; the next session starts with them
    status_is(page, "not connected")
    page.click("#connect")
    status_is(page, "connected")
    start = [frame for frame in sent if frame["type"] == "start"][-1]
    assert start["wake"] == {"phrases": ["ABC", "hey kitt"], "mode": "required"} and start["eager"] is True


def stream_file(page: Page, path: Path) -> None:
    page.set_input_files("#file", str(path))
    page.click("#file-start")
    page.wait_for_selector("#file-start:has-text('Stop file')")


def test_wake_required_on_the_page_filters_and_commits(page: Page, tmp_path: Path) -> None:
    """Wake phrase "ABC", mode required, set on the page; the tone model hears exactly: "打开车门"
    alone is filtered (and the file's source stops at once, not after the 15 s cap), "ABC打开车门"
    is committed as "打开车门" with the wake phrase marked."""
    page.fill("#token", TOKEN)
    page.fill("#seat", "passenger")
    page.fill("#wake-phrases", "ABC")
    page.select_option("#wake-mode", "required")
    card = '.seat[data-seat="passenger"]'
    stream_file(page, wav_of(tmp_path / "not-addressed.wav", SPOKEN, lead_ms=300, tail_ms=300))
    shown(page, f'{card} .turn.filtered[data-turn="1"]', "filtered turn")
    filtered = f'{card} .turn.filtered[data-turn="1"]'
    assert page.inner_text(f"{filtered} .filtered-head .text") == SPOKEN
    assert page.inner_text(f"{filtered} .verdict") == "filtered: not addressed to the assistant (no wake phrase)"
    assert page.locator(f"{filtered} .segment.final .text").all_inner_texts() == [SPOKEN]
    # the turn is over: the file's source stops by itself (1 s after the file at least, never 15 s)
    page.wait_for_selector("#file-start:has-text('Stream file')", timeout=3_000)

    stream_file(page, wav_of(tmp_path / "addressed.wav", "ABC" + SPOKEN, lead_ms=300, tail_ms=300))
    shown(page, f'{card} .turn.committed[data-turn="2"]', "commit")
    committed = f'{card} .turn.committed[data-turn="2"]'
    assert page.inner_text(f"{committed} .commit .text") == SPOKEN
    assert page.locator(f"{committed} .segment.final .text").all_inner_texts() == [SPOKEN]
    assert page.inner_text(f"{committed} .mark.wake") == "wake phrase “ABC” heard as “ABC”"
    assert page.inner_text(f"{committed} .wake-state") == "woken by “ABC”"
    assert "wake phrase “ABC” left out of the text" in page.inner_text(f"{committed} .segment.final .detail")
    page.wait_for_selector("#file-start:has-text('Stream file')", timeout=3_000)
    assert page.locator(f"{card} pre.raw").count() == 0


def test_the_page_runs_under_its_content_security_policy(browser: Browser, console_server: RunningServer) -> None:
    """The policy is in force in the browser: inline script and a WebSocket to another host are
    refused (the page's own WebSocket, modules, worklet and library load: the tests above)."""
    context = browser.new_context()
    page = context.new_page()
    page.goto(f"{console_server.http}/console/")
    loaded(page)
    refused = page.evaluate("""async (elsewhere) => {
        const refused = [];
        document.addEventListener("securitypolicyviolation", (event) => refused.push(event.effectiveDirective));
        const script = document.createElement("script");
        script.textContent = "window.inlineRan = true";
        document.body.append(script);
        try { new WebSocket(elsewhere); } catch (error) { refused.push("connect-src (thrown)"); }
        await new Promise((resolve) => setTimeout(resolve, 200));
        return { refused, inlineRan: window.inlineRan === true };
    }""", f"ws://{REMOTE_NAME}:{console_server.port}/stt/sensevoice")
    assert refused["inlineRan"] is False
    assert "script-src-elem" in refused["refused"] and any(d.startswith("connect-src") for d in refused["refused"]), \
        refused
    context.close()


def test_a_missing_msgpack_library_is_said_on_the_page(browser: Browser, console_server: RunningServer) -> None:
    context = browser.new_context()
    page = context.new_page()
    page.route("**/console/vendor/msgpack.min.js", lambda route: route.fulfill(status=404, body="missing"))
    page.goto(f"{console_server.http}/console/")
    page.wait_for_selector("#missing", state="visible")
    assert "make console" in page.inner_text("#missing")
    assert "npm ci --prefix kitt_stt/console --ignore-scripts" in page.inner_text("#missing")
    assert page.is_disabled("#mic") and page.is_disabled("#connect")
    context.close()


def test_the_resampler_keeps_speech_and_removes_what_16khz_cannot_carry(page: Page) -> None:
    """The worklet's resampler, imported into the page: 1 kHz passes unchanged from 48 and
    44.1 kHz, 9 kHz (which would fold back to 7 kHz) is gone, 16 kHz passes through as is."""
    measured = page.evaluate("""async () => {
        const { Resampler } = await import(new URL("static/resampler.js", location.href));
        const run = (inRate, hz) => {
            const resampler = new Resampler(inRate, 16000);
            const out = [];
            for (let start = 0; start < inRate; start += 128) {
                const block = new Float32Array(128).map((_, i) => Math.sin(2 * Math.PI * hz * (start + i) / inRate));
                out.push(...resampler.push(block));
            }
            let error = 0, peak = 0;
            for (let i = 4000; i < 12000; i++) {
                error = Math.max(error, Math.abs(out[i] - Math.sin(2 * Math.PI * hz * i / 16000)));
                peak = Math.max(peak, Math.abs(out[i]));
            }
            return { count: out.length, error, peak };
        };
        return { r48: run(48000, 1000), r44: run(44100, 1000), stop48: run(48000, 9000),
                 stop44: run(44100, 9000), same: run(16000, 1000) };
    }""")
    for key in ("r48", "r44"):
        assert abs(measured[key]["count"] - 16000) < 60, measured
        assert measured[key]["error"] < 0.01, measured
    assert measured["stop48"]["peak"] < 1e-3 and measured["stop44"]["peak"] < 1e-3, measured
    assert measured["same"]["error"] < 1e-6, measured


def test_the_language_menu_says_what_auto_may_detect(page: Page) -> None:
    assert page.inner_text("#language option[value='auto']") == "auto (zh, en)"
    assert page.is_hidden("#fonts")  # this machine has a CJK and a Latin font (fonts-wqy-microhei)


def test_a_script_without_a_font_is_named_instead_of_boxes(browser: Browser, console_server: RunningServer) -> None:
    """A machine without the fonts: the page names the script and the fonts to install."""
    context = browser.new_context()
    # every text draws as the same "no glyph" box, as on a machine without fonts for it
    context.add_init_script("CanvasRenderingContext2D.prototype.fillText = function () {};")
    page = context.new_page()
    page.goto(f"{console_server.http}/console/")
    page.wait_for_selector("#fonts", state="visible")
    text = page.inner_text("#fonts")
    assert "covers CJK (install Noto Sans CJK SC, WenQuanYi Micro Hei" in text and "fonts-noto-cjk" in text, text
    context.close()
