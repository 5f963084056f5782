"""The scenes of the video group, for the planner: drawn backdrops and objects on a
3 x 3 grid (``draw_scene``, ``draw_object``), and questions about a scene with their
answers (``visual_qa``). Randomness only from the generator passed in.
"""

from __future__ import annotations

import numpy as np

from venus.datagen import domains as dom
from venus.datagen.config import VideoConfig
from venus.datagen.domains import pick
from venus.datagen.plan import Backdrop, Colour, Scene, SceneObject, Shape

COLOURS: tuple[Colour, ...] = ("red", "green", "blue", "yellow", "orange", "purple", "black")
SHAPES: tuple[Shape, ...] = ("circle", "square", "triangle")
BACKDROPS: tuple[Backdrop, ...] = ("white", "light_grey", "beige", "light_blue")
PLACES = ("in the top left corner", "at the top", "in the top right corner", "on the left",
          "in the middle", "on the right", "in the bottom left corner", "at the bottom",
          "in the bottom right corner")  # fmt: skip
NUMBERS = ("no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def draw_scene(v: VideoConfig, rng: np.random.Generator) -> Scene:
    """A static scene: a backdrop and ``v.objects`` objects, each in its own grid cell."""
    n = int(rng.integers(v.objects[0], v.objects[1] + 1))
    cells = [int(c) for c in rng.permutation(9)[:n]]
    backdrop = pick(rng, BACKDROPS)
    return Scene(
        v.width_px,
        v.height_px,
        backdrop,
        tuple(draw_object(rng, f"o{k}", c) for k, c in enumerate(cells)),
    )


def draw_object(
    rng: np.random.Generator,
    name: str,
    cell: int,
    from_s: float = 0.0,
    thing: tuple[Shape, Colour] | None = None,
) -> SceneObject:
    """An object in grid ``cell``, shown from ``from_s``: ``thing`` (shape, colour), or
    drawn (one in five a sign with a word on it)."""
    shape, colour = thing or (
        pick(rng, SHAPES) if rng.random() < 0.8 else "sign",
        pick(rng, COLOURS),
    )
    row, col = divmod(cell, 3)
    x, y = (
        (col + 0.5 + rng.uniform(-0.15, 0.15)) / 3,
        (row + 0.5 + rng.uniform(-0.15, 0.15)) / 3,
    )
    text = pick(rng, dom.SIGNS) if shape == "sign" else ""
    size = round(float(rng.uniform(0.12, 0.2)), 3)
    return SceneObject(
        name, shape, colour, round(float(x), 3), round(float(y), 3), size, text, from_s, None
    )


def visual_qa(scene: Scene | None, rng: np.random.Generator) -> tuple[str, str]:
    """A question about the (static) scene, and its answer."""
    assert scene is not None
    objects = scene.objects
    shapes = [o.shape for o in objects]
    unique = [o for o in objects if shapes.count(o.shape) == 1 and o.shape != "sign"]
    kinds = [
        "count",
        *(["colour", "position"] if unique else []),
        *(["text"] if shapes.count("sign") == 1 else []),
    ]
    kind = pick(rng, kinds)
    facts: dict[str, str]
    if kind == "count":
        shape = pick(rng, SHAPES)
        n = shapes.count(shape)
        things = f"{NUMBERS[n]} {shape}{'' if n == 1 else 's'}"
        facts = {"shape": shape, "things": things, "are": "is" if n == 1 else "are"}
    elif kind == "text":
        facts = {"text": objects[shapes.index("sign")].text}
    else:
        o = pick(rng, unique)
        facts = {"shape": o.shape, "colour": o.colour, "where": PLACES[cell_of(o)]}
    asks, answers = dom.VISUAL[kind]
    return pick(rng, asks).format(**facts), pick(rng, answers).format(**facts)


def cell_of(o: SceneObject) -> int:
    """The 3 x 3 grid cell an object is in (0 top left ... 8 bottom right)."""
    return 3 * min(2, int(o.y * 3)) + min(2, int(o.x * 3))
