"""Seat arbitration: one voice, one seat (``vad.arbitration``, ``docs/configuration.md``).

A car has a microphone per seat and each hears the others: when the driver speaks, the
passenger's microphone carries the same voice a few dB weaker and a few ms later, and its VAD
opens a segment of its own. Arbitration keeps such a segment from ever reaching the wire: while
a connection has more than one seat, a seat's new segment is *held* (its ``speech_start`` and
audio are queued, nothing is decoded) until ``vad.arbitration_window_ms`` of audio after the VAD
opened it, or its end if that comes first. Then its speech so far is compared with the same span
of every other seat's raw audio (:func:`compare`): if one of them carries the same signal
(normalised cross-correlation >= ``vad.arbitration_correlation`` at a delay of 0-10 ms, this seat
being the later) and is louder, the segment is dropped: its events are discarded up to its end,
so the client sees nothing of it (no ``speech_start`` without an end), except a ``bleed`` frame if
the session asked (``bleed: true``). Otherwise the held events are handed on at once, in order.

Two people speaking at once do not correlate like that: each microphone carries mostly its own
speaker and the other's voice only as bleed, so the correlation stays near ``g / (1 + g^2)``
(0.4 for -6 dB of bleed) and both seats keep their segments.

The comparison reads the seats' raw audio by their audio clocks (samples since each seat's first
audio): a client that streams every seat from the same instant, frames interleaved as the car
captures them, keeps those clocks aligned. Cost: the first ``arbitration_window_ms`` of every
segment on a multi-seat connection wait (``speech_start`` later by that much; the first interim and
the final are not delayed, since interims begin later and a segment ending inside the window is
decided at its end) plus one comparison per other seat, about a millisecond of CPU each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from kitt_stt.audio.vad import SAMPLE_RATE, SpeechAudio, SpeechEnded, SpeechStarted, VadEvent
from kitt_stt.config.schema import VadConfig

MAX_DELAY_SAMPLES = SAMPLE_RATE // 100  # 10 ms: how much later a bleeding seat may hear the voice
MIN_OVERLAP_SAMPLES = SAMPLE_RATE * 60 // 1000  # less speech than this in common decides nothing
TIE_DB = 1.0  # copies this close in level: the seat that joined the connection first keeps the segment
MAX_SKEW_SAMPLES = SAMPLE_RATE * 3 // 10  # seats whose clocks differ by more than 300 ms are not streaming together
RING_SAMPLES = SAMPLE_RATE  # raw audio kept per seat: a held segment's speech, the delay, a pre-roll
REOPEN_PREROLL_SAMPLES = SAMPLE_RATE // 10  # audio before the window a reopened segment starts with
REOPEN_VOICED = 0.8  # ... and only if this much of the window was voiced (own speech, not a fading tail)
REOPEN_LEVEL = 0.5  # ... and at least this much of the dropped speech's power (-3 dB): own speech is louder
_EMPHASIS = 0.95  # pre-emphasis before comparing: road rumble (below ~200 Hz) must not look alike


@dataclass(frozen=True)
class Comparison:
    """How one seat's speech compares with another seat's raw audio over the same span."""

    correlation: float  # normalised cross-correlation at the best delay, in [-1, 1]
    delay_ms: float  # how much later this seat hears it than the other
    level_db: float  # the other seat's level minus this seat's (positive: the other is louder)


def _emphasised(samples: np.ndarray) -> np.ndarray:
    audio = samples.astype(np.float64)
    return audio[1:] - _EMPHASIS * audio[:-1]


def _power(samples: np.ndarray | None) -> float:
    if samples is None or samples.shape[0] < 2:
        return 0.0
    emphasised = _emphasised(samples)
    return float(np.dot(emphasised, emphasised)) / emphasised.shape[0]


def compare(mine: np.ndarray, other: np.ndarray, max_delay: int = MAX_DELAY_SAMPLES) -> Comparison | None:
    """Compare ``mine`` (n samples) with ``other``, which holds the same span and ``max_delay``
    samples before it (n + max_delay samples, the other seat's clock ``max_delay`` earlier).

    For each delay d in [0, max_delay] the correlation of mine[t] with other[t - d], normalised by
    both spans' energies, so a copy at any level scores 1; the level difference is read at the best
    delay. None when there is too little audio, or a span is silent."""
    n = min(mine.shape[0], other.shape[0] - max_delay)
    if n < MIN_OVERLAP_SAMPLES:
        return None
    x = _emphasised(mine[:n])
    y = _emphasised(other[: n + max_delay])
    size = x.shape[0]
    energy_x = float(np.dot(x, x))
    if energy_x <= 0.0:
        return None
    products = np.correlate(y, x, mode="valid")  # products[k] = sum_t y[k + t] x[t]; delay = max_delay - k
    squares = np.concatenate([[0.0], np.cumsum(y * y)])
    energy_y = squares[size:] - squares[:-size]
    valid = energy_y > 0.0
    if not valid.any():
        return None
    scores = np.where(valid, products / np.sqrt(energy_x * np.where(valid, energy_y, 1.0)), -1.0)
    best = int(np.argmax(scores))
    level_db = 10.0 * float(np.log10(energy_y[best] / energy_x))
    return Comparison(correlation=float(scores[best]), delay_ms=(max_delay - best) * 1000.0 / SAMPLE_RATE,
                      level_db=level_db)


@dataclass(frozen=True)
class Verdict:
    """A held segment's fate: dropped as bleed of ``source`` (with the comparison that said so), or kept."""

    source: str | None
    comparison: Comparison | None = None

    @property
    def dropped(self) -> bool:
        return self.source is not None


@dataclass(frozen=True)
class Dropped:
    """What is reported of a dropped segment (metrics, and the ``bleed`` frame)."""

    seat: str
    source: str
    start_ms: int
    decided_ms: int
    comparison: Comparison


class Arbiter:
    """The seats of one connection, for arbitration; ``on_decision`` hears every verdict
    (the connection counts them and tells sessions that asked about dropped segments)."""

    def __init__(self, config: VadConfig, on_decision: Callable[[Dropped | None], None] = lambda _: None,
                 enabled: Callable[[], bool] | None = None) -> None:
        self._enabled = enabled or (lambda: config.arbitration)  # the session's setting (vad.arbitration its default)
        self._window_samples = config.arbitration_window_ms * SAMPLE_RATE // 1000
        self._min_correlation = config.arbitration_correlation
        self._on_decision = on_decision
        self._gates: list[SeatGate] = []

    def gate(self, seat: str) -> SeatGate:
        """A new seat's gate; seats are ranked by when they joined (the tie-break)."""
        gate = SeatGate(seat, self)
        self._gates.append(gate)
        return gate

    @property
    def active(self) -> bool:
        return len(self._gates) > 1 and self._enabled()

    @property
    def window_samples(self) -> int:
        return self._window_samples

    def heard_by_all(self, gate: SeatGate) -> int:
        """How far the seats streaming with ``gate`` have all heard, on its clock: a seat's audio can
        come a message later than another's (a client sends each seat's 200 ms in turn, or the Silero
        batch hands one seat its decisions before the next), and judging past that point compares
        the segment with the little that overlaps and keeps bleed. A seat further behind than the
        skew is not streaming with it and does not count."""
        return min([gate.heard, *(other.heard for other in self._gates
                                  if other is not gate and other.heard >= gate.heard - MAX_SKEW_SAMPLES)])

    def judge(self, gate: SeatGate, start: int, end: int) -> Verdict:
        """Whether ``gate``'s speech over samples [start, end) of its clock is another seat's voice:
        the same signal, louder there (or as loud, on a seat that joined first)."""
        mine = gate.audio(start, end)
        if mine is None:
            return Verdict(None)
        rank = self._gates.index(gate)
        verdict = Verdict(None)
        louder_ones: list[tuple[str, np.ndarray, Comparison]] = []
        for other_rank, other in enumerate(self._gates):
            if other is gate or abs(other.heard - gate.heard) > MAX_SKEW_SAMPLES:
                continue  # a seat that stopped streaming or began late: the same clock is not the same moment
            theirs = other.audio(start - MAX_DELAY_SAMPLES, end)
            comparison = None if theirs is None else compare(mine, theirs)
            if theirs is None or comparison is None:
                continue
            if comparison.level_db >= TIE_DB:
                louder_ones.append((other.seat, theirs, comparison))
            if comparison.correlation < self._min_correlation:
                continue
            louder = comparison.level_db >= TIE_DB or (comparison.level_db > -TIE_DB and other_rank < rank)
            if louder and (verdict.comparison is None or comparison.level_db > verdict.comparison.level_db):
                verdict = Verdict(other.seat, comparison)
        if verdict.dropped or len(louder_ones) < 2:
            return verdict
        return self._two_voices(mine, louder_ones)

    def _two_voices(self, mine: np.ndarray, louder_ones: list[tuple[str, np.ndarray, Comparison]]) -> Verdict:
        """A quiet seat between two speakers hears both, each too weakly to explain it alone: it is
        bleed if the two louder seats that correlate best explain it together (least squares)."""
        pair = sorted(louder_ones, key=lambda one: one[2].correlation)[-2:]
        x = _emphasised(mine)
        columns = []
        for _, theirs, comparison in pair:
            shift = MAX_DELAY_SAMPLES - round(comparison.delay_ms * SAMPLE_RATE / 1000.0)
            columns.append(_emphasised(theirs[shift : shift + mine.shape[0]]))
        size = min(x.shape[0], *(column.shape[0] for column in columns))
        basis = np.stack([column[:size] for column in columns], axis=1)
        coefficients, *_ = np.linalg.lstsq(basis, x[:size], rcond=None)
        left = x[:size] - basis @ coefficients
        explained = 1.0 - float(np.dot(left, left)) / max(float(np.dot(x[:size], x[:size])), 1e-9)
        if explained < self._min_correlation**2:
            return Verdict(None)
        source, _, comparison = max(pair, key=lambda one: one[2].level_db)
        return Verdict(source, Comparison(correlation=float(np.sqrt(explained)), delay_ms=comparison.delay_ms,
                                          level_db=comparison.level_db))

    def decided(self, gate: SeatGate, verdict: Verdict, start_ms: int, decided_ms: int) -> None:
        if verdict.source is None or verdict.comparison is None:
            self._on_decision(None)
        else:
            self._on_decision(Dropped(gate.seat, verdict.source, start_ms, decided_ms, verdict.comparison))

    def remove(self, gate: SeatGate) -> None:
        if gate in self._gates:
            self._gates.remove(gate)


class SeatGate:
    """One seat's side of arbitration: its recent raw audio, and the VAD events it holds or drops.

    States: passing (no segment held: events go through), holding (a new segment waits for its
    verdict), dropping (the segment was bleed: its events are discarded up to its end)."""

    def __init__(self, seat: str, arbiter: Arbiter | None = None) -> None:
        self.seat = seat
        self._arbiter = arbiter
        self._ring = np.zeros(RING_SAMPLES, dtype=np.int16)
        self._heard = 0  # samples on this seat's clock so far (the ring holds the last RING_SAMPLES)
        self._kept_from = 0  # the ring holds every sample heard since this one
        self._held: list[tuple[VadEvent, int]] = []
        self._speech_from = 0  # the held segment's speech start, in samples
        self._opened_at = 0  # the clock when the VAD opened it, in samples
        self._dropping = False
        self._voiced_since_look = 0  # while dropping: voiced frames since the last look ...
        self._frames_since_look = 0  # ... of these
        self._dropped_level = 0.0  # the dropped speech's power (pre-emphasised)

    @property
    def heard(self) -> int:
        """Samples on this seat's clock so far."""
        return self._heard

    @property
    def nbytes(self) -> int:
        return self._ring.nbytes if self._arbiter is not None else 0

    def hear(self, frame: np.ndarray) -> None:
        """A frame of this seat's audio, on the clock its VAD events are admitted on."""
        if self._arbiter is None:
            return
        size = frame.shape[0]
        if not self._arbiter.active:  # one seat: nothing to compare with, so nothing is copied
            self._heard += size
            self._kept_from = self._heard
            return
        position = self._heard % RING_SAMPLES
        first = min(size, RING_SAMPLES - position)
        self._ring[position : position + first] = frame[:first]
        self._ring[: size - first] = frame[first:]
        self._heard += size

    def skip(self, samples: int) -> None:
        """Audio dropped before the VAD (rate limit): on the clock, as silence."""
        if self._arbiter is None:
            return
        self._heard += max(0, samples - RING_SAMPLES)
        self.hear(np.zeros(min(samples, RING_SAMPLES), dtype=np.int16))

    def audio(self, start: int, end: int) -> np.ndarray | None:
        """Samples [start, end) of this seat's clock, cut at what was heard so far; None when
        ``start`` is not (or no longer) kept, since a span that begins elsewhere would not align."""
        end = min(end, self._heard)
        if start < max(self._kept_from, self._heard - RING_SAMPLES) or end <= start:
            return None
        return self._ring[np.arange(start, end) % RING_SAMPLES]

    def admit(self, events: list[VadEvent], audio_ms: int) -> list[tuple[VadEvent, int]]:
        """The events to act on now, each with the audio clock (ms) it came at: ``events`` as they
        are when no segment is held, nothing while one waits, then the held ones in order once kept."""
        if not self._held and not self._dropping and (self._arbiter is None or not self._arbiter.active):
            return [(event, audio_ms) for event in events]  # one seat (or arbitration off): every frame, cheaply
        out: list[tuple[VadEvent, int]] = []
        for event in events:
            if isinstance(event, SpeechStarted):
                self._dropping = False
                if self._arbiter is None or not self._arbiter.active:
                    out.append((event, audio_ms))
                    continue
                self._held = [(event, audio_ms)]
                self._speech_from = event.audio_ms * SAMPLE_RATE // 1000
                self._opened_at = self._heard
            elif self._dropping:
                self._dropping = not isinstance(event, SpeechEnded)
                if isinstance(event, SpeechAudio):
                    self._frames_since_look += 1
                    self._voiced_since_look += int(event.voiced)
                if self._dropping and self._heard - self._opened_at >= self._window_samples():
                    out.extend(self._look_again(audio_ms))
            elif self._held:
                self._held.append((event, audio_ms))
                ended = isinstance(event, SpeechEnded)
                if ended or (isinstance(event, SpeechAudio) and
                             self._heard - self._opened_at >= self._window_samples()):
                    out.extend(self._decide(audio_ms, ended))
            else:
                out.append((event, audio_ms))
        return out

    def _window_samples(self) -> int:
        return self._arbiter.window_samples if self._arbiter is not None else 0

    def _decide(self, audio_ms: int, ended: bool) -> list[tuple[VadEvent, int]]:
        assert self._arbiter is not None
        end = self._arbiter.heard_by_all(self)
        if not ended and end - self._opened_at < self._window_samples():
            return []  # the others have not heard the window yet: the next frame looks again
        held, self._held = self._held, []
        verdict = self._arbiter.judge(self, self._speech_from, end)
        self._arbiter.decided(self, verdict, self._speech_from * 1000 // SAMPLE_RATE, audio_ms)
        if not verdict.dropped:
            return held
        self._dropping = not ended
        self._dropped_level = _power(self.audio(self._speech_from, end))
        self._opened_at = self._heard  # the next look at it is a window later
        self._voiced_since_look = self._frames_since_look = 0
        return []

    def _look_again(self, audio_ms: int) -> list[tuple[VadEvent, int]]:
        """While a dropped segment goes on, judge its latest window again: when it is no longer
        another seat's voice (its own speaker began while the other still spoke), a segment opens
        there, with the window and a little before it as its pre-roll."""
        assert self._arbiter is not None
        window = self._window_samples()
        end = self._arbiter.heard_by_all(self)
        if end - self._opened_at < window:
            return []  # the others have not heard this window yet: the next frame looks again
        self._opened_at = end
        voiced, self._voiced_since_look, self._frames_since_look = (
            self._voiced_since_look >= REOPEN_VOICED * self._frames_since_look, 0, 0)
        if not voiced:  # the speech is fading (the segment's silence hang): nothing of its own began
            return []
        start = end - window
        if _power(self.audio(start, end)) < REOPEN_LEVEL * self._dropped_level:
            return []  # quieter than the bleed it dropped: a pause, a tail or the noise, not a new voice
        verdict = self._arbiter.judge(self, start, end)
        if verdict.dropped:
            return []
        self._dropping = False
        self._arbiter.decided(self, verdict, start * 1000 // SAMPLE_RATE, audio_ms)
        preroll = self.audio(max(0, start - REOPEN_PREROLL_SAMPLES, self._heard - RING_SAMPLES), self._heard)
        return [(SpeechStarted(audio_ms=start * 1000 // SAMPLE_RATE,
                               preroll=preroll if preroll is not None else np.zeros(0, np.int16)), audio_ms)]

    def reset(self) -> None:
        """The seat closed: forget what is held and leave the connection's arbitration."""
        self._held = []
        self._dropping = False
        if self._arbiter is not None:
            self._arbiter.remove(self)
