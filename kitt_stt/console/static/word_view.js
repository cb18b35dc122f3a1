// A final's words (protocol 0.4, ``words: true``): each word shaded by its confidence, the unsure
// ones underlined, its times and confidence in its tooltip; and their places on the turn's timeline.
// Server text only ever reaches the page through textContent.

/** Below this a word is underlined: the recogniser was not sure of it. */
export const UNSURE = 0.8;
/** Scripts written without spaces, and CJK punctuation: no space next to them (docs/protocol.md). */
const UNSPACED = /[\p{Script=Han}\p{Script=Hiragana}\p{Script=Katakana}\p{Script=Thai}\u3000-\u303f\uff00-\uffef]/u;

/** ``final.words`` -> one span per word, in order, spaced as the words' script is. */
export function wordLine(words) {
  const line = document.createElement("span");
  line.className = "words";
  let previous = null;
  for (const word of words) {
    if (previous !== null && !UNSPACED.test(previous.at(-1)) && !UNSPACED.test(word.text[0])) line.append(" ");
    previous = word.text;
    const el = document.createElement("span");
    el.className = word.confidence < UNSURE ? "word unsure" : "word";
    el.dataset.level = String(Math.min(9, Math.max(0, Math.floor(word.confidence * 10))));  // shading: console.css
    el.dataset.confidence = String(word.confidence);
    el.textContent = word.text;
    el.title = `${word.text} · ${seconds(word.start_ms)}–${seconds(word.end_ms)} · confidence ${word.confidence}`;
    line.append(el);
  }
  return line;
}

/** The words placed on the page's clock (``wallAt``: audio ms -> page ms, or null when the page did
 * not send that audio): what the timeline draws. */
export function placedWords(words, wallAt) {
  return words.map((word) => ({ text: word.text, confidence: word.confidence,
                                start: wallAt(word.start_ms), end: wallAt(word.end_ms) }))
    .filter((word) => word.start != null && word.end != null);
}

function seconds(ms) {
  return `${(ms / 1000).toFixed(2)} s`;
}
