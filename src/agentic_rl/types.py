"""Core data types shared by every stage: tasks, messages, tool calls, turns, trajectories.

Messages use the OpenAI chat format as plain dicts (``{"role": ..., "content": ...}``)
so they pass straight into chat templates and HTTP clients; the typed helpers here
build and inspect them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Message = dict[str, Any]

TOOL_OUTPUT_PROBE = "\u2063TOOL_OUTPUT\u2063"
"""Stands in for a tool result's content where a chat template's rendering of a tool
message is examined (``ChatRenderer.tool_output_template``, ``ToolCallParser.framed_by``)."""
"""An OpenAI-format chat message: ``role``, ``content`` and optionally ``tool_calls``,
``tool_call_id``, ``name``."""

TERMINATION_REASONS: tuple[str, ...] = ("answered", "max_turns", "max_tokens", "timeout", "error")


def openai_tools(schemas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tools in OpenAI's form ``{"type": "function", "function": {name, description,
    parameters}}``, from that form (``Tool.schema()``) or from bare function schemas."""
    return [
        dict(s)
        if s.get("type") == "function" and isinstance(s.get("function"), dict)
        else {"type": "function", "function": s}
        for s in schemas
    ]


@dataclass(frozen=True)
class Task:
    """One problem: the user prompt, its gold answer and anything the reward needs."""

    id: str
    prompt: str
    answer: str
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolCall:
    """One call the model asked for."""

    name: str
    arguments: dict[str, Any]
    id: str = ""


INVALID_CALL = "invalid_call"
"""``ToolResult.name`` of a call the parser could not read (bad JSON, unclosed tag...): a
malformed call, not a tool."""

UNKNOWN_TOOL = "unknown_tool"
"""Metric label of calls that named a tool the env does not have. The name such a call gives
is the model's own text (``<tool name>`` copied from a prompt, anything at all): keyed by it,
a run's metrics would grow a new series per invented name."""


@dataclass
class ToolResult:
    """What a tool returned. ``ok=False`` carries an error text the model sees."""

    name: str
    content: str
    ok: bool = True
    call_id: str = ""
    latency_s: float = 0.0
    malformed: bool = False
    """True when the call itself was invalid (bad JSON, unknown tool, bad arguments),
    as opposed to a well-formed call whose tool failed."""
    unknown_tool: bool = False
    """True when the call named a tool that is not registered (then also ``malformed``);
    ``name`` keeps the name the model wrote, metrics count it as ``UNKNOWN_TOOL``."""


@dataclass
class Turn:
    """One assistant turn and the observation that followed it.

    Token spans index into the owning ``Trajectory.token_ids``.
    """

    assistant_text: str
    response_start: int = 0
    response_end: int = 0
    observation_end: int = 0
    tool_results: list[ToolResult] = field(default_factory=list)
    reward: float = 0.0
    turn_reward: float = 0.0
    """Process reward for this turn from the env's ``info["turn_reward"]`` (kept apart from
    ``reward``, whose sum is the outcome); read by turn-level credit assignment."""
    reward_terms: dict[str, float] = field(default_factory=dict)
    """Episode reward terms the env reported on this step (``info["reward_terms"]``): the
    trainer adds them to the episode's reward times ``reward.terms`` (``envs.terms``)."""
    turn_terms: dict[str, float] = field(default_factory=dict)
    """This turn's reward terms (``info["turn_terms"]``): the trainer adds them to
    ``turn_reward`` times ``reward.terms``."""
    finish_reason: str = "stop"
    weight_version: int = 0
    """The engine's weight version that sampled this turn (its first token)."""
    version_changes: list[tuple[int, int]] = field(default_factory=list)
    """Partial rollouts: ``(token index in the trajectory, version)`` where new weights took
    over mid-turn; the tokens from that index on were sampled by that version."""
    summary: bool = False
    """A summary the model wrote when its context was full (``rollout.context: summarize``):
    sampled and trained like any turn, but never sent to the env and not counted as a turn
    of the episode (``Trajectory.num_turns``, ``max_turns``)."""


