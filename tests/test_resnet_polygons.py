"""The polygon dataset (labels by construction, size, cache) and the ResNet-18 / MLP on images."""

import json
import math

import numpy as np
import pytest
import suite.tasks.polygons as polygons_module
import torch
import torchvision
from conftest import as_cells
from suite.models import resnet as resnet_module
from suite.models.mlp import MLP
from suite.models.resnet import ResNet18
from suite.tasks.polygons import CANVAS, SIDES, all_cells, cell_polygon, insight_image, load_images, polygons, render

from suite import SuiteError, build
from suite.engine.member import Member
from suite.engine.plan import stacks
from suite.engine.train import train
from suite.specs.spec import resolve

RES = 16  # the dataset is rendered once per session at this size (a few seconds)


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    path = tmp_path_factory.mktemp("suite-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SUITE_CACHE", str(path))
        yield path


@pytest.fixture(scope="module")
def data(cache):
    return polygons(0, resolution=RES)


def count_spokes(image: np.ndarray, cell: int) -> int:
    """Dark runs met on a circle around the cell's centre, inside every polygon's inner circle
    (a regular n-gon's inradius is >= half its radius): there a circle crosses only the n
    spokes drawn from the centre to the n vertices. A blank cell gives 0."""
    (cx, cy), _ = cell_polygon(cell, 3)
    r = 0.4 * 46
    angles = np.linspace(0, 2 * np.pi, 1440, endpoint=False)
    x, y = cx + r * np.cos(angles), cy + r * np.sin(angles)
    # a point is dark when any of its 4 surrounding pixels is: a 1 px diagonal line cannot slip between samples
    dark = (
        np.min(
            [
                image[yy.astype(int), xx.astype(int)]
                for xx in (np.floor(x), np.ceil(x))
                for yy in (np.floor(y), np.ceil(y))
            ],
            axis=0,
        )
        < 128
    )
    return int(np.sum(dark & ~np.roll(dark, 1))) if not dark.all() else -1


def test_every_cell_shows_as_many_spokes_as_sides():
    for cell in range(4):
        for sides in SIDES:
            cells = [0, 0, 0, 0]
            cells[cell] = sides
            image = render(cells, CANVAS)
            assert count_spokes(image, cell) == sides, (cell, sides)
            assert image[image < 128].size > 0 if sides else (image == 255).all()


def test_labels_are_the_sides_counted_in_what_was_drawn(data):
    """Label = the sides counted in the paper-size drawing, and the dataset's images are those drawings."""
    cells = all_cells()
    labels = cells.sum(dim=1)
    images = load_images(RES)
    for index in torch.randperm(len(cells), generator=torch.Generator().manual_seed(1))[:40].tolist():
        drawn = render(cells[index].tolist(), CANVAS)
        assert sum(count_spokes(drawn, cell) for cell in range(4)) == labels[index]
        assert np.array_equal(images[index, 0].numpy(), render(cells[index].tolist(), RES))
    for j in range(0, len(data.x_train), 400):  # the task pairs each image with its own label
        same = (images[:, 0] == data.x_train[j, 0]).flatten(1).all(dim=1)
        assert set(labels[same].tolist()) == {data.y_train[j].item()}


def test_dataset_size_split_and_classes(data):
    assert len(all_cells()) == 11**4 == 14_641
    assert data.kind == "image" and data.n_classes == 49
    assert data.x_train.shape == (3660, 1, RES, RES) and data.x_val.shape == (14_641 - 3660, 1, RES, RES)
    assert data.x_train.dtype == torch.uint8
    labels = set(torch.cat([data.y_train, data.y_val]).tolist())
    assert labels == {0} | set(range(3, 49))
    assert data.info == {"n_train": 3660, "n_val": 10_981, "n_images": 14_641, "resolution": RES, "pipeline": "suite"}
    again = polygons(0, resolution=RES)
    assert torch.equal(again.x_train, data.x_train) and torch.equal(again.y_val, data.y_val)
    other = polygons(1, resolution=RES)
    assert not torch.equal(other.y_train, data.y_train)
    assert len(polygons(0, resolution=RES, n_val=100).y_val) == 100


