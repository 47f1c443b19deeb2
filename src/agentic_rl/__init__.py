"""agentic-rl: reinforcement learning for tool-using LLM agents."""

__version__ = "0.2.0"


def train(config, **kwargs):
    """Run a training job (see ``agentic_rl.training.pipeline.train``); mirrors ``agentic-rl train``."""
    from agentic_rl.training.pipeline import train as _train

    return _train(config, **kwargs)


def evaluate(config=None, **kwargs):
    """Evaluate a policy (see ``agentic_rl.evaluation.evaluate``); mirrors ``agentic-rl eval``."""
    from agentic_rl.evaluation.harness import evaluate as _evaluate

    return _evaluate(config, **kwargs)
