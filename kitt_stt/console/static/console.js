// The console page: settings, the session, the audio sources and the live view wired together.
// Each source streams to the seat named when it started, so the microphone and a WAV file can
// feed two seats of one session at once.

import { startFile, startMicrophone } from "./capture.js";
import { decode, Session } from "./session.js";
import { LiveView } from "./view.js";
import { closeText } from "./words.js";

/** After a WAV file ends, silence keeps flowing until its turn ends (committed or filtered), at most
 * this long. */
const FILE_TAIL_MAX_MS = 15000;
/** ...and at least this long, so the VAD sees the silence that ends the last segment. */
const FILE_TAIL_MIN_MS = 1000;

/** Each source's button and its two labels. */
const CONTROLS = {
  microphone: { button: "mic", idle: "Start microphone", busy: "Stop microphone" },
  file: { button: "file-start", idle: "Stream file", busy: "Stop file" },
};

const $ = (id) => document.getElementById(id);
const settings = await (await fetch("settings.json")).json();
const view = new LiveView($("seats"), $("other"), $("errors"), showReady);
let session = null;
let connecting = null;
const sources = { microphone: null, file: null };
const seq = new Map();

window.kittConsole = {
  /** One server message, as the socket would deliver it (for tests and for trying new frames). */
  receive: (bytes) => view.handle(decode(bytes)),
  /** Whether the seat has speech whose turn has not ended (what a WAV source waits for). */
  pending: (seat) => view.pending(seat),
};

setUp();

/** "auto" says what it may detect (asr.auto_languages): detection never leaves that set. */
function languageLabel(language) {
  const allowed = (settings.auto_languages || []).filter((code) => settings.languages.includes(code));
  return language === "auto" && allowed.length > 0 ? `auto (${allowed.join(", ")})` : language;
}

/** Text in a script no installed font covers shows as boxes; say which font is missing instead.
 * A script is missing when its sample draws exactly like an unassigned code point (the "no glyph"
 * box); where the browser draws such boxes with the code inside, two of them differ and nothing
 * can be told, so nothing is said. */
function reportMissingFonts() {
  const stack = getComputedStyle(document.body).fontFamily;
  const wanted = { CJK: ["打", "Noto Sans CJK SC, WenQuanYi Micro Hei or Source Han Sans SC"],
                   Latin: ["A", "Noto Sans, DejaVu Sans or Liberation Sans"] };
  const canvas = document.createElement("canvas");
  canvas.width = canvas.height = 32;
  const context = canvas.getContext("2d", { willReadFrequently: true });
  const drawn = (text) => {
    context.clearRect(0, 0, 32, 32);
    context.font = `24px ${stack}`;
    context.fillText(text, 2, 26);
    return context.getImageData(0, 0, 32, 32).data.join(",");
  };
  const box = drawn("\u0378");  // unassigned: no font has a glyph for it
  if (box !== drawn("\u0379")) return;
  const missing = Object.entries(wanted).filter(([, [sample]]) => drawn(sample) === box)
    .map(([script, [, fonts]]) => `${script} (install ${fonts})`);
  $("fonts").hidden = missing.length === 0;
  $("fonts").textContent = missing.length === 0 ? "" : `No font on this machine covers ${missing.join("; ")}: ` +
    "that text shows as boxes. On Debian: apt-get install fonts-noto-cjk (or fonts-wqy-microhei).";
}

function setUp() {
  for (const language of settings.languages) $("language").append(new Option(languageLabel(language), language));
  $("language").value = settings.language;
  reportMissingFonts();
  $("interim").checked = settings.interim;
  const wake = settings.wake;
  $("wake-mode").options[0].textContent = `mode: server default (${wake.mode})`;
  $("wake-phrases").placeholder = wake.phrases.length > 0
    ? `server default: ${wake.phrases.join(", ")}` : "e.g. 你好小凯, hey kitt";
  $("token").placeholder = settings.auth_required
    ? "this server requires one (sent as ?token= in the WebSocket URL)" : "not required by this server";
  for (const id of ["language", "interim", "eager", "hotwords", "words"]) {
    $(id).addEventListener("change", () => reconfigure(id));
  }
  for (const id of ["wake-phrases", "wake-mode"]) $(id).addEventListener("change", () => reconfigure("wake"));
  $("connect").addEventListener("click", () => (session ? disconnect() : connect().catch(() => {})));
  $("mic").addEventListener("click", () => toggle("microphone"));
  $("file-start").addEventListener("click", () => toggle("file"));
  if (!window.MessagePack) {
    $("missing").hidden = false;
    for (const button of document.querySelectorAll("button")) button.disabled = true;
    status("cannot work: the msgpack library is missing", "bad");
  }
}

/** The value of one session setting, as ``start`` and ``configure`` carry it. */
function setting(id) {
  if (id === "hotwords") return $("hotwords").value.split(",").map((word) => word.trim()).filter(Boolean);
  if (id === "wake") return wakeSetting();
  return $(id).type === "checkbox" ? $(id).checked : $(id).value;
}

/** ``wake`` with the phrases and the mode the page sets; null when it sets neither (the server's
 * ``wake:`` configuration applies). Phrases are separated by commas, ASCII or fullwidth. */
function wakeSetting() {
  const wake = {};
  const phrases = $("wake-phrases").value.split(/[,，]/).map((phrase) => phrase.trim()).filter(Boolean);
  if (phrases.length > 0) wake.phrases = phrases;
  if ($("wake-mode").value) wake.mode = $("wake-mode").value;
  return Object.keys(wake).length > 0 ? wake : null;
}