@dataclass
class Trajectory:
    """One episode, token-exact.

    ``token_ids`` is the whole sequence (prompt, sampled responses, observations) exactly
    as the model saw and produced it; ``loss_mask[i]`` is 1 where token i was sampled by
    the policy and 0 for prompt and observation tokens; ``sampler_logprobs[i]`` is the
    sampler's log-probability of token i (0.0 where loss_mask is 0).
    """

    task_id: str
    group_id: str
    messages: list[Message] = field(default_factory=list)
    prompt_length: int = 0
    token_ids: list[int] = field(default_factory=list)
    loss_mask: list[int] = field(default_factory=list)
    sampler_logprobs: list[float] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    reward: float = 0.0
    termination_reason: str = ""
    answer: str | None = None
    """The final answer the env extracted (used for majority voting)."""
    correct: bool = False
    infra_error: str | None = None
    """Set when the environment or a tool crashed; such trajectories leave the loss."""
    info: dict[str, Any] = field(default_factory=dict)
    wall_time_s: float = 0.0
    segments: list[Trajectory] = field(default_factory=list)
    """Earlier samples of the same episode, when its context was rebuilt rather than extended
    (a context policy that drops or folds history, an agent program that rewrites its
    history): each token-exact for what the model saw then. This trajectory is the last
    segment and carries the episode's outcome; training gives every segment the episode's
    advantage."""

    @property
    def num_turns(self) -> int:
        """Assistant turns of the whole episode (segments included; summary turns not)."""
        return sum(not turn.summary for sample in self.samples for turn in sample.turns)

    @property
    def summary_turns(self) -> int:
        """Summaries the model wrote in this episode (``rollout.context: summarize``)."""
        return sum(turn.summary for sample in self.samples for turn in sample.turns)

    @property
    def samples(self) -> list[Trajectory]:
        """The episode's training samples: its segments, then itself."""
        return [*self.segments, self]

    @property
    def weight_versions(self) -> list[int]:
        """The engine weight versions that sampled this trajectory's tokens (sorted, distinct)."""
        return sorted(
            {turn.weight_version for turn in self.turns}
            | {version for turn in self.turns for _, version in turn.version_changes}
        )

    @property
    def response_tokens(self) -> int:
        """Sampled tokens of the whole episode (segments included)."""
        return int(sum(sum(sample.loss_mask) for sample in self.samples))

    @property
    def tool_results(self) -> list[ToolResult]:
        """Tool results of the whole episode (segments included)."""
        return [r for sample in self.samples for turn in sample.turns for r in turn.tool_results]

    def append(self, token_ids: list[int], mask: int, logprobs: list[float] | None = None) -> None:
        """Append tokens with one mask value; logprobs default to 0.0 (not sampled)."""
        self.token_ids.extend(token_ids)
        self.loss_mask.extend([mask] * len(token_ids))
        self.sampler_logprobs.extend(logprobs if logprobs is not None else [0.0] * len(token_ids))

    def to_dict(self) -> dict[str, Any]:
        """A JSON-serialisable view (for rollout dumps and eval output)."""
        return {
            "task_id": self.task_id,
            "group_id": self.group_id,
            "messages": self.messages,
            "reward": self.reward,
            "correct": self.correct,
            "answer": self.answer,
            "termination_reason": self.termination_reason,
            "infra_error": self.infra_error,
            "num_turns": self.num_turns,
            "response_tokens": self.response_tokens,
            "tool_calls": [
                {
                    "name": r.name,
                    "ok": r.ok,
                    "malformed": r.malformed,
                    "unknown_tool": r.unknown_tool,
                    "latency_s": r.latency_s,
                }
                for r in self.tool_results
            ],
            "wall_time_s": self.wall_time_s,
            "weight_versions": self.weight_versions,
            "segments": len(self.segments) + 1,
            **({"env": self.info["env"]} if "env" in self.info else {}),  # a mix's entry
            **({"summaries": self.summary_turns} if self.summary_turns else {}),
            **({"tools": self.template_tools} if self.template_tools else {}),
            **(
                {"tool_output_template": self.info["tool_output_template"]}
                if "tool_output_template" in self.info
                else {}
            ),  # results are bare
        }

    @property
    def template_tools(self) -> list[dict] | None:
        """The function schemas the chat template described (the env left them out of its
        messages, ``info["tools_prompt"] == "template"``); None when the messages hold the
        tools' description themselves (or there are no tools)."""
        return self.info.get("tools") if self.info.get("tools_prompt") == "template" else None


@dataclass
class TrajectoryGroup:
    """G trajectories sampled for the same task (they share ``group_id``)."""

    task_id: str
    group_id: str
    trajectories: list[Trajectory] = field(default_factory=list)
    task_index: int | None = None
    """The task index it was sampled for (None where no index names the task, e.g. imported pairs)."""
    baseline: Trajectory | None = None
    """ReMax: a greedy (temperature 0) rollout of the same task, whose reward is the group's baseline."""

    @property
    def rewards(self) -> list[float]:
        return [t.reward for t in self.trajectories]
