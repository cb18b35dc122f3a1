// Audio sources for a seat: the microphone (getUserMedia) or a WAV file played in real time. Both
// run through the same AudioWorklet (capture-worklet.js), which resamples to 16 kHz and posts
// 20 ms int16 frames; the page turns each into one `audio` frame.

const WORKLET_URL = new URL("./capture-worklet.js", import.meta.url);

/**
 * Capture the microphone. The browser's voice processing (echo cancellation, noise suppression,
 * automatic gain) is turned off: the service's VAD and model expect the signal as spoken.
 * @param {(pcm: ArrayBuffer, peak: number) => void} onFrame
 */
export async function startMicrophone(onFrame) {
  requireSecurePage();
  const stream = await navigator.mediaDevices.getUserMedia({
    audio: { channelCount: 1, echoCancellation: false, noiseSuppression: false, autoGainControl: false },
  });
  try {
    const capture = await Capture.create(onFrame);
    capture.source = capture.context.createMediaStreamSource(stream);
    capture.source.connect(capture.node);
    capture.release = () => stream.getTracks().forEach((track) => track.stop());
    return capture;
  } catch (error) {
    stream.getTracks().forEach((track) => track.stop());
    throw error;
  }
}

/**
 * Play a WAV file (any rate and channel count the browser decodes) into the capture worklet in
 * real time; ``onEnded`` is called when the file is over, while the worklet goes on sending silence.
 * @param {File} file
 * @param {(pcm: ArrayBuffer, peak: number) => void} onFrame
 * @param {() => void} onEnded
 */
export async function startFile(file, onFrame, onEnded) {
  requireSecurePage();
  const capture = await Capture.create(onFrame);
  try {
    const audio = await capture.context.decodeAudioData(await file.arrayBuffer());
    capture.source = new AudioBufferSourceNode(capture.context, { buffer: audio });
    capture.source.connect(capture.node);
    capture.source.onended = onEnded;
    capture.source.start();
    return capture;
  } catch (error) {
    capture.stop();
    throw new Error(`${file.name}: the browser cannot decode it as audio (${error.message || error})`);
  }
}

/** Browsers give the microphone and AudioWorklets only to secure pages (HTTPS or loopback). */
function requireSecurePage() {
  if (!window.isSecureContext) {
    throw new Error("audio needs a secure page: open the console on 127.0.0.1 or localhost, " +
                    "or over HTTPS (docs/console.md)");
  }
}

class Capture {
  static async create(onFrame) {
    const capture = new Capture();
    capture.context = new AudioContext();
    try {
      await capture.context.audioWorklet.addModule(WORKLET_URL);
      capture.node = new AudioWorkletNode(capture.context, "kitt-capture");
      capture.node.port.onmessage = (event) => onFrame(event.data.pcm, event.data.peak);
      // The worklet writes no output; connected, it is pulled by the graph like any other node.
      capture.node.connect(capture.context.destination);
      await capture.context.resume();
    } catch (error) {
      capture.stop();
      throw error;
    }
    return capture;
  }

  constructor() {
    this.context = null;
    this.node = null;
    this.source = null;
    this.release = () => {};
  }

  /** The context's own rate: what the worklet resamples from. */
  get sampleRate() {
    return this.context.sampleRate;
  }

  stop() {
    if (this.source) this.source.onended = null;
    this.node?.port.postMessage("stop");
    this.release();
    this.context?.close();
  }
}
