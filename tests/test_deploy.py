"""ONNX export: every backbone round-trips through ONNX Runtime at input
sizes other than the traced one, and the in-graph size arithmetic equals
the eager code it replaces."""
import subprocess
import sys

import pytest
import torch

import vitattn_mm  # noqa: F401
from tiny_backbones import SKELETONS, build_tiny, registered_backbones
from vitattn_mm.deployment import check_onnx, export_onnx, wrap_for_export
from vitattn_mm.models.backbones import AttnViT
from vitattn_mm.models.attentions.less_attention import \
    ConvAttentionTransform
from vitattn_mm.models.backbones.base_backbone import StagedBackbone
from vitattn_mm.models.layers import CornerPadding, size_aware
from vitattn_mm.ops import score_conv
from vitattn_mm.registry import ATTENTIONS

pytest.importorskip('onnxruntime')

def test_every_registered_backbone_is_covered():
    from mmdet.registry import MODELS as DET_MODELS
    registered = {
        name
        for name, cls in DET_MODELS.module_dict.items()
        if isinstance(cls, type) and issubclass(cls, StagedBackbone)
    }
    assert registered == set(registered_backbones())


@pytest.mark.slow
@pytest.mark.parametrize('name', registered_backbones())
def test_backbone_onnx_round_trip_at_other_sizes(name, tmp_path):
    """Traced at one size, the file runs at a larger and at an odd size
    (a size baked into the graph raises in ONNX Runtime or gives other
    output shapes) and matches PyTorch."""
    model = build_tiny(name)
    path = str(tmp_path / f'{name}.onnx')
    export_onnx(model, path, (64, 96), dynamic=True)
    for result in check_onnx(path, model, [(96, 128), (97, 131)]):
        assert result.max_abs_diff < 1e-4, (name, str(result))


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted({
    cls.__name__ for cls in ATTENTIONS.module_dict.values()}))
def test_every_attention_exports_at_any_size(name, tmp_path):
    """Part of the attention contract: every registered attention, placed
    by its layer plan in a plain ViT, exports once and runs at other
    sizes."""
    torch.manual_seed(0)
    kwargs = dict(SKELETONS[AttnViT])
    kwargs['attn_cfgs'] = ATTENTIONS.get(name).layer_plan([1, 1, 1])
    model = AttnViT(**kwargs).eval()
    path = str(tmp_path / f'{name}.onnx')
    export_onnx(model, path, (64, 96), dynamic=True)
    for result in check_onnx(path, model, [(96, 128), (97, 131)]):
        assert result.max_abs_diff < 1e-4, (name, str(result))


@pytest.mark.slow
def test_dynamo_exporter_round_trip(tmp_path):
    """The dynamo exporter too, on MSF's attention as it is built (the fused
    kernel with its key-norm bias, decomposed on symbolic sizes)."""
    pytest.importorskip('onnxscript')
    model = build_tiny('MSFViT')
    path = str(tmp_path / 'msf_vit.onnx')
    export_onnx(model, path, (64, 96), dynamic=True, exporter='dynamo')
    for result in check_onnx(path, model, [(96, 128), (97, 131)]):
        assert result.max_abs_diff < 1e-4, str(result)


def test_static_export_rejects_other_sizes(tmp_path):
    """Without ``dynamic`` the input size is fixed (ONNX Runtime refuses
    another), so ``dynamic`` is what makes the round trip above work."""
    model = build_tiny('MSFViT')
    path = str(tmp_path / 'static.onnx')
    export_onnx(model, path, (64, 96), dynamic=False)
    assert check_onnx(path, model, [(64, 96)])[0].max_abs_diff < 1e-4
    with pytest.raises(Exception, match='dimension|Got invalid dimensions'):
        check_onnx(path, model, [(96, 128)])


def test_export_arguments_are_checked(tmp_path):
    model = build_tiny('MSFViT')
    with pytest.raises(ValueError, match='exporter'):
        export_onnx(model, str(tmp_path / 'x.onnx'), (64, 64),
                    exporter='tflite')
    with pytest.raises(ValueError, match=r'\(H, W\)'):
        export_onnx(model, str(tmp_path / 'x.onnx'), (64, ))


def test_backbones_build_their_padding_capture_ready():
    """Every corner padding the backbones hold is the size-aware primitive,
    built in place (nothing is swapped after construction)."""
    from mmcv.cnn.bricks.transformer import AdaptivePadding
    for name in registered_backbones():
        model = build_tiny(name)
        paddings = [m for m in model.modules()
                    if isinstance(m, AdaptivePadding)]
        assert all(type(m) is CornerPadding for m in paddings), name


def test_lavit_transform_captured_route_equals_eager(monkeypatch):
    """The LA transform's convs over token counts take their static route
    while a graph is captured (every head at once, each conv a 3-D one
    over a view of the map: ``token_depthwise_conv``; the head mix a
    batched product): the same result as eagerly on the CPU (head by
    head, 2-D convs), with trained-like (non-identity) weights."""
    torch.manual_seed(0)
    transform = ConvAttentionTransform(num_heads=3, kernel_size=3)
    for p in transform.parameters():
        torch.nn.init.normal_(p)
    query_hw, key_hw = (5, 7), (3, 4)
    logits = torch.randn(2, 3, 35, 12)
    expected = transform(logits, query_hw, key_hw)
    for module in (size_aware, score_conv):
        monkeypatch.setattr(module, 'capturing', lambda: True)
    got = transform(logits, query_hw, key_hw)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_wrap_for_export_refuses_other_models():

    class Other(torch.nn.Module):
        data_preprocessor = None
        backbone = None

    with pytest.raises(TypeError, match='export its backbone'):
        wrap_for_export(Other())


@pytest.mark.slow
def test_cli_exports_detector_features_and_segmentor(tmp_path):
    """The tool on a whole model of two tasks: detector backbone + neck
    (demo config) and a whole segmentor, each checked at three sizes."""
    for config, what in [
        ('configs/demo/mask-rcnn_flatten-swin-nano_fpn_8e_demo.py',
         'detector backbone + neck'),
        ('configs/flatten/fpn_flatten-pvt-t_4xb4-80k_ade20k-512x512.py',
         'segmentor logits'),
    ]:
        out = tmp_path / 'model.onnx'
        proc = subprocess.run([
            sys.executable, 'tools/deployment/export_onnx.py', config,
            '--shape', '128', '160', '--dynamic', '--out',
            str(out)
        ], capture_output=True, text=True, timeout=900)
        assert proc.returncode == 0, proc.stderr[-2000:]
        assert what in proc.stdout
        diffs = [
            float(line.split('max abs diff ')[1].split()[0])
            for line in proc.stdout.splitlines()
            if line.startswith('  ') and 'max abs diff' in line
        ]
        assert len(diffs) == 3 and max(diffs) < 2e-4, proc.stdout
