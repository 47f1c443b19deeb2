"""agentic-rl: reinforcement learning for tool-using LLM agents."""

__version__ = "0.1.0"
