"""What the ALFRED world contains, read from the ``alfworld`` package itself.

ALFWorld's games are ALFRED scenes: 120 AI2-THOR floor plans (kitchens 1-30, living rooms 201-230, bedrooms
301-330, bathrooms 401-430). ``alfworld`` ships, for every floor plan, the object classes present
(``gen/layouts/FloorPlan<N>-objects.json``) and the receptacles with their ALFRED ids and interaction poses
(``FloorPlan<N>-openable.json``), and in ``alfworld.gen.constants`` the rules the ALFRED generator followed: which
object class may go into which receptacle class, which objects can be cleaned, heated, cooled or toggled, which
receptacles open, and which room types each task type is sampled in. This module turns that into plain data for the
game generator; nothing here is invented except the few defaults marked as such.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import alfworld.gen
from alfworld.gen import constants

__all__ = [
    "CLEANABLE",
    "COOLABLE",
    "HEATABLE",
    "LAMP",
    "LAMP_SURFACES",
    "MOVABLE_RECEPTACLES",
    "OPENABLE",
    "PICKUPABLE",
    "ROOM_TYPES",
    "SLICEABLE",
    "STATIC_RECEPTACLES",
    "TASK_ROOMS",
    "TASK_TYPES",
    "Receptacle",
    "Scene",
    "can_contain",
    "coordinate",
    "held_out_scenes",
    "load_scene",
    "room_type",
    "scene_numbers",
    "synthesized_receptacles",
]

LAYOUTS_DIR = Path(alfworld.gen.__file__).parent / "layouts"

TASK_TYPES = (
    "pick_and_place_simple",
    "look_at_obj_in_light",
    "pick_clean_then_place_in_recep",
    "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep",
    "pick_two_obj_and_place",
)
"""ALFWorld's six task types, in ALFWorld's order (task type ids 1-6)."""

ROOM_TYPES = {
    "Kitchen": range(1, 31),
    "LivingRoom": range(201, 231),
    "Bedroom": range(301, 331),
    "Bathroom": range(401, 431),
}

TASK_ROOMS = {task: frozenset(constants.GOALS_VALID[task]) for task in TASK_TYPES}
"""The room types ALFRED samples each task type in (``constants.GOALS_VALID``): heating and cooling in kitchens,
cleaning in kitchens and bathrooms, looking under a lamp in living rooms and bedrooms, the rest everywhere."""

_SLICED = {name for name in constants.OBJECTS_WSLICED if name.endswith("Sliced")}

STATIC_RECEPTACLES = frozenset(set(constants.VAL_RECEPTACLE_OBJECTS) - set(constants.MOVABLE_RECEPTACLES))
"""Receptacle classes that stay in place and can hold something (counter tops, cabinets, sink basins, ...)."""

MOVABLE_RECEPTACLES = frozenset(constants.MOVABLE_RECEPTACLES)
"""Objects that are also receptacles (bowls, mugs, pots, ...): picked up like objects, flagged
``isReceptacleObject``."""

PICKUPABLE = frozenset(set().union(*constants.VAL_RECEPTACLE_OBJECTS.values()) - _SLICED)
"""Object classes that some receptacle can hold, i.e. that can be picked up (sliced pieces excluded, as ALFWorld
does)."""

OPENABLE = frozenset(constants.OPENABLE_CLASS_SET & STATIC_RECEPTACLES)
CLEANABLE = frozenset(constants.VAL_ACTION_OBJECTS["Cleanable"] - _SLICED)
HEATABLE = frozenset(constants.VAL_ACTION_OBJECTS["Heatable"] - _SLICED)
COOLABLE = frozenset(constants.VAL_ACTION_OBJECTS["Coolable"] - _SLICED)
SLICEABLE = frozenset(constants.VAL_ACTION_OBJECTS["Sliceable"])

LAMP = "DeskLamp"
LAMP_SURFACES = ("Desk", "Dresser", "SideTable")
"""Where desk lamps stand (ALFRED has no containment rule for lamps; these are the surfaces they stand on in its
scenes). Floor lamps stand on the floor, which is no receptacle in the ALFWorld domain, so they are left out."""

# Default heights (metres) of receptacles a floor plan lists as present but gives no id for; an assumption, used
# only to write plausible ALFRED-style ids.
_HEIGHTS = {"CoffeeMachine": 0.90, "CounterTop": 0.95, "GarbageCan": 0.00, "StoveBurner": 0.92, "Toaster": 0.90,
            "Toilet": 0.00, "TowelHolder": 1.10, "HandTowelHolder": 1.40, "ToiletPaperHanger": 0.80,
            "SinkBasin": 0.80, "BathtubBasin": 0.30, "Microwave": 1.20, "Fridge": 0.00, "DiningTable": 0.75}
_SYNTHESIZED_COUNT = {"StoveBurner": 4}


def can_contain(receptacle: str, obj: str) -> bool:
    """Whether ALFRED lets an object of class ``obj`` be placed in a receptacle of class ``receptacle``."""
    if obj == LAMP:
        return receptacle in LAMP_SURFACES
    return obj in constants.VAL_RECEPTACLE_OBJECTS.get(receptacle, ())


def room_type(scene: int) -> str:
    """``Kitchen``, ``LivingRoom``, ``Bedroom`` or ``Bathroom`` for an ALFRED floor plan number."""
    for name, numbers in ROOM_TYPES.items():
        if scene in numbers:
            return name
    raise ValueError(f"FloorPlan{scene} is not an ALFRED floor plan.")


def scene_numbers() -> tuple[int, ...]:
    """Every floor plan with a layout in the installed ``alfworld``, sorted."""
    return tuple(sorted(int(path.name[len("FloorPlan"):-len("-objects.json")])
                        for path in LAYOUTS_DIR.glob("FloorPlan*-objects.json")))


def held_out_scenes() -> frozenset[int]:
    """ALFRED's test floor plans (``constants.TEST_SCENE_NUMBERS``: 1-6, 201-206, 301-306, 401-406)."""
    return frozenset(constants.TEST_SCENE_NUMBERS)


