"""An echo agent on kitt-stt: the server's committed turn is the agent's input, echoed back.

No cloud keys and no LiveKit server: a WAV file plays the microphone, and the "reply" is printed.
Swap the echo for an LLM and a TTS to get a real assistant; the turn-taking stays the server's.

    kitt-stt synth 打开车门 /tmp/door.wav         # tone speech (exact text on asr.model: tone)
    python examples/echo_agent.py /tmp/door.wav --framework pipecat
    python examples/echo_agent.py /tmp/door.wav --framework livekit

Needs the extra of the framework it runs: pip install 'kitt-stt[pipecat]' or 'kitt-stt[livekit]'.
"""

from __future__ import annotations

import argparse
import asyncio
import wave

CHUNK_MS = 20
TRAILING_SILENCE_MS = 2000  # after the file: time for the server's end-of-turn decision


def read_chunks(path: str) -> tuple[int, int, list[bytes]]:
    with wave.open(path, "rb") as handle:
        rate, channels = handle.getframerate(), handle.getnchannels()
        pcm = handle.readframes(handle.getnframes())
    pcm += bytes(rate * channels * 2 * TRAILING_SILENCE_MS // 1000)
    size = rate * channels * 2 * CHUNK_MS // 1000
    return rate, channels, [pcm[i:i + size] for i in range(0, len(pcm), size)]


async def run_pipecat(url: str, path: str) -> None:
    from pipecat.frames.frames import EndFrame, Frame, InputAudioRawFrame, TranscriptionFrame
    from pipecat.pipeline.pipeline import Pipeline
    from pipecat.pipeline.worker import PipelineParams, PipelineWorker
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor
    from pipecat.workers.runner import WorkerRunner

    from kitt_stt.integrations.pipecat import KittSTTService

    class Echo(FrameProcessor):
        async def process_frame(self, frame: Frame, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TranscriptionFrame) and frame.finalized:
                print(f"you said: {frame.text}", flush=True)
            await self.push_frame(frame, direction)

    rate, channels, chunks = read_chunks(path)
    worker = PipelineWorker(Pipeline([KittSTTService(url), Echo()]),
                            params=PipelineParams(audio_in_sample_rate=rate))

    @worker.event_handler("on_pipeline_started")
    async def feed(_worker, _frame) -> None:
        for chunk in chunks:  # in real time, as a microphone would
            await worker.queue_frame(InputAudioRawFrame(audio=chunk, sample_rate=rate, num_channels=channels))
            await asyncio.sleep(CHUNK_MS / 1000)
        await worker.queue_frame(EndFrame())  # the service sends `close`: a pending turn is committed

    runner = WorkerRunner(handle_sigint=False)
    await runner.add_workers(worker)
    await runner.run()


async def run_livekit(url: str, path: str) -> None:
    from livekit import rtc
    from livekit.agents import stt as lk_stt

    from kitt_stt.integrations.livekit import STT

    rate, channels, chunks = read_chunks(path)
    stream = STT(url).stream()

    async def feed() -> None:
        for chunk in chunks:
            stream.push_frame(rtc.AudioFrame(chunk, rate, channels, len(chunk) // (2 * channels)))
            await asyncio.sleep(CHUNK_MS / 1000)
        stream.end_input()

    feeding = asyncio.create_task(feed())
    async for event in stream:
        if event.type is lk_stt.SpeechEventType.FINAL_TRANSCRIPT:
            print(f"you said: {event.alternatives[0].text}", flush=True)
    await feeding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("wav", help="the 'microphone': a WAV file (any rate, mono or stereo, 16-bit)")
    parser.add_argument("--url", default="ws://127.0.0.1:8000/stt/sensevoice")
    parser.add_argument("--framework", choices=("pipecat", "livekit"), default="pipecat")
    args = parser.parse_args()
    runner = run_pipecat if args.framework == "pipecat" else run_livekit
    asyncio.run(runner(args.url, args.wav))


if __name__ == "__main__":
    main()
