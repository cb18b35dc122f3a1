// One WebSocket session with the service, framed as the protocol says (docs/protocol.md): every
// message, both ways, is one binary WebSocket message holding one msgpack map. The codec is the
// vendored @msgpack/msgpack browser build (window.MessagePack), served by the service itself.

/** A quiet session is closed after server.idle_timeout_s (60 s by default); ping well before. */
const PING_EVERY_MS = 20000;

export class Session {
  /**
   * @param {string} url ws:// or wss:// URL, with ?token= when the server wants one
   * @param {{onFrame: (frame: object, at: number) => void,
   *          onClose: (event: CloseEvent, opened: boolean) => void}} handlers
   */
  constructor(url, { onFrame, onClose }) {
    this.url = url;
    this.onFrame = onFrame;
    this.onClose = onClose;
    this.socket = null;
    this.pings = 0;
  }

  /** Open the socket and send ``start``; resolves with the ``ready`` frame, rejects if it closes first. */
  open(start) {
    return new Promise((resolve, reject) => {
      const socket = new WebSocket(this.url);
      socket.binaryType = "arraybuffer";
      this.socket = socket;
      let ready = false;
      const timer = setInterval(() => this.send({ type: "ping", id: ++this.pings }), PING_EVERY_MS);
      socket.onopen = () => this.send(start);
      socket.onmessage = (event) => {
        const frame = decode(event.data);
        if (!ready && frame.type === "ready") {
          ready = true;
          resolve(frame);
        }
        this.onFrame(frame, performance.now());
      };
      socket.onclose = (event) => {
        clearInterval(timer);
        this.socket = null;
        if (!ready) reject(event);
        this.onClose(event, ready);
      };
    });
  }

  get isOpen() {
    return this.socket !== null && this.socket.readyState === WebSocket.OPEN;
  }

  /** Send one frame (a plain object; Uint8Array values become msgpack bin). */
  send(frame) {
    if (this.isOpen) this.socket.send(window.MessagePack.encode(frame));
  }

  /** Ask the server to flush every seat and close (it answers with finals, commits, then 1000). */
  close() {
    this.send({ type: "close" });
  }
}

/** A server message as a frame; what is not a msgpack map becomes a frame that says so, shown raw. */
export function decode(data) {
  if (typeof data === "string") return { type: "(text message)", text: data };
  try {
    const frame = window.MessagePack.decode(new Uint8Array(data));
    if (frame !== null && typeof frame === "object" && !Array.isArray(frame)) return frame;
    return { type: "(not a map)", value: frame };
  } catch (error) {
    return { type: "(undecodable)", error: String(error), bytes: data.byteLength };
  }
}
