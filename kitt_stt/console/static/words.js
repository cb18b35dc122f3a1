// Server errors and WebSocket closes in plain words (codes: docs/protocol.md, "Error codes").

const ERRORS = {
  bad_frame: "The server could not read a message the page sent",
  bad_field: "The server refused a setting or a field",
  bad_audio: "The server refused an audio frame",
  too_many_seats: "This connection already has as many seats as the server allows",
  rate_limited: "Audio or new segments arrived faster than the server allows; some were dropped",
  overloaded: "The server is too busy",
  idle_timeout: "The session sent nothing for too long",
  unauthorized: "The server refused the token",
  internal: "The server failed while handling this (the segment still gets its final)",
};

const CLOSES = {
  1000: "The session ended normally",
  1008: "The server closed an idle session",
  1009: "The server refused a message that was too large",
  1011: "The server hit an unexpected condition",
  1012: "The server is restarting; reconnect",
  1013: "The server cannot take this session now (busy, loading its model or shutting down); try again later",
};

/** ``error`` frame -> one sentence. */
export function errorText(frame) {
  const plain = Object.hasOwn(ERRORS, frame.code) ? ERRORS[frame.code] : `Error "${frame.code}"`;
  const seat = frame.seat ? ` (seat ${frame.seat})` : "";
  const end = frame.fatal ? " The session ends." : "";
  return `${plain}${seat}: ${frame.message}.${end}`;
}

/** A WebSocket close -> one sentence; ``opened``: whether the session got as far as ``ready``. */
export function closeText(event, opened, authRequired) {
  if (CLOSES[event.code]) return `${CLOSES[event.code]} (close ${event.code}).`;
  if (!opened) {
    const token = authRequired
      ? "This server requires a token: check the one in the Token field."
      : "Is the service running?";
    const why = "the server refused the connection or is unreachable";
    return `Could not open a session (close ${event.code}): ${why}. ${token}`;
  }
  return `The connection was lost (close ${event.code}${event.reason ? `: ${event.reason}` : ""}).`;
}
