"""The multi-turn rollout engine and its backends."""

from agentic_rl.rollout.chat import ChatRenderer
from agentic_rl.rollout.engine import RolloutLimits, rollout

__all__ = ["ChatRenderer", "RolloutLimits", "rollout"]
