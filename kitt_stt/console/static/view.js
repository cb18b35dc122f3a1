// The live view: one card per seat with the interim line updated in place, the open turn's
// segments and finals as they land, and each ended turn: committed, with its end-of-turn decision
// and timeline, or filtered (not addressed to the assistant). Wake phrases, eager end-of-turn and
// resumed turns are marked where they happened. Frames the page does not know (later protocol
// frames) are shown raw where they belong, so they are visible before the page learns them.
// Server text only ever reaches the page through textContent.

import { timeline } from "./timeline.js";
import { placedWords, wordLine } from "./word_view.js";
import { errorText } from "./words.js";

/** Committed turns kept per seat; older ones leave the page so a long session stays light. */
const MAX_TURNS = 50;
const MAX_LINES = 100;
const FRAME_MS = 20;
/** Send times kept per seat (10 min of 20 ms frames), to place audio times on the page's clock. */
const MAX_CLOCK = 30000;

export class LiveView {
  /**
   * @param {HTMLElement} seats where the seat cards go
   * @param {HTMLElement} other raw frames that name no seat
   * @param {HTMLElement} errors error and notice lines
   * @param {(frame: object) => void} onReady the ``ready`` frame
   */
  constructor(seats, other, errors, onReady) {
    this.seatsEl = seats;
    this.otherEl = other;
    this.errorsEl = errors;
    this.onReady = onReady;
    this.seats = new Map();
    this.handlers = {
      ready: (frame) => this.onReady(frame),
      speech_start: (frame) => this.speechStart(frame),
      interim: (frame) => this.interim(frame),
      final: (frame, at) => this.final(frame, at),
      commit: (frame, at) => this.endTurn(frame, at),
      filtered: (frame, at) => this.endTurn(frame, at),
      wake: (frame) => this.wake(frame),
      turn_eager: (frame) => this.marker(frame.seat, "eager",
        `turn_eager: turn ${frame.turn_id} is probably over (probability ${fixed(frame.probability, 3)}); ` +
        `an agent may start on “${frame.text}”`),
      turn_resumed: (frame) => this.marker(frame.seat, "resumed",
        `turn_resumed: turn ${frame.turn_id} goes on (speech resumed after turn_eager)`),
      error: (frame) => this.error(frame),
      pong: () => {},
    };
  }

  /** A new session: ids and audio clocks start again, so the old seats' cards go. */
  reset() {
    this.seats.clear();
    this.seatsEl.replaceChildren();
  }

  /** Show one server frame; ``at``: when it arrived (performance.now()). */
  handle(frame, at = performance.now()) {
    const known = Object.hasOwn(this.handlers, frame.type) ? this.handlers[frame.type] : null;
    if (known) known(frame, at);
    else this.raw(frame);
  }

  /** The page sent one 20 ms frame on ``seat`` at ``at``. */
  audioSent(seat, at) {
    this.seat(seat).clock.add(at);
  }

  /** Whether ``seat`` has speech whose turn has not ended yet (an open segment, or finals not yet
   * committed or filtered). */
  pending(seat) {
    const state = this.seats.get(seat);
    return state !== undefined && [...state.segments.values()].some((segment) => !segment.empty);
  }

  speechStart(frame) {
    const segment = this.segment(frame.seat, frame.segment_id);
    segment.start = this.seat(frame.seat).clock.wallAt(frame.audio_ms);
    segment.el.querySelector(".text").textContent = "…";
  }

  interim(frame) {
    const state = this.seat(frame.seat);
    state.interimEl.dataset.segment = String(frame.segment_id);
    state.interimEl.textContent = `#${frame.segment_id} ${frame.text}`;
    state.interimEl.hidden = false;
  }

  final(frame, at) {
    const state = this.seat(frame.seat);
    const segment = this.segment(frame.seat, frame.segment_id);
    if (state.interimEl.dataset.segment === String(frame.segment_id)) state.interimEl.hidden = true;
    segment.final = at;
    segment.closed = at - frame.server_latency_ms;
    segment.end = state.clock.wallAt(frame.end_ms);
    segment.empty = frame.text === "";
    if (frame.wake) segment.wake = frame.wake;
    segment.el.classList.add("final");
    const nothing = frame.wake ? "(only the wake phrase)" : "(nothing recognised)";
    const text = segment.el.querySelector(".text");
    text.textContent = frame.text || nothing;
    if (Array.isArray(frame.words) && frame.words.length > 0) {
      // the words stand for the text only where they spell it; where the text stage rewrote the
      // final (ITN: "二十六度" -> "26度") the text stays and the words follow it, as recognised
      const line = wordLine(frame.words);
      if (spelled(frame.words) === frame.text.replace(/\s+/g, "")) {
        text.replaceChildren(line);
      } else {
        line.classList.add("as-recognised");
        line.title = "the words as recognised (the text stage rewrote this final)";
        text.append(" ", line);
      }
      segment.words = placedWords(frame.words, (audioMs) => state.clock.wallAt(audioMs));
    }
    const timing = frame.timing || {};
    const parts = [`final ${fixed(frame.server_latency_ms)} ms after the segment ended`];
    for (const [key, value] of Object.entries(timing)) {
      const unit = key.endsWith("_ms") ? " ms" : "";
      parts.push(`${words(unit ? key.slice(0, -3) : key)} ${fixed(value)}${unit}`);
    }
    parts.push(`end: ${frame.end_reason}`);
    if (frame.lang) parts.push(`lang ${frame.lang}`);
    if (frame.confidence != null) parts.push(`confidence ${fixed(frame.confidence, 3)}`);
    if (frame.wake) parts.push(`wake phrase “${frame.wake.phrase}” left out of the text`);
    segment.el.querySelector(".detail").textContent = parts.join(" · ");
  }

