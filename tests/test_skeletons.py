"""The shared skeletons: mmpretrain's / mmdet's Swin behaviour and keyword
names, attention swapped through the config, and checkpoints written by the
backbones before they shared a skeleton."""
import os.path as osp

import pytest
import torch
from mmdet.models.backbones import SwinTransformer as MMDetSwin
from mmengine.config import Config
from mmpretrain.models.backbones import SwinTransformer as MMPretrainSwin

from vitattn_mm.models.backbones import (AttnPVT, AttnSwinTransformer,
                                         FLattenPVT, FLattenSwinTransformer,
                                         MSFSwinTransformer)

LEGACY = osp.join(osp.dirname(__file__), 'data', 'legacy')
TINY = dict(embed_dims=16, depths=[1, 1, 2, 1], num_heads=[1, 2, 2, 4])
#: mmdet's Swin keywords, as mmdet's Swin-T configs spell them (small).
MMDET_SWIN = dict(embed_dims=16, depths=[1, 1, 2, 1], num_heads=[1, 2, 2, 4],
                  window_size=7, mlp_ratio=4, qkv_bias=True, qk_scale=None,
                  drop_rate=0., attn_drop_rate=0., drop_path_rate=0.2,
                  patch_norm=True, out_indices=(0, 1, 2, 3), with_cp=False,
                  convert_weights=True)


def _outputs(model, x):
    model.eval()  # mmdet's Swin returns None from train()
    with torch.no_grad():
        return model(x)


def test_swin_attention_is_mmdets_swin():
    """With no attention swapped, mmdet's keywords build mmdet's Swin: its
    state dict loads strictly and the outputs are equal."""
    torch.manual_seed(0)
    ref = MMDetSwin(**MMDET_SWIN)
    ours = AttnSwinTransformer(**MMDET_SWIN)
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(1, 3, 97, 130)
    for a, b in zip(_outputs(ref, x), _outputs(ours, x)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-6)


@pytest.mark.parametrize('cls, kwargs', [
    (FLattenSwinTransformer, {}),
    (MSFSwinTransformer, dict(groups=2)),
])
def test_mmdet_keywords_build_the_same_network_as_arch(cls, kwargs):
    by_keywords = cls(**MMDET_SWIN, **kwargs)
    by_arch = cls(arch=TINY, drop_path_rate=0.2, **kwargs)
    assert by_keywords.state_dict().keys() == by_arch.state_dict().keys()
    by_arch.load_state_dict(by_keywords.state_dict())
    x = torch.randn(1, 3, 64, 96)
    for a, b in zip(_outputs(by_keywords, x), _outputs(by_arch, x)):
        assert torch.equal(a, b)


def test_unsupported_mmdet_keywords_are_clear_errors():
    with pytest.raises(ValueError, match='strides'):
        FLattenSwinTransformer(**dict(MMDET_SWIN, strides=(4, 2, 2, 1)))
    with pytest.raises(ValueError, match='qk_scale'):
        FLattenSwinTransformer(**dict(MMDET_SWIN, qk_scale=0.5))


def test_attention_swapped_through_config_is_the_family_backbone():
    """FLatten-Swin is the skeleton with focused linear attention in the
    first two stages: the same keys and the same outputs."""
    flatten = FLattenSwinTransformer(TINY)
    generic = AttnSwinTransformer(
        TINY,
        attn_cfgs=[dict(type='FocusedLinearAttention')] * 2 + [None] * 2)
    generic.load_state_dict(flatten.state_dict(), strict=True)
    x = torch.randn(1, 3, 71, 90)
    for a, b in zip(_outputs(flatten, x), _outputs(generic, x)):
        assert torch.equal(a, b)
    msf_everywhere = AttnSwinTransformer(
        TINY, attn_cfgs=dict(type='ShiftWindowMSA',
                             window_msa='MeanShiftAttention'))
    msf = MSFSwinTransformer(TINY)
    msf_everywhere.load_state_dict(msf.state_dict(), strict=True)
    pvt = AttnPVT(dict(embed_dims=[16, 32, 32, 64], depths=[1, 1, 1, 1],
                       num_heads=[1, 1, 2, 2], mlp_ratios=[2, 2, 2, 2]),
                  attn_cfgs=dict(type='MeanShiftAttention'))
    assert [tuple(o.shape[-2:]) for o in _outputs(pvt, x)] == [
        (18, 23), (9, 12), (5, 6), (3, 3)]


