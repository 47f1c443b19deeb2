"""Chat templates of model families: the thinking policy, template drift, and the checks
``agentic-rl doctor`` runs on a model's template."""

from agentic_rl.templates.drift import template_drift_tokens
from agentic_rl.templates.thinking import THINKING_POLICIES, strip_reasoning, thinking_context

__all__ = ["THINKING_POLICIES", "strip_reasoning", "template_drift_tokens", "thinking_context"]
