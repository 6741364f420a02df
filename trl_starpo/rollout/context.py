"""The context policy: what the model is given at each turn.

``full`` (the specification's StarPO) gives the whole episode so far: the trajectory's own token ids. ``window``
gives the system prompt and the task (the first observation), then only the last ``history_turns`` turns (each the
model's response and the observation that answered it, which ends with the current state), so a turn's input stays
bounded however long the episode runs. Contexts are token ids built from pieces, never re-tokenized as a whole:
with ``history_thinking`` a piece is exactly the episode's own tokens, so a window that holds every turn gives the
same tokens as ``full``; without it, earlier turns show only their answer (its text tokenized again; the tokens the
model sampled are kept, and trained on, in the trajectory).
"""

from __future__ import annotations

CONTEXT_POLICIES = ("full", "window")

EARLIER_TURNS_NOTE = "(Earlier turns are not shown; your most recent {count} follow.)"


class HistoryWindow:
    """One trajectory's bounded context under the ``window`` policy.

    Args:
        head: The first prompt (system prompt and first observation, through the chat template), as token ids.
        cut_head: The same prompt whose first observation ends with ``EARLIER_TURNS_NOTE``: it opens every context
            from which turns were dropped.
        opening: The tokens that open every response (the prefilled tag), last in every context.
        history_turns: Turns kept.
    """

    def __init__(self, head: list[int], cut_head: list[int], opening: list[int], history_turns: int):
        self.head, self.cut_head, self.opening = head, cut_head, opening
        self.history_turns = history_turns
        self.pieces: list[list[int]] = []

    def add_turn(self, piece: list[int]) -> None:
        """Record a finished turn: its response as later contexts show it, the glue, the next observation and the
        template that opens the next response (``opening`` excluded)."""
        self.pieces.append(piece)

    def context(self, pieces: list[list[int]] | None = None) -> list[int]:
        """The tokens the model is given for its next turn (with ``pieces`` in place of the recorded ones)."""
        pieces = self.pieces if pieces is None else pieces
        shown = pieces[-self.history_turns :]
        head = self.head if len(pieces) <= self.history_turns else self.cut_head
        return head + [token for piece in shown for token in piece] + self.opening

    def next_length(self, piece: list[int]) -> int:
        """How long the next context would be after ``piece`` is added."""
        return len(self.context(self.pieces + [piece]))
