"""A stand-in for vLLM in tests: the same server entry point, a scripted model."""

__version__ = "0.32.0"
