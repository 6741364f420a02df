"""The expert's thinking, grounded in what the agent has seen: ReAct-style reasons for the planner's commands.

The planner sees the whole game, so its commands may go straight to an object the agent has never seen. The
thinking of a demonstration must not: a model trained to write "take laptop 6 from desk 1" before it has looked at
desk 1 learns to recite plans instead of reading. So the expert's thinking names only what the observations so far
have shown (the room's receptacles, what a visit or an opened receptacle revealed, what the agent holds) and the
goal's words, for instance::

    <think>Task: put a hot bread in fridge. I need a bread; I have not seen one. Try garbagecan 1.</think>
    <answer>go to garbagecan 1</answer>
    <think>Task: put a hot bread in fridge. The garbagecan 1 has bread 1. Take it.</think>
    <answer>take bread 1 from garbagecan 1</answer>
    <think>Task: put a hot bread in fridge. I hold bread 1; it must be hot. Go to microwave 1.</think>

``Sightings`` keeps what the agent has observed; ``grounded_thinking`` words the reason for one command.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

__all__ = ["Goal", "Sightings", "acted_on_receptacle", "grounded_thinking", "parse_goal", "named_things"]

_NAMED = re.compile(r"\b([a-z]+) (\d+)\b")
_SEEN_LIST = re.compile(r"you see (.*?)\.(?:\s|$)")
_ON_THE = re.compile(r"^On the ([a-z]+ \d+), you see (.*?)\.(?:\s|$)")
_ARRIVE = re.compile(r"^You arrive at (.+?)\.")
_PICK_UP = re.compile(r"^You pick up the (.+?) from the (.+?)\.")
_MOVE = re.compile(r"^You move the (.+?) to the (.+?)\.")
_TREAT = re.compile(r"^You (heat|cool|clean) the (.+?) using the (.+?)\.")
_OPEN = re.compile(r"^You open the (.+?)\.")
_AT_RECEPTACLE = re.compile(
    r"^(?:take \S+ \d+ from|open|close|move \S+ \d+ to|heat \S+ \d+ with|cool \S+ \d+ with|clean \S+ \d+ with) "
    r"([a-z]+ \d+)$"
)
_GOALS = (
    (re.compile(r"^put (?:a|some) (clean|hot|cool) (\w+) (?:in|on) (\w+)$"), "treat"),
    (re.compile(r"^(clean|heat|cool) some (\w+) and put it in (\w+)$"), "treat"),
    (re.compile(r"^(?:put|find) two (\w+) (?:in|and put them in) (\w+)$"), "two"),
    (re.compile(r"^look at (\w+) under the (\w+)$"), "look"),
    (re.compile(r"^examine the (\w+) with the (\w+)$"), "look"),
    (re.compile(r"^put (?:a|some) (\w+) (?:in|on) (\w+)$"), "place"),
)
_TREATMENT = {"clean": "clean", "hot": "heat", "heat": "heat", "cool": "cool"}
_ADJECTIVE = {"clean": "clean", "heat": "hot", "cool": "cool"}


def named_things(text: str) -> set[str]:
    """The objects and receptacles ``text`` names as ALFWorld does, with their number: ``{"apple 1", "desk 2"}``."""
    return {f"{kind} {number}" for kind, number in _NAMED.findall(text)}


def acted_on_receptacle(command: str) -> str | None:
    """The receptacle a command acts on where the agent must stand (``take x 1 from desk 1`` -> ``desk 1``)."""
    match = _AT_RECEPTACLE.match(command)
    return match.group(1) if match else None


@dataclass(frozen=True)
class Goal:
    """An ALFWorld task as its description words it: the object class, where it goes, and what happens first."""

    text: str
    target: str | None = None
    destination: str | None = None
    treatment: str | None = None  # "heat", "cool" or "clean"
    lamp: str | None = None
    count: int = 1


def parse_goal(text: str) -> Goal:
    """Read ALFWorld's templated task description (an unknown wording gives a goal with only its text)."""
    text = text.strip().rstrip(".")
    for pattern, kind in _GOALS:
        match = pattern.match(text)
        if not match:
            continue
        if kind == "treat":
            return Goal(text, match.group(2), match.group(3), _TREATMENT[match.group(1)])
        if kind == "two":
            return Goal(text, match.group(1), match.group(2), count=2)
        if kind == "look":
            return Goal(text, match.group(1), lamp=match.group(2))
        return Goal(text, match.group(1), match.group(2))
    return Goal(text)


