// Streaming resampler from the audio context's rate (44.1 or 48 kHz, usually) to the service's
// 16 kHz. A windowed-sinc low-pass at the input rate removes what 16 kHz cannot carry (without it,
// everything above 8 kHz would fold back into the speech band), then each output sample is
// interpolated linearly between the two filtered input samples around its instant. Output instants
// are computed from a sample count, not accumulated, so a 44.1 kHz stream never drifts.
// An ES module: the capture worklet imports it, and the tests import it into the page.

/** The low-pass's cutoff (half amplitude), as a fraction of the output rate: 7.2 kHz at 16 kHz. */
const CUTOFF = 0.45;
/** Half the low-pass's transition band in Hz: flat to 6 kHz, fully attenuated from 8.4 kHz. */
const HALF_TRANSITION_HZ = 1200;

export class Resampler {
  /**
   * @param {number} inRate  input sample rate (the AudioContext's)
   * @param {number} outRate output sample rate
   */
  constructor(inRate, outRate = 16000) {
    this.step = inRate / outRate;
    this.kernel = inRate > outRate ? lowPass((CUTOFF * outRate) / inRate, tapsFor(inRate)) : Float32Array.of(1);
    this.half = (this.kernel.length - 1) / 2;
    this.buffer = new Float32Array(0); // input from absolute sample index this.start on
    this.start = 0;
    this.produced = 0; // output samples so far; the next one sits at input position produced * step
  }

  /**
   * Feed one block of input; returns the output samples it completes (possibly none).
   * @param {Float32Array} input
   * @returns {Float32Array}
   */
  push(input) {
    const buffer = new Float32Array(this.buffer.length + input.length);
    buffer.set(this.buffer);
    buffer.set(input, this.buffer.length);
    const end = this.start + buffer.length;
    const out = [];
    for (;;) {
      const position = this.produced * this.step;
      const index = Math.floor(position);
      if (index + 1 + this.half >= end) break; // the filter needs input that has not arrived yet
      const a = this.filtered(buffer, index);
      const b = this.filtered(buffer, index + 1);
      out.push(a + (b - a) * (position - index));
      this.produced += 1;
    }
    const keep = Math.max(this.start, Math.floor(this.produced * this.step) - this.half);
    this.buffer = buffer.slice(keep - this.start);
    this.start = keep;
    return Float32Array.from(out);
  }

  /** The low-passed input at absolute sample index ``index`` (input before the stream is silence). */
  filtered(buffer, index) {
    const kernel = this.kernel;
    const first = index - this.half - this.start;
    let sum = 0;
    for (let j = Math.max(0, -first); j < kernel.length; j++) sum += kernel[j] * buffer[first + j];
    return sum;
  }
}

/** Taps of a Blackman-windowed sinc whose transition band is 2 x HALF_TRANSITION_HZ wide. */
function tapsFor(rate) {
  return 2 * Math.ceil((2.75 * rate) / HALF_TRANSITION_HZ / 2) + 1;
}

/** Windowed-sinc low-pass, ``cutoff`` in cycles per sample, unity gain at DC. */
function lowPass(cutoff, taps) {
  const middle = (taps - 1) / 2;
  const kernel = new Float32Array(taps);
  let sum = 0;
  for (let n = 0; n < taps; n++) {
    const x = n - middle;
    const sinc = x === 0 ? 2 * cutoff : Math.sin(2 * Math.PI * cutoff * x) / (Math.PI * x);
    const phase = (2 * Math.PI * n) / (taps - 1);
    kernel[n] = sinc * (0.42 - 0.5 * Math.cos(phase) + 0.08 * Math.cos(2 * phase));
    sum += kernel[n];
  }
  return kernel.map((value) => value / sum);
}