def test_unknown_attention_lists_the_registered_ones():
    with pytest.raises(KeyError, match='FocusedLinearAttention'):
        AttnSwinTransformer(TINY, attn_cfgs=dict(window_size=7))
    with pytest.raises(KeyError, match='NoSuchAttention'):
        AttnSwinTransformer(TINY, attn_cfgs=dict(type='NoSuchAttention'))


@pytest.mark.parametrize('cls', [FLattenSwinTransformer, MSFSwinTransformer])
def test_frozen_stages_freezes_what_mmpretrain_freezes(cls):
    """``frozen_stages=k``: the patch embedding and stages 0..k with the
    patch merging after each, and their output norms (mmpretrain's Swin)."""
    ours = cls(TINY, frozen_stages=1).train()
    ref = MMPretrainSwin(TINY, out_indices=(0, 1, 2, 3), frozen_stages=1,
                         pad_small_map=True)
    ref.train()  # returns None in mmpretrain
    frozen = {n for n, p in ours.named_parameters() if not p.requires_grad}
    ref_frozen = {n for n, p in ref.named_parameters() if not p.requires_grad}
    # Same module paths; only the attention's own parameter names differ.
    strip = {n.split('.blocks.')[0] if '.blocks.' in n else n
             for n in frozen}
    assert strip == {n.split('.blocks.')[0] if '.blocks.' in n else n
                     for n in ref_frozen}
    assert 'stages.1.downsample.reduction.weight' in frozen
    assert not any(n.startswith('stages.2.') for n in frozen)