@dataclass
class Sightings:
    """What the agent has observed in one episode: where it stands, what it holds, what each receptacle showed."""

    location: str | None = None
    holding: str | None = None
    contents: dict[str, list[str]] = field(default_factory=dict)
    treated: set[str] = field(default_factory=set)
    placed: list[str] = field(default_factory=list)
    text: str = ""

    def observe(self, feedback: str) -> None:
        """Take in one observation (the first one, or a command's feedback)."""
        self.text += "\n" + feedback
        if match := _ARRIVE.match(feedback):
            self.location = match.group(1)
        elif match := _PICK_UP.match(feedback):
            self.holding = match.group(1)
            place = self.contents.get(match.group(2))
            if place and self.holding in place:
                place.remove(self.holding)
        elif match := _MOVE.match(feedback):
            self.contents.setdefault(match.group(2), []).append(match.group(1))
            self.placed.append(match.group(1))
            self.holding = None
        elif match := _TREAT.match(feedback):
            self.treated.add(match.group(2))
        opened = _OPEN.match(feedback)
        looked_at = self.location if _ARRIVE.match(feedback) else opened.group(1) if opened else None
        if looked_at and (seen := _SEEN_LIST.search(feedback)):
            self.contents[looked_at] = sorted(named_things(seen.group(1)))
        elif examined := _ON_THE.match(feedback):  # `examine <receptacle>`
            self.contents[examined.group(1)] = sorted(named_things(examined.group(2)))

    def where_seen(self, kind: str) -> str | None:
        """A receptacle where an object of ``kind`` was last seen and not taken since, if any."""
        for receptacle, things in self.contents.items():
            if any(thing.split()[0] == kind and thing not in self.placed for thing in things):
                return receptacle
        return None


def _kind(name: str) -> str:
    return name.rsplit(" ", 1)[0]


def grounded_thinking(goal: Goal, seen: Sightings, command: str) -> str:
    """The reason for ``command`` in the state ``seen`` describes, naming only what ``seen`` has observed."""
    head = f"Task: {goal.text}."
    words = command.split()
    if not words:
        return f"{head} Look around."
    verb = words[0]
    target = goal.target or "object"
    if verb == "go" and command.startswith("go to "):
        return f"{head} {_reason_to_go(goal, seen, command[len('go to '):])}"
    if verb == "examine":
        return f"{head} I need a {target}. Look at the {command[8:]}."
    if verb == "open":
        return f"{head} The {command[5:]} is closed. Open it and look inside."
    if verb == "take" and (match := re.match(r"take (.+) from (.+)$", command)):
        thing, place = match.groups()
        return f"{head} The {place} has {thing}. Take it."
    if verb in ("heat", "cool", "clean") and (match := re.match(r"\w+ (.+) with (.+)$", command)):
        thing, appliance = match.groups()
        return f"{head} I hold {thing} at the {appliance}. {verb.capitalize()} it."
    if verb == "move" and (match := re.match(r"move (.+) to (.+)$", command)):
        thing, place = match.groups()
        if goal.count == 2 and not any(_kind(done) == _kind(thing) for done in seen.placed):
            return f"{head} Put {thing} in the {place}; then find a second {target}."
        return f"{head} Put {thing} in the {place}."
    if verb == "use":
        return f"{head} I hold {seen.holding or 'the ' + target} and the {command[4:]} is here. Turn it on."
    return f"{head} Look around."


def _reason_to_go(goal: Goal, seen: Sightings, place: str) -> str:
    target = goal.target or "object"
    holding = seen.holding
    if holding is None:
        prefix = ""
        if goal.count == 2 and seen.placed:
            prefix = f"One {target} is in place; I need another. "
        here = seen.contents.get(seen.location or "")
        if not prefix and here is not None and goal.target and not any(
                _kind(thing) == target and thing not in seen.placed for thing in here):
            prefix += f"The {seen.location} has no {target}. "
        found = seen.where_seen(target) if goal.target else None
        if found == place:
            return f"{prefix}I saw a {target} at {place}. Go there."
        if prefix:
            return f"{prefix}Try {place}."
        return f"{prefix}I need a {target}; I have not seen one to take. Try {place}."
    if goal.treatment and holding not in seen.treated:
        return f"I hold {holding}; it must be {_ADJECTIVE[goal.treatment]}. Go to {place}."
    if goal.lamp:
        if goal.lamp in {_kind(thing) for thing in seen.contents.get(place, [])}:
            return f"I hold {holding}. I saw a {goal.lamp} at {place}. Go there."
        return f"I hold {holding}; now find a {goal.lamp}. Try {place}."
    return f"I hold {holding}; it goes in a {goal.destination or 'receptacle'}. Go to {place}."
