// The AudioWorklet processor behind both audio sources (microphone and WAV file): mixes its input
// to mono, resamples it to 16 kHz and posts 20 ms frames of int16 little-endian PCM, the service's
// `audio` frame, to the page. It runs on the audio rendering thread, so the page's own work never
// makes it drop audio. When nothing plays into it (a WAV file that has ended) it sends silence,
// which lets the service's VAD end the last segment and its end-of-turn model decide.
import { Resampler } from "./resampler.js";

const OUT_RATE = 16000;
const FRAME_SAMPLES = 320; // 20 ms at 16 kHz

class CaptureProcessor extends AudioWorkletProcessor {
  constructor() {
    super();
    this.resampler = new Resampler(sampleRate, OUT_RATE); // sampleRate: the AudioWorkletGlobalScope's
    this.newFrame();
    this.running = true;
    this.port.onmessage = (event) => {
      if (event.data === "stop") this.running = false;
    };
  }

  newFrame() {
    this.frame = new DataView(new ArrayBuffer(FRAME_SAMPLES * 2));
    this.filled = 0;
    this.peak = 0;
  }

  process(inputs) {
    if (!this.running) return false;
    for (const sample of this.resampler.push(mono(inputs[0]))) {
      const clipped = Math.max(-1, Math.min(1, sample));
      this.frame.setInt16(2 * this.filled, Math.round(clipped * 32767), true);
      this.peak = Math.max(this.peak, Math.abs(clipped));
      this.filled += 1;
      if (this.filled === FRAME_SAMPLES) {
        this.port.postMessage({ pcm: this.frame.buffer, peak: this.peak }, [this.frame.buffer]);
        this.newFrame();
      }
    }
    return true;
  }
}

/** The channels' average; one render quantum of silence when nothing is connected. */
function mono(channels) {
  if (!channels || channels.length === 0) return new Float32Array(128);
  if (channels.length === 1) return channels[0];
  const out = new Float32Array(channels[0].length);
  for (const channel of channels) {
    for (let i = 0; i < out.length; i++) out[i] += channel[i] / channels.length;
  }
  return out;
}

registerProcessor("kitt-capture", CaptureProcessor);
