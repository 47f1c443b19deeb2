"""The ``reward`` section of a training config: the terms the trainer adds to the env's
outcome reward: for every env (``agentic_rl.rewards.episode``) format, tool costs, the
two-stage schedule, overlong shaping and the per-turn tool reward; the weights of the
terms an env reports by name (``agentic_rl.envs.terms``)."""

from __future__ import annotations

from pydantic import Field, field_validator

from agentic_rl.config.base import Section


class TwoStageConfig(Section):
    """R1-Searcher's two-stage reward: retrieval and format first, the answer from ``switch_step`` on."""

    switch_step: int | None = Field(None, ge=0)
    """RL step at which stage 2 (the answer's reward) starts; None = off (the env's reward throughout)."""
    retrieval_tool: str = "search"
    """Stage 1 pays an episode with at least one call of this tool that ran."""
    retrieval_reward: float = 0.5
    """Stage 1: reward for retrieving at least once."""
    format_reward: float = 0.5
    """Stage 1: reward for following the env's format."""
    format_penalty: float = Field(2.0, ge=0.0)
    """Stage 2: subtracted from the env's reward when the format was broken."""


class RewardConfig(Section):
    """Terms added to every episode's reward (after the env's outcome, before advantages)."""

    format_weight: float = 0.0
    """Added times 1 when the episode followed its env's format (the env's info["format_ok"] on every step, else: answered, no malformed tool call)."""
    tool_costs: dict[str, float] = Field(default_factory=dict)
    """Subtracted per tool call, by tool name (e.g. {search: 0.05}); the key "*" covers every tool not named."""
    two_stage: TwoStageConfig = Field(default_factory=TwoStageConfig)
    """R1-Searcher's two-stage schedule (off unless two_stage.switch_step is set)."""
    overlong_buffer: int = Field(0, ge=0)
    """DAPO's soft overlong punishment: tokens before the length limit (rollout.max_total_tokens) where a penalty ramps to -1 (0 = off)."""
    terms: dict[str, float] = Field(default_factory=dict)
    """Weights of the named terms the env reports (agentic_rl.envs.terms), e.g. {evidence: 0.3, repeat: -0.1}: episode terms add to the episode's reward, turn terms to that turn's process reward; a term left out weighs 0. `agentic-rl envs NAME` lists an env's terms."""
    tool_turn_reward: float = 0.0
    """Per-turn process reward for a turn whose tool calls all ran (added to the env's info["turn_reward"]; MT-GRPO's tool-execution reward, read by turn-level advantages)."""

    @field_validator("tool_costs", "terms")
    @classmethod
    def _finite(cls, values: dict[str, float]) -> dict[str, float]:
        for name, value in values.items():
            if value != value or abs(value) == float("inf"):
                raise ValueError(f"the value of {name!r} must be a finite number, got {value}")
        return values
