"""The HotPotQA answer metric, a local ``evaluate`` module (see ``hotpotqa_answer.py``)."""
