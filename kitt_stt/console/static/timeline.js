// A turn's timeline as SVG: per segment, speech (first to last voiced audio sent), the silence the
// VAD waited for, and the final's server latency; for the turn, the end-of-turn wait and the
// commit. Times are this page's clock: audio times from the server are placed where the page sent
// that audio, so the picture shows what a user waited for, and where.

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 640;
const LABEL = 44; // the row-name column
const RIGHT = 44; // room for the final's figure beside its bar
const ROW = 20;
const AXIS = 22;

/**
 * @param {{segments: {id: number, start: number?, end: number?, closed: number, final: number,
 *          words: {text: string, start: number, end: number, confidence: number}[]?}[],
 *          commit: number, waitMs: number, reason: string}} turn times in ms (performance.now);
 *          start/end are null when the page did not send that segment's audio itself
 * @returns {SVGSVGElement}
 */
export function timeline(turn) {
  const origin = Math.min(...turn.segments.map((s) => s.start ?? s.closed), turn.commit - turn.waitMs);
  const span = Math.max(turn.commit - origin, 1);
  const rows = turn.segments.length + 1;
  const height = rows * ROW + AXIS;
  const svg = element("svg", { class: "timeline", width: WIDTH, height, viewBox: `0 0 ${WIDTH} ${height}` });
  svg.append(element("title", {}, `turn timeline: ${ms(span)} from the first speech to the commit`));
  const draw = new Drawing(svg, origin, (WIDTH - LABEL - RIGHT) / span);
  turn.segments.forEach((segment, row) => {
    const y = row * ROW;
    draw.label(y, `#${segment.id}`);
    if (segment.start != null && segment.end != null) {
      draw.bar(segment.start, segment.end, y, "speech", "speech");
      draw.bar(segment.end, segment.closed, y, "vad", "silence until the VAD ended the segment");
      draw.marker(segment.start, y, "speech start");
      draw.marker(segment.end, y, "segment end (last voiced audio)");
    }
    for (const word of segment.words ?? []) draw.word(word, y);
    draw.bar(segment.closed, segment.final, y, "final", "final (server latency)");
    draw.marker(segment.final, y, "final");
  });
  const y = turn.segments.length * ROW;
  draw.label(y, "turn");
  draw.bar(turn.commit - turn.waitMs, turn.commit, y, "eot", `end-of-turn wait, ${turn.reason}`);
  draw.marker(turn.commit, y, "commit");
  draw.axis(span, rows * ROW);
  return svg;
}

class Drawing {
  constructor(svg, origin, scale) {
    this.svg = svg;
    this.origin = origin;
    this.scale = scale;
  }

  x(t) {
    return LABEL + (t - this.origin) * this.scale;
  }

  label(y, content) {
    this.svg.append(element("text", { x: 4, y: y + 14, class: "row" }, content));
  }

  /** A bar from t0 to t1, titled with its duration; labelled inside when it is wide enough. */
  bar(t0, t1, y, kind, title) {
    const x0 = this.x(t0);
    const width = Math.max(this.x(t1) - x0, 1.5);
    const group = element("g", { class: `bar ${kind}` });
    group.append(element("rect", { x: x0, y: y + 3, width, height: ROW - 6, rx: 2 }));
    group.append(element("title", {}, `${title}: ${ms(t1 - t0)}`));
    const caption = ms(t1 - t0);
    if (width > 7 * caption.length + 6) {
      group.append(element("text", { x: x0 + width / 2, y: y + 14, class: "in-bar" }, caption));
    } else if (kind === "final" || kind === "eot") {
      // short bars at the end of a row: the figure goes beside them
      const left = kind === "eot";
      group.append(element("text", { x: left ? x0 - 4 : x0 + width + 4, y: y + 14,
                                     class: left ? "beside left" : "beside" }, caption));
    }
    this.svg.append(group);
  }

  /** A word (``final.words``): a strip under the row, as opaque as the word is sure. */
  word(word, y) {
    const x0 = this.x(word.start);
    const strip = element("rect", { class: "word", x: x0, y: y + ROW - 5, width: Math.max(this.x(word.end) - x0, 1.5),
                                    height: 3, "fill-opacity": Math.max(0.2, word.confidence) });
    strip.append(element("title", {}, `${word.text}: ${ms(word.end - word.start)}, confidence ${word.confidence}`));
    this.svg.append(strip);
  }

  marker(t, y, title) {
    const line = element("line", { class: "marker", x1: this.x(t), x2: this.x(t), y1: y + 1, y2: y + ROW - 1 });
    line.append(element("title", {}, title));
    this.svg.append(line);
  }

  axis(span, top) {
    const group = element("g", { class: "axis" });
    group.append(element("line", { x1: LABEL, x2: this.x(this.origin + span), y1: top + 2, y2: top + 2 }));
    const step = niceStep(span / 6);
    for (let t = 0; t <= span; t += step) {
      const at = this.x(this.origin + t);
      group.append(element("line", { x1: at, x2: at, y1: top + 2, y2: top + 6 }));
      group.append(element("text", { x: at, y: top + 18, class: "tick" }, t >= 1000 ? `${t / 1000} s` : `${t} ms`));
    }
    this.svg.append(group);
  }
}

/** 1, 2 or 5 times a power of ten, at least ``raw`` ms. */
function niceStep(raw) {
  const power = 10 ** Math.floor(Math.log10(Math.max(raw, 1)));
  return [1, 2, 5, 10].map((m) => m * power).find((step) => step >= raw);
}

function ms(duration) {
  return duration >= 1000 ? `${(duration / 1000).toFixed(2)} s` : `${Math.round(duration)} ms`;
}

function element(name, attributes, content) {
  const node = document.createElementNS(SVG, name);
  for (const [key, value] of Object.entries(attributes)) node.setAttribute(key, String(value));
  if (content !== undefined) node.textContent = content;
  return node;
}
