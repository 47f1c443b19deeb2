"""Training: batch collation, log-probs at loss positions, optimizers, SFT and the RL trainer."""