@dataclass(frozen=True)
class Receptacle:
    """A static receptacle: its ALFRED id (``Type|x|y|z``, sinks and bathtubs with a ``|...Basin`` suffix), its
    class and the agent pose (``x, z`` in 0.25 m grid steps, rotation / 90, camera horizon) where it is used."""

    id: str
    type: str
    pose: tuple[int, int, int, int]


@dataclass(frozen=True)
class Scene:
    """One ALFRED floor plan: its receptacles (those with ids) and the object classes present in it."""

    number: int
    receptacles: tuple[Receptacle, ...]
    present: frozenset[str]
    """Every class in the floor plan's object list (receptacles, objects and fixtures)."""
    bounds: tuple[float, float, float, float]
    """``min x, max x, min z, max z`` of the known receptacles, in metres."""

    @property
    def name(self) -> str:
        return f"FloorPlan{self.number}"

    @property
    def room_type(self) -> str:
        return room_type(self.number)

    @property
    def object_types(self) -> tuple[str, ...]:
        """Pickupable object classes present, plus ``DeskLamp`` where the scene has one; sorted."""
        types = (self.present & PICKUPABLE) | ({LAMP} & self.present)
        return tuple(sorted(types))


def _receptacle_type(receptacle_id: str) -> str:
    parts = receptacle_id.split("|")
    return parts[-1] if parts[-1].endswith("Basin") else parts[0]


@cache
def load_scene(number: int) -> Scene:
    """The floor plan ``number`` as ``alfworld`` ships it (cached)."""
    objects_file = LAYOUTS_DIR / f"FloorPlan{number}-objects.json"
    if not objects_file.is_file():
        raise ValueError(f"No layout for FloorPlan{number} in {LAYOUTS_DIR}.")
    present = set(json.loads(objects_file.read_text()))
    # A floor plan lists "Sink" and "SinkBasin" (the basin is the receptacle); the same for bathtubs.
    poses = json.loads((LAYOUTS_DIR / f"FloorPlan{number}-openable.json").read_text())
    receptacles = []
    for receptacle_id, (x, z, rotation, horizon) in sorted(poses.items()):
        kind = _receptacle_type(receptacle_id)
        if kind in STATIC_RECEPTACLES:
            pose = (round(x / constants.AGENT_STEP_SIZE), round(z / constants.AGENT_STEP_SIZE),
                    round(rotation / 90) % 4, int(horizon))
            receptacles.append(Receptacle(receptacle_id, kind, pose))
    coords = [tuple(float(v) for v in r.id.split("|")[1:4]) for r in receptacles] or [(0.0, 0.0, 0.0)]
    xs, zs = [c[0] for c in coords], [c[2] for c in coords]
    return Scene(number, tuple(receptacles), frozenset(present), (min(xs), max(xs), min(zs), max(zs)))


def synthesized_receptacles(scene: Scene, rng) -> list[Receptacle]:
    """Receptacles the floor plan lists as present without an id (stove burners, toilets, ...), with ids made up in
    ALFRED's form: one of each class (four stove burners), placed at random inside the scene's bounds."""
    known = {r.type for r in scene.receptacles}
    min_x, max_x, min_z, max_z = scene.bounds
    made = []
    for kind in sorted((scene.present & STATIC_RECEPTACLES) - known):
        for _ in range(_SYNTHESIZED_COUNT.get(kind, 1)):
            x, z = rng.uniform(min_x, max_x), rng.uniform(min_z, max_z)
            y = _HEIGHTS.get(kind, 0.50)
            base = "Sink" if kind == "SinkBasin" else "Bathtub" if kind == "BathtubBasin" else kind
            suffix = f"|{kind}" if kind.endswith("Basin") else ""
            receptacle_id = f"{base}|{coordinate(x)}|{coordinate(y)}|{coordinate(z)}{suffix}"
            pose = (round(x / constants.AGENT_STEP_SIZE) + rng.choice((-2, -1, 1, 2)),
                    round(z / constants.AGENT_STEP_SIZE) + rng.choice((-2, -1, 1, 2)),
                    rng.randrange(4), rng.choice((0, 30, 45, 60)))
            made.append(Receptacle(receptacle_id, kind, pose))
    return made


def coordinate(value: float) -> str:
    """An ALFRED id coordinate: sign, two integer digits, two decimals (``+01.25``, ``-00.40``)."""
    return format(round(value, 2) or 0.0, "+06.2f")
