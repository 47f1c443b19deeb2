"""The multi-turn rollout engine: ``Episode`` (one trajectory's state machine), its two
schedulers, ``rollout`` / ``continue_rollouts``, and ARPO's branching rollout."""

from agentic_rl.chat import ChatRenderer
from agentic_rl.rollout.engine import continue_rollouts, rollout
from agentic_rl.rollout.episode import Episode

__all__ = ["ChatRenderer", "Episode", "continue_rollouts", "rollout"]
