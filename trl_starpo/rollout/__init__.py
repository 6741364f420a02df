"""The agent-environment loop: generation backends, response parsing and the batched multi-turn collector."""
