"""Planning a run before it starts: per-device memory from the model's shape and the
run's settings (``agentic-rl plan``)."""

from agentic_rl.planning.memory import MemoryPlan, PlanSettings, advice, plan_memory
from agentic_rl.planning.shapes import KNOWN_CONFIGS, ModelShape, model_shape

__all__ = ["KNOWN_CONFIGS", "MemoryPlan", "ModelShape", "PlanSettings", "advice", "model_shape", "plan_memory"]