  /** A ``commit`` or a ``filtered``: the turn ends, with its segments and what came during it. */
  endTurn(frame, at) {
    const state = this.seat(frame.seat);
    const committed = frame.type === "commit";
    const decision = frame.metadata?.eot?.decision ?? {};
    const turn = div(committed ? "turn committed" : "turn filtered");
    turn.dataset.turn = String(frame.turn_id);
    const head = div(committed ? "commit" : "filtered-head");
    head.append(span("label", `turn ${frame.turn_id}`), span("text", frame.text),
                span("segments", `segments ${frame.segment_ids.join(", ")}`));
    if (frame.confidence != null) head.append(span("segments", ` · confidence ${fixed(frame.confidence, 3)}`));
    turn.append(head);
    if (committed) {
      turn.append(div("decision", decisionText(decision)));
      if (frame.metadata?.wake) turn.append(div("wake-state", wakeText(frame.metadata.wake)));
    } else {
      turn.append(div("verdict", `filtered: ${FILTERED[frame.reason] ?? frame.reason}`));
    }
    turn.append(...state.pendingEl.querySelectorAll(":scope > .raw, :scope > .mark")); // came during this turn
    const segments = [];
    for (const id of frame.segment_ids) {
      const segment = this.segment(frame.seat, id);
      state.segments.delete(id);
      turn.append(segment.el);
      if (segment.final !== undefined) segments.push({ id, ...segment });
    }
    if (committed && segments.length > 0) {
      const waitMs = decision.wait_ms ?? 0;
      turn.append(timeline({ segments, commit: at, waitMs, reason: decision.reason ?? "?" }));
    }
    state.turnsEl.insertBefore(turn, state.pendingEl.nextSibling);
    dropNoise(state, Math.max(...frame.segment_ids), turn);
    while (state.turnsEl.children.length > MAX_TURNS + 1) state.turnsEl.lastElementChild.remove();
  }

  /** A wake phrase was heard: marked on the segment that showed it (it travels with its turn). */
  wake(frame) {
    const segment = this.segment(frame.seat, frame.segment_id);
    segment.wake = { phrase: frame.phrase, text: frame.text };
    segment.el.append(div("mark wake", `wake phrase “${frame.phrase}” heard as “${frame.text}”`));
  }

  /** A line in the seat's open turn (it moves with the turn when that ends). */
  marker(seat, kind, text) {
    this.seat(seat).pendingEl.append(div(`mark ${kind}`, text));
    trimOpen(this.seat(seat));
  }

  error(frame) {
    this.note(errorText(frame), "error");
  }

  /** A line in the errors list, newest first; ``kind``: "error" or "notice". */
  note(text, kind) {
    this.errorsEl.prepend(div(kind, text));
    trim(this.errorsEl);
  }

  /** Any frame as it came: its type, then its fields (bin shown by size). */
  raw(frame) {
    const line = document.createElement("pre");
    line.className = "raw";
    line.dataset.type = String(frame.type);
    line.textContent = `${frame.type} ${JSON.stringify(frame, printable)}`;
    if (typeof frame.seat === "string") {
      this.seat(frame.seat).pendingEl.append(line);
      trimOpen(this.seat(frame.seat));
    } else {
      this.otherEl.prepend(line);
      trim(this.otherEl);
    }
  }

  seat(name) {
    let state = this.seats.get(name);
    if (state === undefined) {
      const el = document.createElement("section");
      el.className = "seat";
      el.dataset.seat = name;
      const title = document.createElement("h2");
      title.textContent = name;
      const interimEl = div("interim");
      interimEl.hidden = true;
      const turnsEl = div("turns");
      const pendingEl = div("turn open");
      turnsEl.append(pendingEl);
      el.append(title, interimEl, turnsEl);
      const after = [...this.seatsEl.children].find((card) => card.dataset.seat > name);
      this.seatsEl.insertBefore(el, after ?? null);
      state = { el, interimEl, turnsEl, pendingEl, segments: new Map(), clock: new Clock() };
      this.seats.set(name, state);
    }
    return state;
  }

