"""Datasets: JSONL files and OpenAI-format conversations with tool calls, to and from tokens."""

from agentic_rl.data.conversations import (
    read_jsonl,
    render_example,
    trajectory_to_example,
    validate_example,
    write_jsonl,
)
from agentic_rl.parsers.messages import unwrap_observation

__all__ = [
    "read_jsonl",
    "write_jsonl",
    "trajectory_to_example",
    "render_example",
    "unwrap_observation",
    "validate_example",
]
