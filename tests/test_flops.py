"""The FLOP counter behind every table: reference points, attention ops,
both conventions, the table mode."""
import subprocess
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.analysis import FlopAnalyzer
from mmengine.config import Config

import vitattn_mm  # noqa: F401
from vitattn_tools import flops as flops_utils
from vitattn_tools.flops import count_complexity
from vitattn_tools.model_zoo import load_metafiles, render_table

MASK_RCNN_SWIN_T = 'configs/baselines/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'
UPERNET_SWIN_T = (
    'configs/baselines/upernet_swin-t-p4-w7_8xb2-160k_ade20k-512x512.py')


class Attention(nn.Module):

    def __init__(self, fused):
        super().__init__()
        self.fused = fused

    def forward(self, q, k, v):
        if self.fused:
            return F.scaled_dot_product_attention(q, k, v)
        attn = (q @ k.transpose(-2, -1)).softmax(-1)
        return torch.einsum('bhnm,bhmd->bhnd', attn, v)


def _count(module, *inputs):
    analyzer = FlopAnalyzer(module, inputs)
    for name, handle in (('aten::matmul', flops_utils._matmul_handle),
                         ('aten::einsum', flops_utils._einsum_handle),
                         ('aten::scaled_dot_product_attention',
                          flops_utils._sdpa_handle)):
        analyzer.set_op_handle(name, handle)
    analyzer.unsupported_ops_warnings(False)
    return analyzer.total()


def test_sdpa_counts_like_explicit_attention():
    q = torch.randn(2, 3, 50, 8)
    k = torch.randn(2, 3, 70, 8)
    v = torch.randn(2, 3, 70, 16)
    expected = 2 * 3 * 50 * 70 * (8 + 16)
    assert _count(Attention(fused=True), q, k, v) == expected
    assert _count(Attention(fused=False), q, k, v) == expected
    # mmengine alone misses the fused form entirely.
    stock = FlopAnalyzer(Attention(fused=True), (q, k, v))
    stock.unsupported_ops_warnings(False)
    assert stock.total() == 0


@pytest.fixture(scope='module')
def mask_rcnn_swin_t():
    return count_complexity(Config.fromfile(MASK_RCNN_SWIN_T))


@pytest.mark.slow
def test_reference_mask_rcnn_swin_t(mask_rcnn_swin_t):
    result = mask_rcnn_swin_t
    assert result.input_shape == (800, 1280)
    assert result.total_params / 1e6 == pytest.approx(47.79, rel=5e-3)
    assert result.total_flops('full') / 1e9 == pytest.approx(267.0, rel=5e-3)
    # The mmcv 1.x convention of older tables (L2ViT's 264 G).
    assert result.total_flops('no_attn_matmul') / 1e9 == pytest.approx(
        263.9, rel=5e-3)
    parts = result.grouped()
    assert set(parts) == {'backbone', 'neck', 'heads'}
    assert parts['backbone'][0] / 1e6 == pytest.approx(27.52, rel=1e-3)
    assert sum(p for p, _ in parts.values()) == result.total_params


@pytest.mark.slow
def test_reference_upernet_swin_t():
    result = count_complexity(Config.fromfile(UPERNET_SWIN_T))
    assert result.input_shape == (512, 2048)
    assert result.total_params / 1e6 == pytest.approx(59.94, rel=5e-3)
    assert result.total_flops('full') / 1e9 == pytest.approx(945.7, rel=5e-3)


@pytest.mark.slow  # a full Cascade Mask R-CNN at 800x1280: 12 s
def test_cascade_mask_heads_counted_on_first_100_rois():
    """Published Cascade Mask R-CNN counts (Swin 745 G) run each stage's mask
    head on 100 RoIs; mmdet 3.x's tensor forward would use all 1000."""
    cfg = Config.fromfile(
        'configs/baselines/cascade-mask-rcnn_swin-t-p4-w7_fpn_ms-crop-3x_coco.py')
    model = flops_utils.build_model(cfg)
    seen = []
    for head in model.roi_head.mask_head:
        head.register_forward_hook(lambda m, args, out: seen.append(
            args[0].shape[0]))
    count_complexity(cfg, shape=(320, 480), model=model)
    assert seen == [flops_utils.MASK_ROIS_COUNTED] * 3
    # The patch is undone afterwards: the stock forward is back.
    assert 'forward' not in vars(model.roi_head)


@pytest.mark.slow
def test_table_mode_writes_markdown(tmp_path, mask_rcnn_swin_t):
    metafile = tmp_path / 'metafile.yml'
    metafile.write_text(f"""
Collections:
  - Name: Baselines
    Convention: no_attn_matmul
Models:
  - Name: mask-rcnn_swin-t
    In Collection: Baselines
    Config: {MASK_RCNN_SWIN_T}
    Paper: {{Params: 48, FLOPs: 264}}
""")
    entries = load_metafiles([str(metafile)])
    table = render_table([(entries[0], mask_rcnn_swin_t)])
    row = next(line for line in table.splitlines()
               if line.startswith('| [mask-rcnn_swin-t]'))
    cells = [c.strip() for c in row.split('|')[1:-1]]
    assert cells[1:7] == ['800x1280', '47.8', '48.0', '267.0', '263.9',
                          '264.0']
    assert cells[9] == '-0.0%'  # compared in the paper's convention

    out = tmp_path / 'zoo.md'
    subprocess.run([sys.executable, 'tools/get_flops.py', str(metafile),
                    '--table', str(out), '--shape', '320', '512'],
                   check=True, capture_output=True)
    assert '| [mask-rcnn_swin-t]' in out.read_text()


@pytest.mark.slow
def test_model_zoo_doc_is_current(mask_rcnn_swin_t):
    """docs/model_zoo.md lists every metafile model, and its rows are what
    the counter gives now (checked on the Mask R-CNN Swin-T rows)."""
    import glob
    doc = open('docs/model_zoo.md').read()
    entries = load_metafiles(sorted(glob.glob('configs/*/metafile.yml')))
    missing = [e.name for e in entries if f'| [{e.name}](' not in doc]
    assert not missing, 'regenerate docs/model_zoo.md (docs/get_started.md)'
    swin = [e for e in entries if e.config == MASK_RCNN_SWIN_T]
    assert swin
    for entry in swin:
        table = render_table([(entry, mask_rcnn_swin_t)])
        row = next(line for line in table.splitlines()
                   if line.startswith(f'| [{entry.name}]'))
        assert row in doc


@pytest.mark.slow
def test_cli_prints_headline(tmp_path):
    result = subprocess.run(
        [sys.executable, 'tools/get_flops.py',
         'configs/demo/mask-rcnn_flatten-swin-nano_fpn_8e_demo.py', '--shape', '160',
         '160', '--exclude-attn-matmul'],
        check=True, capture_output=True, text=True)
    assert 'Input shape: (160, 160)' in result.stdout
    assert '(w/o attn matmul)' in result.stdout
    assert 'backbone' in result.stdout and 'heads' in result.stdout