@pytest.mark.parametrize('name, cls', [
    ('flatten_swin', FLattenSwinTransformer),
    ('msf_swin', MSFSwinTransformer),
    ('flatten_pvt', FLattenPVT),
])
def test_checkpoints_of_the_previous_layout_still_load(name, cls, tmp_path):
    """Files written before the skeletons (vitattn_mm 0.1.0: FLatten-Swin's
    merging before its stage and 1x1-conv FFNs, MSF-Swin's ``downsamples``)
    load through ``init_cfg`` and through ``load_state_dict`` (resume,
    ``load_from``) and give the outputs that version computed."""
    legacy = torch.load(osp.join(LEGACY, f'{name}.pth'))
    path = str(tmp_path / 'legacy.pth')
    torch.save({'state_dict': legacy['state_dict']}, path)

    pretrained = cls(**legacy['kwargs'],
                     init_cfg=dict(type='Pretrained', checkpoint=path))
    pretrained.init_weights()
    report = pretrained.load_report
    assert (report.missing, report.unexpected, report.mismatched) == \
        ([], [], [])

    class Detector(torch.nn.Module):

        def __init__(self):
            super().__init__()
            self.backbone = cls(**legacy['kwargs'])

    detector = Detector()
    detector.load_state_dict(legacy['state_dict'], strict=True)

    for model in (pretrained, detector.backbone):
        for ours, then in zip(_outputs(model, legacy['input']),
                              legacy['outputs']):
            torch.testing.assert_close(ours, then, rtol=0, atol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize('path', [
    'configs/drop_in/mask-rcnn_flatten-swin-t_fpn_1x_coco.py',
    'configs/drop_in/mask-rcnn_msf-swin-t_fpn_1x_coco.py',
])
def test_mmdet_swin_config_with_only_the_type_changed_trains(
        path, run_recipe):
    """mmdet's stock Swin-T Mask R-CNN with only ``backbone.type`` changed
    trains an iteration and evaluates on the demo data."""
    cfg = Config.fromfile(path)
    import mmdet
    stock = Config.fromfile(
        osp.join(osp.dirname(mmdet.__file__), '.mim', 'configs', 'swin',
                 'mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py'))
    assert cfg.model.backbone.type != stock.model.backbone.type
    assert {k: v for k, v in cfg.model.backbone.items() if k != 'type'} == \
        {k: v for k, v in stock.model.backbone.items() if k != 'type'}
    cfg.model.backbone.init_cfg = None  # no download on the test machine
    runner, losses, metrics = run_recipe(cfg)
    assert type(runner.model.backbone).__name__ == cfg.model.backbone.type
    assert 'coco/bbox_mAP' in metrics


@pytest.fixture
def cosine_attention():
    """The fifth attention of docs/adding_an_attention.md, run from the
    page itself; unregistered afterwards."""
    from vitattn_mm.registry import ATTENTIONS
    with open('docs/adding_an_attention.md') as f:
        code = f.read().split('```python\n')[1].split('```')[0]
    namespace = {}
    exec(compile(code, 'adding_an_attention.md', 'exec'), namespace)
    yield namespace['CosineAttention']
    ATTENTIONS._module_dict.pop('CosineAttention')


def test_a_new_attention_from_the_guide_plugs_into_every_skeleton(
        cosine_attention, tmp_path):
    from vitattn_mm.models.backbones import AttnPVTv2, AttnViT
    from vitattn_mm.utils import attention_maps
    cosine = dict(type='CosineAttention')
    models = [
        AttnSwinTransformer(TINY, attn_cfgs=[cosine] * 2 + [None] * 2),
        AttnPVTv2(dict(embed_dims=[16, 32, 32, 64], depths=[1, 1, 1, 1],
                       num_heads=[1, 1, 2, 2], mlp_ratios=[2, 2, 2, 2]),
                  attn_cfgs=cosine),
        AttnViT(dict(embed_dims=32, depth=2, num_heads=2), attn_cfgs=cosine),
    ]
    x = torch.randn(1, 3, 71, 90)
    for model in models:
        assert isinstance(model.get_submodule(
            'blocks.0.attn' if isinstance(model, AttnViT) else
            'stages.0.blocks.0.attn'), cosine_attention)
        outs = _outputs(model, x)
        assert all(torch.isfinite(o).all() for o in outs)
    # The attention-map tool draws it from the module's own report.
    vit = models[-1]
    maps = attention_maps.layer_maps(vit, x, (40, 30), 'blocks.0.attn')
    assert maps[0].title == 'CosineAttention'
    assert maps[0].weights.shape == (5, 6)
    torch.testing.assert_close(maps[0].weights.sum(), torch.tensor(1.))
    assert not torch.allclose(maps[0].weights, maps[1].weights)

    # ... and from the command line.
    import importlib.util
    import json
    spec = importlib.util.spec_from_file_location(
        'visualize_attention', 'tools/visualize_attention.py')
    tool = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tool)
    out = tmp_path / 'maps.png'
    tool.main(['--families', '--size', '64', '64', '--out', str(out),
               '--layer', 'blocks.0.attn', '--backbone', json.dumps(dict(
                   type='AttnViT', arch=dict(embed_dims=32, depth=2,
                                             num_heads=2),
                   attn_cfgs=cosine))])
    assert out.stat().st_size > 0


def test_unknown_window_attention_lists_the_registered_ones():
    with pytest.raises(KeyError, match='MeanShiftAttention'):
        AttnSwinTransformer(TINY, attn_cfgs=dict(type='ShiftWindowMSA',
                                                 window_msa='NoSuchWindow'))


def test_swin_token_stage_takes_one_attention_per_block():
    """A list in a stage's ``attn_cfgs`` gives each block its own token
    attention; a list of the wrong length names the stage and its depth."""
    flatten = dict(type='FocusedLinearAttention')
    linear = dict(type='LinearGlobalAttention')
    model = AttnSwinTransformer(
        arch=TINY, attn_cfgs=[None, None, [flatten, linear], None])
    assert [type(b.attn).__name__ for b in model.stages[2].blocks] == [
        'FocusedLinearAttention', 'LinearGlobalAttention'
    ]
    assert model(torch.randn(1, 3, 64, 96))[2].shape == (1, 64, 4, 6)
    with pytest.raises(ValueError, match='stage 2 lists 1 blocks; the '
                       'stage has 2'):
        AttnSwinTransformer(arch=TINY, attn_cfgs=[None, None, [flatten],
                                                  None])