  segment(seat, id) {
    const state = this.seat(seat);
    let segment = state.segments.get(id);
    if (segment === undefined) {
      const el = div("segment");
      el.dataset.segment = String(id);
      el.append(span("label", `#${id}`), span("text", ""), div("detail", ""));
      state.pendingEl.append(el);
      segment = { el, start: null, end: null, empty: false };
      state.segments.set(id, segment);
    }
    return segment;
  }
}

/** What ``filtered.reason`` means. */
const FILTERED = { no_wake: "not addressed to the assistant (no wake phrase)" };

/** Segments that ended with no text before ``lastEnded`` belong to no turn (the server ends none
 * for noise, nor for a turn that was only the wake phrase): they leave the open turn once a later
 * turn ends. Noise goes; a wake phrase alone stays, as a turn of its own below ``ended``. */
function dropNoise(state, lastEnded, ended) {
  for (const [id, segment] of state.segments) {
    if (segment.empty && id < lastEnded) {
      state.segments.delete(id);
      if (segment.wake) {
        const only = div("turn wake-only");
        only.append(div("verdict", "only the wake phrase: no commit; a turn that follows soon counts as addressed"),
                    segment.el);
        state.turnsEl.insertBefore(only, ended.nextSibling);
      } else {
        segment.el.remove();
      }
    }
  }
}

/** Raw lines and markers in the open turn: at most MAX_LINES. */
function trimOpen(state) {
  const lines = state.pendingEl.querySelectorAll(":scope > .raw, :scope > .mark");
  if (lines.length > MAX_LINES) lines[0].remove();
}

/** When each 20 ms of a seat's audio was sent, to put the server's audio times on the page's clock. */
class Clock {
  constructor() {
    this.first = 0; // frame index of sent[0]
    this.sent = [];
  }

  add(at) {
    this.sent.push(at);
    if (this.sent.length > MAX_CLOCK) {
      const drop = this.sent.length - MAX_CLOCK / 2;
      this.sent.splice(0, drop);
      this.first += drop;
    }
  }

  /** When the audio up to ``audioMs`` had been sent; null if the page did not send it or forgot. */
  wallAt(audioMs) {
    const index = Math.ceil(audioMs / FRAME_MS) - 1 - this.first;
    return index >= 0 && index < this.sent.length ? this.sent[index] : null;
  }
}

/** The end-of-turn decision in words: reason, probability against threshold, wait. */
function decisionText(decision) {
  const parts = [`end of turn: ${decision.reason ?? "?"}`];
  if (decision.probability != null) {
    const against = decision.threshold != null
      ? ` ${decision.probability >= decision.threshold ? "≥" : "<"} threshold ${decision.threshold}` : "";
    parts.push(`probability ${fixed(decision.probability, 3)}${against}`);
  } else {
    parts.push("no model probability");
  }
  if (decision.wait_ms != null) parts.push(`waited ${fixed(decision.wait_ms)} ms after the speech ended`);
  if (decision.model_ms != null) parts.push(`model ${fixed(decision.model_ms)} ms`);
  const known = new Set(["reason", "probability", "threshold", "wait_ms", "model_ms"]);
  for (const [key, value] of Object.entries(decision)) {
    if (known.has(key)) continue;
    parts.push(`${words(key)} ${typeof value === "string" ? value : JSON.stringify(value, printable)}`);
  }
  return parts.join(" · ");
}

/** The characters a final's words spell, without spaces. */
function spelled(words) {
  return words.map((word) => word.text).join("").replace(/\s+/g, "");
}

/** ``commit.metadata.wake`` in words. */
function wakeText(wake) {
  if (wake.follow_up) return "follow-up: no wake phrase needed, it began soon after a woken turn";
  if (wake.woken) return `woken by “${wake.phrase}”`;
  return "no wake phrase (committed: wake mode detect)";
}

function printable(_key, value) {
  if (value instanceof Uint8Array) return `<bin ${value.length} bytes>`;
  if (typeof value === "bigint") return value.toString();
  return value;
}

function fixed(value, digits = 1) {
  return typeof value === "number" ? String(Number(value.toFixed(digits))) : String(value);
}

/** A field name as words: ``tail_audio`` -> ``tail audio``. */
function words(key) {
  return key.replace(/_/g, " ");
}

function trim(list) {
  while (list.children.length > MAX_LINES) list.lastElementChild.remove();
}

function div(className, content) {
  const el = document.createElement("div");
  el.className = className;
  if (content !== undefined) el.textContent = content;
  return el;
}

function span(className, content) {
  const el = document.createElement("span");
  el.className = className;
  el.textContent = content;
  return el;
}
