"""Keys of the flat config layout (agentic-rl 0.1) and where each lives now. An old key is
an error naming its new home, never a silent alias: a config keeps one spelling."""

from __future__ import annotations

from typing import Any

_RL = (
    "steps",
    "tasks_per_step",
    "group_size",
    "mini_batches",
    "micro_batch_tokens",
    "skip_zero_advantage",
    "task_offset",
    "log_rollouts",
    "max_failed_fraction",
    "max_nonfinite_steps",
)

MOVED: dict[str, str] = {
    **{key: f"rl.{key}" for key in _RL},
    "ppo_epochs": "rl.epochs",
    "arpo": "rl.arpo",
    "kl_reference": "algorithm.kl.reference",
    "algorithm.rollout": "rl.sampling",
    "algorithm.max_generation_rounds": "rl.max_generation_rounds",
    "algorithm.overlong_buffer": "reward.overlong_buffer",
    "algorithm.tool_turn_reward": "reward.tool_turn_reward",
    "algorithm.kl_coef": "algorithm.kl.coef",
    "algorithm.kl_estimator": "algorithm.kl.estimator",
    "algorithm.kl_in_reward": "algorithm.kl.in_reward",
    "algorithm.value_loss_coef": "algorithm.critic.value_loss_coef",
    "algorithm.value_clip": "algorithm.critic.value_clip",
    "algorithm.critic_lr": "algorithm.critic.lr",
    "algorithm.rollout_correction": "algorithm.correction.kind",
    "algorithm.correction_cap": "algorithm.correction.cap",
    "algorithm.correction_low": "algorithm.correction.low",
    "algorithm.correction_high": "algorithm.correction.high",
    "algorithm.normalize_by_std": "algorithm.advantage.normalize_by_std",
    "algorithm.gamma": "algorithm.advantage.gamma",
    "algorithm.lam": "algorithm.advantage.lam",
    "algorithm.whiten_advantages": "algorithm.advantage.whiten",
    "algorithm.step_advantage_weight": "algorithm.advantage.step_advantage_weight",
    "algorithm.keep_fraction": "algorithm.group_filter.keep_fraction",
    "algorithm.clip_low": "algorithm.policy_loss.clip_low",
    "algorithm.clip_high": "algorithm.policy_loss.clip_high",
    "algorithm.clip_ratio_c": "algorithm.policy_loss.clip_ratio_c",
    "algorithm.gspo_clip_low": "algorithm.policy_loss.clip_low (with policy_loss.name gspo)",
    "algorithm.gspo_clip_high": "algorithm.policy_loss.clip_high (with policy_loss.name gspo)",
    "algorithm.cispo_clip_low": "algorithm.policy_loss.clip_low (with policy_loss.name cispo)",
    "algorithm.cispo_clip_high": "algorithm.policy_loss.clip_high (with policy_loss.name cispo)",
    "algorithm.sapo_tau_pos": "algorithm.policy_loss.tau_pos (with policy_loss.name sapo)",
    "algorithm.sapo_tau_neg": "algorithm.policy_loss.tau_neg (with policy_loss.name sapo)",
    "algorithm.clip_cov_ratio": "algorithm.policy_loss.cov_ratio (with policy_loss.name clip-cov)",
    "algorithm.clip_cov_lb": "algorithm.policy_loss.cov_lb (with policy_loss.name clip-cov)",
    "algorithm.clip_cov_ub": "algorithm.policy_loss.cov_ub (with policy_loss.name clip-cov)",
    "algorithm.kl_cov_ratio": "algorithm.policy_loss.cov_ratio (with policy_loss.name kl-cov)",
    "algorithm.kl_cov_coef": "algorithm.policy_loss.kl_coef (with policy_loss.name kl-cov)",
    "rollout.max_turns": "env.max_turns",
}
"""Old dotted key -> its new home (with what else it needs, where it is a function's parameter)."""

RETIRED: dict[str, tuple[Any, str]] = {
    "rollout.max_turns": (16, "the env's max_turns is the one turn limit of an episode"),
}
"""Moved keys of the nested layout that every run written before the move saved (each
resolved config holds them): their old default and why they moved. ``--resume`` drops
one left at that default (config/resume.py)."""


_TERMS = "the reward section weighs every shaping term an env reports"
ENV_OPTIONS_MOVED: dict[str, str] = {
    "format_reward": f"reward.format_weight (added to the outcome when info['format_ok'] holds; {_TERMS})",
    "plan_reward": f"reward.terms.plan (with plan_first; added to the outcome, no longer mixed in; {_TERMS})",
    "evidence_reward": f"reward.terms.evidence (added to the outcome, no longer mixed in; {_TERMS})",
    "info_gain_reward": f"reward.terms.info_gain ({_TERMS})",
    "repeat_penalty": f"reward.terms.repeat, a negative weight: the term counts repeated queries ({_TERMS})",
    "step_penalty": f"reward.terms.step, a negative weight: the term counts moves ({_TERMS})",
    "box_reward": f"reward.terms.box ({_TERMS})",
    "invalid_penalty": f"reward.terms.invalid, a negative weight: the term counts invalid replies ({_TERMS})",
    "test_progress_reward": f"reward.terms.test_progress, with test_progress: true ({_TERMS})",
}
"""Env options that were reward shaping, and the ``reward`` key that weighs their term now."""


def moved_key(data: dict[str, Any], prefix: str = "") -> str | None:
    """The first old key in ``data`` (a nested config dict) as one message
    (``"group_size: moved to rl.group_size"``), or None."""
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if dotted in MOVED:
            why = RETIRED[dotted][1] if dotted in RETIRED else "the config is nested since agentic-rl 0.2"
            return f"{dotted}: moved to {MOVED[dotted]} ({why})"
        if isinstance(value, dict) and dotted in ("algorithm", "rollout"):
            found = moved_key(value, f"{dotted}.")
            if found:
                return found
    return None
