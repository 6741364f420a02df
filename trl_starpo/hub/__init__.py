"""Trained agents and their trajectories on the Hugging Face Hub: pushes (``push``) and cards (``cards``)."""

from .cards import AgentRecord, dataset_card, model_card
from .push import StarPOHubMixin, push_agent, push_tasks, push_trajectories_to_hub, write_tasks_card

__all__ = ["AgentRecord", "StarPOHubMixin", "dataset_card", "model_card", "push_agent", "push_tasks",
           "push_trajectories_to_hub", "write_tasks_card"]
