"""Inference scheduling shared by all connections: the queue and its worker threads
(``inference``), and what it queues: priorities, jobs, round-robin lanes (``jobs``)."""

from kitt_stt.scheduler.inference import InferenceScheduler
from kitt_stt.scheduler.jobs import DecodeOutcome, Priority

__all__ = ["DecodeOutcome", "InferenceScheduler", "Priority"]
