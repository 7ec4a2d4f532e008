"""tools/benchmark.py machinery (figures themselves live in docs/)."""
import subprocess
import sys

import pytest
import torch.nn as nn

from vitattn_tools.benchmark import (build_backbone, fit_exponent, measure,
                                     write_csv)


class Quadratic(nn.Module):
    """Global attention-like cost: N x N scores."""

    def forward(self, x):
        tokens = x.flatten(2)
        return ((tokens.transpose(1, 2) @ tokens).softmax(-1), )


class Linear(nn.Module):

    def forward(self, x):
        return (x * 2, )


def test_fit_exponent_recovers_power_laws():
    px = [1e4, 4e4, 1.6e5]
    assert fit_exponent(px, [3 * p for p in px]) == pytest.approx(1.0)
    assert fit_exponent(px, [p**2 for p in px]) == pytest.approx(2.0)


def test_measure_side_by_side(tmp_path):
    results = measure({'quadratic': Quadratic(), 'linear': Linear()},
                      (48, 48), warmup=1, repeats=3)
    assert set(results) == {'quadratic', 'linear'}
    quad = results['quadratic']
    assert len(quad.times) == 3 and quad.median > 0
    # (48*48)^2 fp32 scores = 21 MiB: the peak must see them
    assert quad.peak_bytes is None or quad.peak_bytes > 15 * 2**20
    write_csv(str(tmp_path / 'b.csv'), list(results.values()))
    assert (tmp_path / 'b.csv').read_text().count('\n') == 3


def test_build_backbone_specs():
    label, model = build_backbone('pvt-t')
    assert label == 'pvt-t' and sum(p.numel() for p in model.parameters())
    with pytest.raises(KeyError):
        build_backbone('NoSuchBackbone:tiny')


def test_every_registered_attention_is_a_preset():
    """The registry drives the presets: any registered attention is Swin-T
    with it in every block, under its own name."""
    from vitattn_mm.registry import ATTENTIONS
    from vitattn_tools.benchmark import attention_preset, preset_names
    assert set(ATTENTIONS.module_dict) <= set(preset_names())
    for name in ATTENTIONS.module_dict:
        cfg = attention_preset(name)
        assert cfg['type'] == 'AttnSwinTransformer'
        assert [len(stage) for stage in cfg['attn_cfgs']] == [2, 2, 6, 2]
    label, model = build_backbone('FocusedLinearAttention')
    assert type(model.stages[0].blocks[0].attn).__name__ == \
        'FocusedLinearAttention'


@pytest.mark.slow
def test_cli_sweep_writes_csv_and_plot(tmp_path):
    result = subprocess.run(
        [sys.executable, 'tools/benchmark.py', 'pvt-t', '--sweep', '64',
         '128', '--steps', '2', '--repeats', '1', '--warmup', '0',
         '--out-dir', str(tmp_path)], capture_output=True, text=True,
        check=True)
    assert 'fitted exponents' in result.stdout
    assert (tmp_path / 'benchmark_sweep_forward.png').stat().st_size > 1000
    assert (tmp_path / 'benchmark_sweep_forward.csv').exists()


@pytest.mark.slow
def test_cli_compile_side_by_side(tmp_path):
    """``--compile``: compile statistics over the sizes, then eager and
    compiled latency of the same model side by side."""
    spec = ('{"type": "MSFViT", "arch": {"embed_dims": 32, "depth": 2, '
            '"num_heads": 2}}')
    result = subprocess.run(
        [sys.executable, 'tools/benchmark.py', spec, '--compile',
         '--compile-backend', 'eager', '--shape', '64', '96', '--shape',
         '80', '112', '--repeats', '1', '--warmup', '1', '--out-dir',
         str(tmp_path)], capture_output=True, text=True, check=True)
    out = result.stdout
    assert 'compiled vs eager' in out and f'{spec} (compiled)' in out
    row = next(line for line in out.splitlines()[::-1]
               if line.startswith(spec))
    # compile s, graphs, recompiles, graph breaks
    assert row.split()[-3:] == ['1', '0', '0'], row


def test_backbone_macs_count_the_attention_matmuls():
    """``--gemm-share`` divides these by the latency: a ViT block's
    multiply-adds, attention matmuls included, counted by hand."""
    from vitattn_tools.flops import count_backbone_macs
    label, model = build_backbone(
        '{"type": "AttnViT", "arch": {"embed_dims": 32, "depth": 1, '
        '"num_heads": 2}, "with_cls_token": false, "out_type": "featmap",'
        ' "final_norm": false}')
    n, c = 4 * 6, 32  # 64x96 input, 16-pixel patches
    expected = (n * 3 * 16 * 16 * c  # patch embedding
                + n * c * 3 * c + 2 * n * n * c + n * c * c  # attention
                + 2 * n * c * 4 * c)  # FFN
    macs = count_backbone_macs(model, (64, 96))
    # LayerNorms are counted too (a few multiply-adds per element).
    assert expected <= macs <= expected + 3 * 5 * n * c


@pytest.mark.slow
def test_cli_gemm_share(tmp_path):
    result = subprocess.run(
        [sys.executable, 'tools/benchmark.py', 'pvt-t', '--shape', '64',
         '96', '--repeats', '1', '--warmup', '0', '--gemm-share',
         '--out-dir', str(tmp_path)], capture_output=True, text=True,
        check=True)
    assert 'GEMM rate' in result.stdout and 'GEMM share' in result.stdout
