"""torch.compile with dynamic shapes: one graph for many input sizes, no
graph break, eager results. Every skeleton, and every registered attention
in a skeleton, compiled with the 'eager' backend (graph capture only:
inductor's code generation takes minutes on CI's two cores and is not what
these tests are about)."""
import pytest
import torch

from tiny_backbones import SKELETONS, build_tiny, registered_backbones
from vitattn_mm.models import backbones
from vitattn_mm.models.backbones import AttnViT
from vitattn_mm.registry import ATTENTIONS
from vitattn_mm.utils.compile import compile_backbone, compile_stats

#: Sizes with every stage wider than one 7x7 window (dynamo specialises
#: sizes that equal 1) and above a size threshold PyTorch's convolution
#: guards on: crossing either recompiles once, see docs/deployment.md.
SIZES = [(256, 384), (288, 416), (257, 353)]


def _compiled_outputs(model, sizes, dynamic=True):
    compiled = compile_backbone(model, backend='eager', dynamic=dynamic)
    outs = []
    with compile_stats() as stats, torch.no_grad():
        for shape in sizes:
            x = torch.randn(1, 3, *shape)
            outs.append((compiled(x), model(x)))
    return stats, outs


#: One registered backbone per skeleton (the first built on it), and the
#: Less-Attention ones, whose state crosses blocks and stages.
ONE_PER_SKELETON = sorted({
    *(next(n for n in registered_backbones()
           if issubclass(getattr(backbones, n), skeleton))
      for skeleton in SKELETONS), 'LaViT', 'LessAttnSwinTransformer'})


@pytest.mark.slow
@pytest.mark.parametrize('name', ONE_PER_SKELETON)
def test_one_graph_for_every_size(name):
    stats, outs = _compiled_outputs(build_tiny(name), SIZES)
    assert stats.graph_breaks == {}, stats.graph_breaks
    assert (stats.graphs, stats.recompiles) == (1, 0), str(stats)
    for compiled, eager in outs:
        assert len(compiled) == len(eager)
        for a, b in zip(compiled, eager):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize('name', sorted({
    cls.__name__ for cls in ATTENTIONS.module_dict.values()}))
def test_every_attention_compiles_to_one_graph(name):
    """Part of the attention contract: every registered attention, placed
    by its layer plan in a plain ViT, compiles to one graph for every
    size."""
    torch.manual_seed(0)
    kwargs = dict(SKELETONS[AttnViT])
    kwargs['attn_cfgs'] = ATTENTIONS.get(name).layer_plan([1, 1, 1])
    stats, outs = _compiled_outputs(AttnViT(**kwargs).eval(),
                                    [(128, 160), (144, 176), (145, 177)])
    assert stats.graph_breaks == {}, stats.graph_breaks
    assert (stats.graphs, stats.recompiles) == (1, 0), str(stats)
    for compiled, eager in outs:
        for a, b in zip(compiled, eager):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_compile_stats_counts_recompiles():
    """Static shapes recompile at a new size: the counter the test above
    relies on sees it."""
    stats, _ = _compiled_outputs(
        build_tiny('MSFViT'), [(64, 64), (80, 96)], dynamic=False)
    assert stats.recompiles >= 1 and stats.graphs >= 2, str(stats)


def test_compile_backbone_hook_compiles_backbone_only():
    """The hook compiles ``backbone.forward`` (one graph for two sizes) and
    leaves the checkpoint keys as they were."""
    from types import SimpleNamespace

    from mmengine.config import Config
    from mmengine.logging import MMLogger

    from vitattn_mm.engine import CompileBackboneHook
    from vitattn_mm.utils.compile import add_compile_backbone_hook

    cfg = Config(dict(custom_hooks=[dict(type='EvaluateBeforeTrainHook')]))
    add_compile_backbone_hook(cfg, 'eager')
    assert cfg.custom_hooks[-1] == dict(type='CompileBackboneHook',
                                        backend='eager')

    model = torch.nn.Module()
    model.backbone = build_tiny('MSFViT')
    keys = list(model.state_dict())
    runner = SimpleNamespace(
        model=model, logger=MMLogger.get_instance('test_compile'))
    CompileBackboneHook(backend='eager').before_run(runner)
    assert list(model.state_dict()) == keys
    with compile_stats() as stats, torch.no_grad():
        for shape in [(64, 96), (80, 112)]:
            model.backbone(torch.randn(1, 3, *shape))
    assert (stats.graphs, stats.recompiles) == (1, 0), str(stats)
