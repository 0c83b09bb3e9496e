"""Grokking-Insight's ResNet grokking dataset (resnet/data_gen.py): count the sides.

A white 224 px image is a 2x2 grid of 112 px cells; each cell is blank or holds a regular
polygon with 3..12 sides, drawn in black with spokes from its centre to every vertex. All
11^4 = 14,641 combinations exist once; the label is the total number of sides (blank = 0),
so labels are 0 or 3..48 (49 classes). A random train_frac of the images is trained on
(0.25 -> 3,660, as in the paper) and the rest is the test set.

Geometry as their code draws it: vertex k of an n-gon sits at angle 2*pi*k/n from the
cell's centre. Their radius clamp compares every centre with the first cell's bounds, so
the top-left polygon has radius 46 while the other three get radius -56: drawn rotated by
180 degrees, with a vertex touching the cell's edge. We reproduce that picture; the
default pipeline leaves out their JPEG compression and transform, pipeline=insight applies
them. Other resolutions are that picture area-averaged down (or drawn on a canvas that many
times larger, lines as thick), so a 32 px image is the paper's image seen at 32 px: thin
lines become gray, and nothing is redrawn differently.

Rendering all images takes a few seconds; the result is cached on disk, one file per
resolution, in $SUITE_CACHE (default ~/.cache/grokking-suite), written atomically so
concurrent runs are safe. Images are kept as uint8 (N, 1, H, W) gray pixels: at 224 px
that is 735 MB instead of 8.8 GB of float RGB; models convert them (pipeline=insight keeps
their three JPEG channels: 2.2 GB at 224 px).

Settings: `resolution` px (32 by default, 224 as in the paper; smaller sizes are the 224 px
picture area-averaged), `train_frac` (0.25), `n_val=N` (evaluate on N of the test images only,
to make evaluations cheaper on a CPU). `pipeline=insight` gives what their ResNet trained on: the
RGB picture through a JPEG round trip (PIL's default quality, as their data_gen.py saves it),
Resize(256) and CenterCrop(224) (which cuts the upscaled picture's borders), three uint8
channels; at other resolutions that 224 px input is area-averaged (ours). Their training is
`--model resnet18 --set n_outputs=52` (their classifier) with `--sampler epoch --set
batch_size=200` (their epochs: 18 x 200 + 60). Every run's metrics.jsonl also has
`train_acc_running`, their train accuracy: the batches as trained on (train mode, before each
update) since the last evaluation, beside `train_acc` (the whole training set, eval mode).
suite/grids/polygons_gpu.toml is their run, from scratch (no weights can be downloaded; `--set
weights=PATH` with a local copy of torchvision's file runs the pretrained setting): a GPU job.

    python -m suite run --task polygons --model resnet18 --set resolution=32
    python -m suite run --task polygons --model mlp                              # the same images, flattened
"""

from __future__ import annotations

import io
import itertools
import math
import sys
import time
from collections.abc import Sequence
from typing import Literal, Optional

import numpy as np
import torch
from PIL import Image, ImageDraw

from suite import SuiteError, register_task
from suite.cache import cache_dir
from suite.results.rundir import write_atomic
from suite.specs.data import TaskData

SIDES = (0, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12)  # 0 = blank cell
CANVAS = 224  # the paper's image size
CELL = CANVAS // 2
N_CLASSES = 4 * max(SIDES) + 1  # labels 0..48
RENDER_VERSION = 1  # bump when the drawing changes, so stale caches are not read


