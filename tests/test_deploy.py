"""ONNX export: every backbone round-trips through ONNX Runtime at input
sizes other than the traced one, and the in-graph size arithmetic equals
the eager code it replaces."""
import subprocess
import sys

import pytest
import torch
from mmcv.cnn.bricks.transformer import AdaptivePadding, PatchEmbed

import vitattn_mm  # noqa: F401
from vitattn_mm.deployment import check_onnx, export_onnx, wrap_for_export
from vitattn_mm.models.backbones.lavit import ConvAttentionTransform
from vitattn_mm.models.layers import (CornerPadding, ResizablePosEmbed,
                                      VitAttnBackbone, use_traceable_padding)

from tiny_backbones import TINY_BACKBONES, build_tiny

pytest.importorskip('onnxruntime')

def test_every_registered_backbone_is_covered():
    from mmdet.registry import MODELS as DET_MODELS
    registered = {
        name
        for name, cls in DET_MODELS.module_dict.items()
        if isinstance(cls, type) and issubclass(cls, VitAttnBackbone)
    }
    assert registered == set(TINY_BACKBONES)


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted(TINY_BACKBONES))
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
def test_dynamo_exporter_round_trip(tmp_path):
    """The dynamo exporter too, on MSF's attention (exported in its explicit
    form: the exporter cannot decompose the fused one on symbolic sizes)."""
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


@pytest.mark.parametrize('kernel', [2, 4, 8])
def test_corner_padding_equals_mmcv(kernel):
    mmcv_pad = AdaptivePadding(kernel_size=kernel, stride=kernel,
                               padding='corner')
    ours = CornerPadding(kernel_size=kernel, stride=kernel, padding='corner')
    for h, w in [(32, 32), (33, 35), (31, 64), (7, 9)]:
        x = torch.randn(1, 2, h, w)
        assert torch.equal(ours(x), mmcv_pad(x))


@pytest.mark.parametrize('shift, pad_small_map', [(0, True), (3, True),
                                                   (3, False)])
def test_traceable_shift_window_msa_equals_mmpretrains(shift, pad_small_map):
    """The shifted-window attention the Swin skeleton runs once swapped
    (its size arithmetic written for graph capture) computes what
    mmpretrain's does, padding, shift and mask included."""
    from mmpretrain.models.utils.attention import ShiftWindowMSA

    from vitattn_mm.models.layers.graph_capture import \
        TraceableShiftWindowMSA
    torch.manual_seed(0)
    ref = ShiftWindowMSA(16, 2, window_size=7, shift_size=shift,
                         pad_small_map=pad_small_map).eval()
    ours = use_traceable_padding(torch.nn.ModuleList([ref]))[0]
    assert type(ours) is TraceableShiftWindowMSA
    ref = ShiftWindowMSA(16, 2, window_size=7, shift_size=shift,
                         pad_small_map=pad_small_map).eval()
    ref.load_state_dict(ours.state_dict())
    for hw in [(7, 7), (9, 23), (14, 21), (15, 8)]:
        if min(hw) < 7 and not pad_small_map:
            continue
        x = torch.randn(2, hw[0] * hw[1], 16)
        with torch.no_grad():
            torch.testing.assert_close(ours(x, hw), ref(x, hw), rtol=0,
                                       atol=1e-6)


def test_use_traceable_padding_swaps_only_what_it_reproduces():
    model = torch.nn.ModuleDict(
        dict(
            embed=PatchEmbed(3, 8, kernel_size=4, stride=4,
                             padding='corner'),
            same=AdaptivePadding(kernel_size=4, stride=4, padding='same'),
            overlap=AdaptivePadding(kernel_size=3, stride=2,
                                    padding='corner')))
    use_traceable_padding(model)
    assert type(model['embed'].adaptive_padding) is CornerPadding
    assert type(model['same']) is AdaptivePadding
    assert type(model['overlap']) is AdaptivePadding
    x = torch.randn(1, 3, 33, 50)
    out, hw = model['embed'](x)
    assert hw == (9, 13) and out.shape == (1, 9 * 13, 8)


def test_backbones_use_traceable_padding():
    for name in TINY_BACKBONES:
        model = build_tiny(name)
        assert not any(
            type(m) is AdaptivePadding and CornerPadding.supports(m)
            for m in model.modules()), name


def test_lavit_batched_transform_equals_default():
    """The LA transform's capture path (token counts in the batch) gives the
    eager path's result, with trained-like (non-identity) weights."""
    torch.manual_seed(0)
    transform = ConvAttentionTransform(num_heads=3, kernel_size=3)
    for p in transform.parameters():
        torch.nn.init.normal_(p)
    query_hw, key_hw = (5, 7), (3, 4)
    logits = torch.randn(2, 3, 35, 12)
    expected = transform(logits, query_hw, key_hw)
    got = transform._forward_batched(logits, query_hw, key_hw)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_pos_embed_resize_is_in_graph_when_traced():
    """Traced at one grid, the resized embedding follows another grid (and
    is the identity at the learned grid)."""

    class GridEmbed(torch.nn.Module):

        def __init__(self):
            super().__init__()
            self.pos = ResizablePosEmbed(4, (6, 8))

        def forward(self, x):
            return self.pos((x.shape[-2], x.shape[-1]))

    module = GridEmbed().eval()
    with torch.no_grad():
        traced = torch.jit.trace(module, torch.zeros(1, 1, 3, 5))
        for hw in [(6, 8), (9, 11)]:
            torch.testing.assert_close(
                traced(torch.zeros(1, 1, *hw)), module.pos(hw), rtol=1e-6,
                atol=1e-6)


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
