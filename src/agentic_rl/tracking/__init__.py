"""Metric sinks and displays. Displays subscribe to engine events; they never live in rollout or loss code."""
