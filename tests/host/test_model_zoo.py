"""The model builder's application-shaped models (an audio U-Net, a detection FPN, Inception-style
cells, the last two run in their least-peak operator order): deployed and
tiled (the FPN's RESIZE_NEAREST_NEIGHBOR and the U-Net's TRANSPOSE_CONV layers too), every engine
bit-exact with LiteRT. (Their peaks sit where the resizes and TRANSPOSE_CONV join skip
connections; a patch split does not lower them.)"""
from __future__ import annotations

import pytest

from deployer.pipeline import Options, deploy
from deployer.verify import build_engine, random_inputs
from tests.host.test_models import assert_bit_exact
from tests.model_zoo import audio_unet, detection_fpn, inception_cells

K = 1024


@pytest.fixture(scope="module", params=[audio_unet, detection_fpn, inception_cells], ids=lambda f: f.__name__)
def model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("zoo") / f"{request.param.__name__}.tflite"
    request.param().save(path)
    return path


@pytest.mark.parametrize("options", [dict(), dict(l1=16 * K, tiler="cpsat"), dict(l1=8 * K, tiler="greedy")],
                         ids=["untiled", "l1-16K", "l1-8K"])
def test_zoo_model_bit_exact(model, options):
    dep = deploy(model, Options(**options))
    if "l1" in options:  # the convolutions run tile by tile, the resizes and transposed ones too
        assert dep.tilings and all(t.l1_bytes <= options["l1"] for _, t in dep.tilings.values())
        gathering = [k for k, lp in enumerate(dep.layers) if type(lp.kernel).__name__ in ("ResizeNearest", "TransposeConv")]
        assert (gathering or model.stem == "inception_cells") and all(k in dep.tilings for k in gathering)
    assert_bit_exact(model, dep, build_engine(dep), [random_inputs(dep.graph, s) for s in range(2)])