/** Open a session (once; concurrent callers share it). */
function connect() {
  if (session?.isOpen) return Promise.resolve();
  if (connecting) return connecting;
  // hotwords, eager, words and wake only when set: otherwise the server's defaults apply
  // (asr.hotwords, turn.eager_events, asr.words, wake)
  const start = { type: "start", language: setting("language"), interim: setting("interim"),
                  client: "kitt-stt console" };
  if (setting("hotwords").length > 0) start.hotwords = setting("hotwords");
  if (setting("eager")) start.eager = true;
  if (setting("words")) start.words = true;
  if (setting("wake")) start.wake = setting("wake");
  const opening = new Session(socketUrl(), { onFrame: (frame, at) => view.handle(frame, at), onClose: closed });
  view.reset();
  seq.clear();
  status("connecting…");
  connecting = opening.open(start).then(
    () => {
      session = opening;
      connecting = null;
      status("connected", "good");
      $("connect").textContent = "Disconnect";
    },
    (error) => {
      connecting = null;
      throw error;
    },
  );
  return connecting;
}

function socketUrl() {
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const token = $("token").value.trim();
  return `${scheme}//${location.host}${settings.path}${token ? `?token=${encodeURIComponent(token)}` : ""}`;
}

function disconnect() {
  stopSource("microphone");
  stopSource("file");
  session?.close();
  status("closing…");
}

function closed(event, opened) {
  session = null;
  stopSource("microphone", false);
  stopSource("file", false);
  $("connect").textContent = "Connect";
  const normal = event.code === 1000;
  status(normal ? "not connected" : "disconnected", normal ? "" : "bad");
  view.note(closeText(event, opened, settings.auth_required), normal ? "notice" : "error");
}

/** A setting changed during a session: send that one (it applies from the next segment; wake from
 * the next turn). */
function reconfigure(id) {
  const value = setting(id);
  if (session?.isOpen && value !== null) session.send({ type: "configure", [id]: value });
}

async function toggle(kind) {
  if (sources[kind]) {
    stopSource(kind);
    return;
  }
  const seat = $("seat").value.trim() || "default";
  const button = $(CONTROLS[kind].button);
  button.disabled = true;
  try {
    if (kind === "file" && !$("file").files[0]) throw new Error("choose a WAV file first");
    const other = sources[kind === "microphone" ? "file" : "microphone"];
    if (other?.seat === seat) throw new Error(`seat ${seat} is already streaming; name another seat`);
    await connect();
    const onFrame = (pcm, peak) => sendAudio(kind, seat, pcm, peak);
    const capture = kind === "microphone"
      ? await startMicrophone(onFrame)
      : await startFile($("file").files[0], onFrame, () => fileEnded(seat));
    sources[kind] = { capture, seat };
    button.textContent = CONTROLS[kind].busy;
    $(`${kind}-state`).textContent = `→ seat ${seat} (${capture.sampleRate} Hz resampled to 16 kHz)`;
  } catch (error) {
    // a session that could not open has said why already (closed())
    if (error instanceof Error) view.note(`Cannot start the ${kind}: ${error.message}`, "error");
  } finally {
    button.disabled = false;
  }
}

/** Stop a source; ``flush``: ask the service to finish the seat's turn now (``finalize``). */
function stopSource(kind, flush = true) {
  const source = sources[kind];
  if (!source) return;
  sources[kind] = null;
  source.capture.stop();
  if (flush) session?.send({ type: "finalize", seat: source.seat });
  $(CONTROLS[kind].button).textContent = CONTROLS[kind].idle;
  $(`${kind}-state`).textContent = "";
  $(`${kind}-level`).value = 0;
}

/** The file is over: keep sending silence until the service ends its turn (a commit or a filtered;
 * or a cap), then stop. */
function fileEnded(seat) {
  const source = sources.file;
  const ended = performance.now();
  $("file-state").textContent = `→ seat ${seat}: file ended, waiting for the end of the turn`;
  const check = setInterval(() => {
    const waited = performance.now() - ended;
    if (sources.file !== source) {
      clearInterval(check);
    } else if ((waited >= FILE_TAIL_MIN_MS && !view.pending(seat)) || waited >= FILE_TAIL_MAX_MS) {
      clearInterval(check);
      stopSource("file");
    }
  }, 100);
}

function sendAudio(kind, seat, pcm, peak) {
  if (!session?.isOpen) return;
  const next = seq.get(seat) ?? 0;
  seq.set(seat, next + 1);
  session.send({ type: "audio", seat, seq: next, pcm: new Uint8Array(pcm) });
  view.audioSent(seat, performance.now());
  $(`${kind}-level`).value = peak;
}

function showReady(frame) {
  const { model = {}, limits = {} } = frame;
  const hotwords = model.hotwords ? "applied" : "accepted but not applied by this engine";
  $("ready").replaceChildren(
    fact("model", `${model.name} (${model.kind}) on ${model.provider}; hotwords ${hotwords}; ` +
                  (model.words ? "times words" : "no word timings")),
    fact("limits", `${limits.sample_rate} Hz, ${limits.frame_ms} ms frames (at most ${limits.max_frame_ms} ms), ` +
                   `${limits.max_seats} seats, segments up to ${limits.max_segment_ms} ms, ` +
                   `audio at up to ${limits.realtime_factor}× real time (burst ${limits.burst_ms} ms)`),
    fact("session", `${frame.session_id} (protocol ${frame.protocol})`),
  );
}

function fact(name, value) {
  const row = document.createElement("div");
  const label = document.createElement("dt");
  const text = document.createElement("dd");
  label.textContent = name;
  text.textContent = value;
  row.append(label, text);
  return row;
}

function status(text, kind = "") {
  $("status").textContent = text;
  $("status").className = `status ${kind}`;
}