def test_cache_is_written_once_and_reused(cache, data, monkeypatch):
    files = list(cache.glob("polygons-*.pt"))
    assert [f.name for f in files] == [f"polygons-v{polygons_module.RENDER_VERSION}-{RES}px.pt"]
    stamp = files[0].stat().st_mtime_ns

    def no_rendering(*args, **kwargs):
        raise AssertionError("rendered although the cache holds the images")

    monkeypatch.setattr(polygons_module, "render", no_rendering)
    again = polygons(0, resolution=RES)
    assert torch.equal(again.x_train, data.x_train) and files[0].stat().st_mtime_ns == stamp


def test_bad_settings(cache):
    with pytest.raises(SuiteError, match="resolution"):
        polygons(0, resolution=4)
    with pytest.raises(SuiteError, match="train_frac"):
        polygons(0, train_frac=1.0)
    with pytest.raises(SuiteError, match="n_val"):
        polygons(0, resolution=RES, n_val=20_000)


def test_resnet_stem_follows_image_size(data):
    small = ResNet18(data)
    assert small.net.conv1.kernel_size == (3, 3) and small.net.conv1.stride == (1, 1)
    assert isinstance(small.net.maxpool, torch.nn.Identity) and small.net.fc.out_features == 49
    assert small(data.x_train[:4]).shape == (4, 49)
    big = ResNet18(_images(96))
    assert big.net.conv1.kernel_size == (7, 7) and isinstance(big.net.maxpool, torch.nn.MaxPool2d)
    assert ResNet18(data, stem="imagenet").net.conv1.stride == (2, 2)


def test_resnet_evaluates_big_splits_in_chunks(data, monkeypatch):
    model = ResNet18(data).eval()
    x = data.x_val[:12]
    with torch.no_grad():
        whole = model(x)
        monkeypatch.setattr(resnet_module, "EVAL_PIXELS", 5 * RES * RES)  # chunks of 5 images
        torch.testing.assert_close(model(x), whole, rtol=1e-4, atol=1e-4)


def test_resnet_weights_come_from_a_local_file_only(data, tmp_path, capsys):
    imagenet_shaped = torchvision.models.resnet18(weights=None)  # 1000 classes, 7x7 stem
    torch.save(imagenet_shaped.state_dict(), tmp_path / "w.pt")
    model = ResNet18(data, weights=str(tmp_path / "w.pt"))
    assert torch.equal(model.net.layer1[0].conv1.weight, imagenet_shaped.layer1[0].conv1.weight)
    assert model.net.fc.out_features == 49
    assert "fresh: conv1.weight, fc.bias, fc.weight" in capsys.readouterr().err
    with pytest.raises(SuiteError, match="not found"):
        ResNet18(data, weights=str(tmp_path / "missing.pt"))
    (tmp_path / "junk.pt").write_text("not a checkpoint")
    with pytest.raises(SuiteError, match="not a readable state dict"):
        ResNet18(data, weights=str(tmp_path / "junk.pt"))


def test_mlp_reads_flattened_images(data):
    model = MLP(data, hidden=32)
    assert model.embedding_weight is None and model.hidden.in_features == RES * RES
    assert model(data.x_val[:3]).shape == (3, 49)


TINY = {"resolution": RES, "train_frac": 0.004, "n_val": 24, "train.steps": 4, "eval_every": 2}


@pytest.mark.parametrize("model", ["resnet18", "mlp"])
@pytest.mark.parametrize(
    "opt, sampler", [("adam", "random"), ("adamw", "random"), ("sgd", "random"), ("adam", "full"), ("adam", "epoch")]
)
def test_image_models_train_with_every_plain_optimizer_and_sampler(cache, tmp_path, model, opt, sampler):
    settings = dict(TINY, **({} if sampler == "full" else {"batch_size": 16}))
    (result,) = train(
        as_cells([resolve({"task": "polygons", "model": model, "opt": opt, "sampler": sampler}, settings)], [tmp_path]),
        torch.device("cpu"),
    )
    records = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert result["steps"] == 4 and [r["step"] for r in records] == [0, 2, 4]
    assert all(math.isfinite(r["train_loss"]) for r in records)
    assert "emb_norm_rare" not in records[0]  # no token embedding, no embedding measures


