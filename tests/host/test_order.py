"""Operator order on branched graphs: the order with the least peak (solver.op_order) planned
beside the file's, the better kept; engines bit-exact; op indices in messages and the manifest
stay the file's; it composes with tiles, fused stages and outputs over inputs."""
from __future__ import annotations

import json

import pytest

from deployer.pipeline import Options, deploy, read_model
from deployer.suggest import suggest
from deployer.verify import build_engine, random_inputs
from network_parser.errors import InfeasibleBudget
from tests import model_zoo
from tests.host.test_models import assert_bit_exact

K = 1024


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    folder = tmp_path_factory.mktemp("order")
    paths = {}
    for name in ("inception_cells", "detection_fpn", "audio_unet"):
        paths[name] = folder / f"{name}.tflite"
        getattr(model_zoo, name)().save(paths[name])
    return paths


@pytest.mark.parametrize("name", ["inception_cells", "detection_fpn"])
def test_the_least_peak_order_plans_to_less_than_the_files(zoo, name):
    model = zoo[name]
    file_order = deploy(model, Options(order="file"))
    dep = deploy(model, Options())
    assert file_order.order is None and dep.order is not None and dep.order.exact
    assert dep.memory.sram_bytes < file_order.memory.sram_bytes
    assert "operator order" in dep.relaxed and "operator order" not in file_order.relaxed
    # the manifest: layers in the engine's order, each with its file index; the order recorded
    manifest = json.loads(dep.files["manifest.json"])
    ran = [layer["file_index"] for layer in manifest["layers"]]
    assert ran == manifest["order"]["ops"] and sorted(ran) == [layer.index for layer in file_order.graph.layers]
    assert ran != sorted(ran) and manifest["order"]["modelled_peak"] < manifest["order"]["file_order_modelled_peak"]
    assert json.loads(file_order.files["manifest.json"])["order"] is None
    assert_bit_exact(model, dep, build_engine(dep), [random_inputs(dep.graph, s) for s in range(2)])


def test_graphs_the_order_cannot_improve_keep_the_files_byte_for_byte(zoo):
    """The U-Net's best order is its file's: the engine is the one --order file makes."""
    a, b = deploy(zoo["audio_unet"], Options()), deploy(zoo["audio_unet"], Options(order="file"))
    assert a.order is None and dict(a.files) == dict(b.files)


@pytest.mark.parametrize("options", [dict(l1=8 * K), dict(l1=8 * K, target="gap8"), dict(sram=None)],
                         ids=["tiles", "gap8-tiles", "stages"])
def test_the_order_composes_with_tiles_stages_and_overlaps(zoo, options):
    """Tiles (host and the GAP8 cluster's DMA), and the least SRAM fused stages reach within 35 %
    recomputed MACs, in the chosen order; outputs over inputs in both."""
    from tests.target.test_gap8 import emulated
    model = zoo["inception_cells"]
    if "sram" in options:
        options = dict(max_overhead=0.35)
    dep = deploy(model, Options(**options))
    assert dep.order is not None and (dep.tilings if "l1" in options else True)
    assert dep.memory.sram_bytes <= deploy(model, Options(**options, order="file")).memory.sram_bytes
    engine = emulated(dep) if options.get("target") == "gap8" else build_engine(dep)
    assert_bit_exact(model, dep, engine, [random_inputs(dep.graph, s) for s in range(2)])


def test_messages_name_the_files_op(zoo):
    """An impossible budget names its peak's op by its index in the file, and the smallest budget
    it reports is one a rerun meets."""
    model = zoo["inception_cells"]
    with pytest.raises(InfeasibleBudget) as e:
        deploy(model, Options(sram=8 * K))
    need = e.value.needs["--sram"]
    file_ops = {layer.name: layer.index for layer in read_model(model).layers}
    named = str(e.value).split("its peak: op ")[1]
    index, _, rest = named.partition(" ")
    name = rest.split("'")[1]
    assert file_ops[name] == int(index)
    assert deploy(model, Options(sram=need)).memory.sram_bytes <= need


def test_suggest_measures_the_order(zoo):
    s = suggest(zoo["inception_cells"], Options())
    rec = next(r for r in s.recommendations if r.name == "operator order")
    assert rec.on and rec.saving > 0
