"""Inference scheduling shared by all connections: worker threads, priorities, coalescing."""

from kitt_stt.scheduler.inference import DecodeOutcome, InferenceScheduler, Priority

__all__ = ["DecodeOutcome", "InferenceScheduler", "Priority"]