@pytest.mark.parametrize(
    "choices, message",
    [
        ({"opt": "adamlr"}, "no token embedding"),
        ({"opt": "adamlr_adaptive"}, "no token embedding"),
        ({"sampler": "frequency"}, "token frequencies"),
        ({"task": "modular"}, "model 'resnet18' takes image inputs, but task 'modular' gives tokens"),
    ],
)
def test_what_does_not_apply_to_images_is_refused(cache, choices, message):
    with pytest.raises(SuiteError, match=message):  # resolving (the task says what it gives) or building
        spec = resolve(
            {"task": "polygons", "model": "resnet18", **choices},
            {"resolution": RES} if choices.get("task") != "modular" else {},
        )
        stacks([Member.of(build(spec, updates=False))], torch.device("cpu"))  # its optimizer: the stack's


def test_transformer_refuses_images(cache):
    with pytest.raises(SuiteError, match=r"'transformer' takes tokens.*'polygons' gives image"):
        build(resolve({"task": "polygons", "model": "transformer"}, {"resolution": RES}))


def _images(size):
    from suite.specs.data import TaskData

    x = torch.zeros(2, 1, size, size, dtype=torch.uint8)
    return TaskData(x, torch.zeros(2, dtype=torch.long), x, torch.zeros(2, dtype=torch.long), "image", 49)


def dark_box(image: np.ndarray) -> tuple[int, int, int, int]:
    rows, cols = np.nonzero(image < 128)
    return rows.min(), rows.max(), cols.min(), cols.max()


def test_insight_images_are_their_jpeg_resized_and_center_cropped():
    """Grokking-Insight's input: RGB, JPEG round trip, Resize(256) then CenterCrop(224)."""
    clean = render((5, 0, 0, 0), CANVAS)  # one pentagon in the top-left cell
    theirs = insight_image((5, 0, 0, 0))
    assert theirs.shape == (224, 224, 3) and theirs.dtype == np.uint8
    gray = theirs.astype(int).mean(-1)
    assert np.abs(theirs.astype(int) - gray[..., None]).max() <= 8  # gray content in three JPEG channels
    grays = ((gray > 20) & (gray < 235)).sum()
    assert grays > 2 * ((clean > 20) & (clean < 235)).sum()  # JPEG and resampling blur the black lines
    # The crop keeps the middle of the picture scaled by 256 / 224 around the centre (112, 112):
    for ours, seen in zip(dark_box(clean), dark_box(gray)):
        assert abs(max(0, (ours - 112) * 256 / 224 + 112) - seen) <= 2, (dark_box(clean), dark_box(gray))
    small = insight_image((5, 0, 0, 0), 16)
    assert small.shape == (16, 16, 3)


def test_insight_pipeline_dataset_and_their_52_way_head(cache, monkeypatch):
    few = all_cells()[:40]
    monkeypatch.setattr(polygons_module, "all_cells", lambda: few)  # 40 images, not 14,641
    data = polygons(0, resolution=RES, pipeline="insight", train_frac=0.25)
    assert data.x_train.shape == (10, 3, RES, RES) and data.info["pipeline"] == "insight"
    images = load_images(RES, "insight")
    assert images.shape == (40, 3, RES, RES)
    assert torch.equal(images[7].permute(1, 2, 0), torch.from_numpy(insight_image(few[7].tolist(), RES)))
    assert (cache / f"polygons-insight-v{polygons_module.RENDER_VERSION}-{RES}px.pt").exists()
    model = ResNet18(data, n_outputs=52)
    assert model(data.x_train[:2]).shape == (2, 52)
    with pytest.raises(SuiteError, match="n_outputs must be at least the task's 49 classes"):
        ResNet18(data, n_outputs=48)


def test_their_epochs_of_200_end_in_a_short_batch(data):
    sampler = build(
        resolve(
            {"task": "polygons", "model": "mlp", "sampler": "epoch"},
            {"resolution": RES, "batch_size": 200, "hidden": 8},
        )
    ).sampler
    sizes = [len(sampler.next()) for _ in range(19)]
    assert sizes == [200] * 18 + [60]  # 3,660 images: 19 steps an epoch
