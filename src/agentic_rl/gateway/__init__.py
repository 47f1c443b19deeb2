"""OpenAI-compatible gateway over the policy: serves chat completions from any token engine,
batching concurrent requests, and records per episode the exact token ids it served
(``gateway/traces.py``), so agent programs that only speak the OpenAI API produce
token-exact trajectories."""

from agentic_rl.gateway.service import CompletionService
from agentic_rl.gateway.traces import Call, EpisodeStore, calls_to_trajectories

__all__ = ["Call", "CompletionService", "EpisodeStore", "calls_to_trajectories"]