def cell_polygon(cell: int, sides: int, scale: int = 1) -> tuple[tuple[float, float], list[tuple[float, float]]]:
    """Centre and vertices of cell `cell`'s polygon (cells 0..3 row by row), on a canvas `scale` x 224."""
    cx, cy = (CELL // 2 + CELL * (cell % 2)) * scale, (CELL // 2 + CELL * (cell // 2)) * scale
    radius = (46 if cell == 0 else -56) * scale  # their clamp's outcome, see the module docstring
    vertices = [
        (cx + radius * math.cos(2 * math.pi * k / sides), cy + radius * math.sin(2 * math.pi * k / sides))
        for k in range(sides)
    ]
    return (cx, cy), vertices


def render(cells: Sequence[int], resolution: int) -> np.ndarray:
    """One image (resolution x resolution, uint8 gray, white 255) for the 4 cells' numbers of sides."""
    scale = -(-resolution // CANVAS)  # draw on 224 px, or on a multiple of it for larger images
    image = Image.new("L", (CANVAS * scale, CANVAS * scale), 255)
    draw = ImageDraw.Draw(image)
    for cell, sides in enumerate(cells):
        if sides == 0:
            continue
        centre, vertices = cell_polygon(cell, sides, scale)
        draw.polygon(vertices, outline=0, fill=255, width=scale)
        for vertex in vertices:
            draw.line([centre, vertex], fill=0, width=scale)
    if image.size[0] != resolution:
        image = image.resize((resolution, resolution), Image.Resampling.BOX)  # area average
    return np.array(image)


def insight_image(cells: Sequence[int], resolution: int = CANVAS) -> np.ndarray:
    """One image as Grokking-Insight trained on it, (resolution, resolution, 3) uint8 RGB: their
    224 px RGB picture saved as JPEG (PIL's default quality, 75, as their data_gen.py saves it)
    and read back, then their transform's Resize(256) (bilinear, as torchvision does on a PIL
    image) and CenterCrop(224), which cuts 16 px off every side of the upscaled picture. Their
    ToTensor and ImageNet normalisation happen in the model (resnet18), on the uint8 pixels. At
    another resolution the 224 px result is area-averaged down (ours: they ran 224 px only)."""
    image = Image.fromarray(render(cells, CANVAS)).convert("RGB")
    buffer = io.BytesIO()
    image.save(buffer, format="JPEG")
    image = Image.open(io.BytesIO(buffer.getvalue())).convert("RGB")
    image = image.resize((256, 256), Image.Resampling.BILINEAR)
    margin = round((256 - CANVAS) / 2)
    image = image.crop((margin, margin, margin + CANVAS, margin + CANVAS))
    if resolution != CANVAS:
        image = image.resize((resolution, resolution), Image.Resampling.BOX)
    return np.array(image)


def all_cells() -> torch.Tensor:
    """Every combination, (14641, 4), in the order of their generator (first cell slowest)."""
    return torch.tensor(list(itertools.product(SIDES, repeat=4)))


def load_images(resolution: int, pipeline: str = "suite") -> torch.Tensor:
    """All 14,641 images as uint8 (N, C, resolution, resolution), C = 1 (suite) or 3 (insight):
    from the cache, or rendered once."""
    name = "polygons" if pipeline == "suite" else f"polygons-{pipeline}"
    path = cache_dir() / f"{name}-v{RENDER_VERSION}-{resolution}px.pt"
    expected = (len(SIDES) ** 4, 1 if pipeline == "suite" else 3, resolution, resolution)
    if path.exists():
        try:
            images = torch.load(path, weights_only=True)
            if tuple(images.shape) == expected and images.dtype == torch.uint8:
                return images
        except Exception:  # a damaged cache file: render again and replace it
            pass
        print(f"polygons: cache {path} is unreadable; rendering again", file=sys.stderr)
    print(f"polygons: rendering {expected[0]} images at {resolution} px into {path} (once)", file=sys.stderr)
    if pipeline == "suite":
        images = torch.from_numpy(rendered(lambda c: render(c, resolution)))[:, None]
    else:
        images = torch.from_numpy(rendered(lambda c: insight_image(c, resolution))).permute(0, 3, 1, 2)
        images = images.contiguous()
    buffer = io.BytesIO()
    torch.save(images, buffer)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, buffer.getvalue())
    except OSError as err:  # a read-only home is no reason to fail the run
        print(f"polygons: could not write the cache ({err}); continuing without it", file=sys.stderr)
    return images


def rendered(draw, every_s: float = 10.0) -> np.ndarray:
    """Every combination's image, drawn in order, with a line every every_s seconds: on a busy
    CPU the render takes a minute or more, and a silent minute looks like a hang."""
    cells, images, last = all_cells().tolist(), [], time.monotonic()
    for i, c in enumerate(cells, 1):
        images.append(draw(c))
        if time.monotonic() - last >= every_s:
            last = time.monotonic()
            print(f"polygons: {i:,} of {len(cells):,} images rendered", file=sys.stderr, flush=True)
    return np.stack(images)


@register_task("polygons", gives="image")
def polygons(
    seed: int,
    *,
    resolution: int = 32,
    train_frac: float = 0.25,
    n_val: Optional[int] = None,
    data_seed: Optional[int] = None,
    pipeline: Literal["suite", "insight"] = "suite",
) -> TaskData:
    """2x2 grid of regular polygons (Grokking-Insight); label = total number of sides. pipeline=insight:
    their JPEG + transform.

    pipeline="suite": the clean picture, gray, one channel, area-averaged to `resolution`.
    pipeline="insight": what their ResNet trained on (insight_image): RGB, a JPEG round trip,
    Resize(256) + CenterCrop(224); at 224 px that is their input exactly, at other resolutions
    it is area-averaged down (ours). Their split is train_frac 0.25: 3,660 images trained on,
    the other 10,981 the test set; theirs was drawn unseeded (torch random_split), ours by the
    run's seed (or data_seed). Their 52-way classifier is resnet18's n_outputs=52.
    """
    if not 8 <= resolution <= 1024:
        raise SuiteError(f"resolution must be in [8, 1024] px, got {resolution}")
    if not 0 < train_frac < 1:
        raise SuiteError(f"train_frac must be in (0, 1), got {train_frac}")
    if data_seed is not None and data_seed < 0:
        raise SuiteError(f"data_seed must be >= 0 (or None: the run's seed), got {data_seed}")
    cells = all_cells()
    total = len(cells)
    n_train = int(train_frac * total)  # 0.25 -> 3,660 as in the paper
    if n_val is not None and not 0 < n_val <= total - n_train:
        raise SuiteError(f"n_val must be in [1, {total - n_train}] (the images not trained on), got {n_val}")
    images, labels = load_images(resolution, pipeline), cells.sum(dim=1)
    g = torch.Generator().manual_seed(seed if data_seed is None else data_seed)
    perm = torch.randperm(total, generator=g)
    train = perm[:n_train].sort().values
    val = perm[n_train:][:n_val].sort().values  # n_val None = the whole rest (the paper's test set)
    return TaskData(
        x_train=images[train],
        y_train=labels[train],
        x_val=images[val],
        y_val=labels[val],
        kind="image",
        n_classes=N_CLASSES,
        info={
            "n_train": len(train),
            "n_val": len(val),
            "n_images": total,
            "resolution": resolution,
            "pipeline": pipeline,
        },
    )
