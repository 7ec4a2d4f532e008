"""Each skeleton held to the OpenMMLab class it stands in for.

With the stock class's own keywords, each package's class of a skeleton
(what that package's configs build) whose attention is not swapped loads
the stock class's state dict strictly and computes the same outputs, at
square and odd sizes; built from a config of that package with only the
type changed, it freezes the same parameters for every ``frozen_stages``;
it refuses what the stock class refuses. Small widths keep it fast: the
behaviour does not depend on them.
"""
import pytest
import torch
from mmdet.models.backbones import PyramidVisionTransformer as MMDetPVT
from mmdet.models.backbones import PyramidVisionTransformerV2 as MMDetPVTv2
from mmdet.models.backbones import SwinTransformer as MMDetSwin
from mmdet.registry import MODELS as MMDET_MODELS
from mmpretrain.models.backbones import SwinTransformer as MMPretrainSwin
from mmpretrain.models.backbones import \
    VisionTransformer as MMPretrainViT
from mmseg.models.backbones import SwinTransformer as MMSegSwin
from mmseg.models.backbones import VisionTransformer as MMSegViT
from mmseg.registry import MODELS as MMSEG_MODELS
from mmpretrain.registry import MODELS as MMPRETRAIN_MODELS

from tiny_backbones import build_tiny, registered_backbones, skeleton_of
from vitattn_mm.models import backbones
from vitattn_mm.models.backbones import packages
from vitattn_mm.models.backbones import (AttnPVT, AttnPVTv2,
                                         AttnSwinTransformer, AttnViT,
                                         FLattenDeiT, FLattenPVT,
                                         FLattenSwinTransformer, LaViT,
                                         LessAttnViT, MSFSwinTransformer)

#: mmdet's / mmseg's Swin keywords, as their Swin-T configs spell them.
MMDET_SWIN = dict(embed_dims=32, depths=[2, 2, 2, 2], num_heads=[1, 2, 4, 8],
                  window_size=7, mlp_ratio=4, qkv_bias=True, qk_scale=None,
                  drop_rate=0., attn_drop_rate=0., drop_path_rate=0.2,
                  patch_norm=True, out_indices=(0, 1, 2, 3), with_cp=False)
MMPRETRAIN_SWIN = dict(arch=dict(embed_dims=32, depths=[2, 2, 2, 2],
                                 num_heads=[1, 2, 4, 8]),
                       img_size=224, drop_path_rate=0.2)
MMDET_PVT = dict(embed_dims=16, num_layers=[1, 2, 1, 1])
MMPRETRAIN_VIT = dict(arch=dict(embed_dims=64, num_layers=3, num_heads=2,
                                feedforward_channels=256),
                      img_size=224, patch_size=16)
MMSEG_VIT = dict(img_size=(512, 512), patch_size=16, embed_dims=64,
                 num_layers=4, num_heads=2, mlp_ratio=4, out_indices=(1, 3),
                 qkv_bias=True, drop_path_rate=0.1, with_cls_token=True,
                 norm_cfg=dict(type='LN', eps=1e-6),
                 interpolate_mode='bicubic')

#: (stock class, our class, keywords, the package whose class it stands for)
PAIRS = {
    'mmdet-swin': (MMDetSwin, AttnSwinTransformer,
                   dict(MMDET_SWIN, convert_weights=True), 'mmdet'),
    'mmseg-swin': (MMSegSwin, AttnSwinTransformer, MMDET_SWIN, 'mmseg'),
    'mmpretrain-swin': (MMPretrainSwin, AttnSwinTransformer, MMPRETRAIN_SWIN,
                        'mmpretrain'),
    'mmdet-pvt': (MMDetPVT, AttnPVT, MMDET_PVT, 'mmdet'),
    'mmdet-pvtv2': (MMDetPVTv2, AttnPVTv2, MMDET_PVT, 'mmdet'),
    'mmpretrain-vit': (MMPretrainViT, AttnViT, MMPRETRAIN_VIT, 'mmpretrain'),
    'mmpretrain-vit-featmap': (MMPretrainViT, AttnViT, dict(
        MMPRETRAIN_VIT, out_type='featmap', out_indices=(0, 2)),
                               'mmpretrain'),
    'mmpretrain-vit-avg': (MMPretrainViT, AttnViT, dict(
        MMPRETRAIN_VIT, out_type='avg_featmap', with_cls_token=False),
                           'mmpretrain'),
    'mmseg-vit': (MMSegViT, AttnViT, MMSEG_VIT, 'mmseg'),
    'mmseg-vit-final-norm': (MMSegViT, AttnViT, dict(
        MMSEG_VIT, final_norm=True, with_cls_token=False, pre_norm=True),
                             'mmseg'),
}


def _pair(name):
    """The stock class and the class of ``name``'s package, built with the
    stock keywords (the stock one's parameters perturbed, so no
    zero-initialised tensor hides a mismatch)."""
    stock_cls, ours_cls, kwargs, package = PAIRS[name]
    torch.manual_seed(0)
    stock = stock_cls(**kwargs)
    with torch.no_grad():
        for param in stock.parameters():
            param.add_(0.02 * torch.randn_like(param))
    ours = getattr(getattr(packages, package), ours_cls.__name__)(**kwargs)
    return stock, ours


def _outputs(model, x):
    model.eval()  # the stock classes' train() returns None
    with torch.no_grad():
        outs = model(x)
    return [o if torch.is_tensor(o) else torch.cat([o[0].flatten(1), o[1]],
                                                   1) for o in outs]


@pytest.mark.parametrize('name', list(PAIRS))
def test_stock_weights_load_strictly_and_compute_the_same(name):
    stock, ours = _pair(name)
    ours.load_state_dict(stock.state_dict(), strict=True)
    # mmdet's and mmseg's test sizes: 31x31 (below one patch per stage),
    # 33x33, 112x137 ...
    for hw in ((31, 31), (33, 33), (224, 224), (225, 353), (511, 511),
               (112, 137)):
        x = torch.randn(1, 3, *hw)
        try:
            theirs = _outputs(stock, x)
        # A size the stock class refuses (an assert, or a reduction conv
        # larger than its map): a clear error here.
        except (AssertionError, RuntimeError):
            with pytest.raises(ValueError, match='at least'):
                _outputs(ours, x)
            continue
        mine = _outputs(ours, x)
        assert [o.shape for o in mine] == [o.shape for o in theirs], hw
        for a, b in zip(theirs, mine):
            torch.testing.assert_close(b, a, rtol=0, atol=2e-5)


#: (stock type, our type, keywords, the package's MODELS): a config of that
#: package with only the backbone's type changed.
FROZEN_PAIRS = {
    'mmdet-swin': ('SwinTransformer', 'AttnSwinTransformer', MMDET_SWIN,
                   MMDET_MODELS),
    'mmseg-swin': ('SwinTransformer', 'AttnSwinTransformer', MMDET_SWIN,
                   MMSEG_MODELS),
    'mmpretrain-swin': ('SwinTransformer', 'AttnSwinTransformer', dict(
        MMPRETRAIN_SWIN, out_indices=(0, 1, 2, 3)), MMPRETRAIN_MODELS),
    'mmpretrain-swin-abs-pos': ('SwinTransformer', 'AttnSwinTransformer',
                                dict(MMPRETRAIN_SWIN, use_abs_pos_embed=True),
                                MMPRETRAIN_MODELS),
    'mmpretrain-vit': ('VisionTransformer', 'AttnViT', dict(
        MMPRETRAIN_VIT, out_type='avg_featmap'), MMPRETRAIN_MODELS),
    'mmpretrain-vit-cls': ('VisionTransformer', 'AttnViT', MMPRETRAIN_VIT,
                           MMPRETRAIN_MODELS),
}


@pytest.mark.parametrize('name', list(FROZEN_PAIRS))
def test_frozen_stages_freeze_what_the_stock_class_freezes(name):
    """For every ``k`` the stock class takes (-1 to its last), the config
    with only the type changed freezes the same parameters (mmpretrain's
    Swin counts from stage 0, mmdet's and mmseg's from the stem) and puts
    the same modules in eval mode. mmseg's ViT has no ``frozen_stages``."""
    stock_type, our_type, kwargs, registry = FROZEN_PAIRS[name]
    num_stages = registry.build(dict(type=our_type, **kwargs)).num_stages
    last = num_stages - 1 if registry is MMPRETRAIN_MODELS and \
        stock_type == 'SwinTransformer' else num_stages
    for k in range(-1, last + 1):
        stock = registry.build(dict(type=stock_type, **kwargs,
                                    frozen_stages=k))
        stock.train()
        ours = registry.build(dict(type=our_type, **kwargs,
                                   frozen_stages=k)).train()
        ours.load_state_dict(stock.state_dict(), strict=True)
        frozen = {n for n, p in ours.named_parameters() if not p.requires_grad}
        # The stock names of the frozen parameters, in our layout.
        expected = ours.migrate_layout({
            n: p for n, p in stock.named_parameters() if not p.requires_grad})
        assert frozen == set(expected), (k, sorted(frozen ^ set(expected)))
        # The modules the stock class puts in eval mode (dropouts
        # included) are in eval mode here too, where we have them.
        modules = dict(ours.named_modules())
        stock_eval = ours.migrate_layout(
            {f'{n}.weight': None for n, m in stock.named_modules()
             if n and not m.training})
        stock_eval = {n.rsplit('.', 1)[0] for n in stock_eval} & set(modules)
        assert all(not modules[n].training for n in stock_eval), k
    with pytest.raises(ValueError, match='frozen_stages'):
        registry.build(dict(type=our_type, **kwargs, frozen_stages=last + 1))


def test_plain_python_follows_the_documented_defaults():
    """No default scope is read at construction: the classes of
    ``vitattn_mm.models.backbones`` build the same network in any scope,
    and each package's registry holds its own class."""
    from mmengine.registry import DefaultScope
    for scope in (None, 'mmdet', 'mmseg', 'mmpretrain'):
        with DefaultScope.overwrite_default_scope(scope):
            swin = AttnSwinTransformer(**MMPRETRAIN_SWIN)
            vit = AttnViT(**MMPRETRAIN_VIT)
        assert swin.out_indices == (0, 1, 2, 3) and swin.pad_small_map
        assert vit.out_type == 'cls_token' and vit.final_norm
    assert MMDET_MODELS.get('AttnSwinTransformer') is AttnSwinTransformer
    assert MMSEG_MODELS.get('AttnSwinTransformer') is AttnSwinTransformer
    assert MMPRETRAIN_MODELS.get('AttnSwinTransformer') is \
        packages.mmpretrain.AttnSwinTransformer
    assert MMSEG_MODELS.get('AttnViT') is packages.mmseg.AttnViT
    assert MMPRETRAIN_MODELS.get('AttnViT') is AttnViT
    assert packages.mmpretrain.AttnSwinTransformer(
        **MMPRETRAIN_SWIN).out_indices == (3, )
    assert packages.mmseg.AttnViT(**MMPRETRAIN_VIT).out_type == 'featmap'


def test_mmdet_swin_frozen_stages_counts_like_mmdet():
    """The count mmdet, mmseg and every OpenMMLab ResNet use: 0 freezes the
    stem, 4 freezes everything (mmdet's Swin accepts it too)."""
    model = AttnSwinTransformer(**MMDET_SWIN, frozen_stages=0).train()
    frozen = {n.split('.')[0] for n, p in model.named_parameters()
              if not p.requires_grad}
    assert frozen == {'patch_embed'}
    model = AttnSwinTransformer(**MMDET_SWIN, frozen_stages=4).train()
    assert not any(p.requires_grad for p in model.parameters())


def test_bad_arguments_raise_as_the_stock_classes_do():
    with pytest.raises(TypeError, match='pretrained must be a str'):
        AttnSwinTransformer(**MMDET_SWIN, pretrained=123)
    with pytest.raises(TypeError):
        MMDetSwin(**MMDET_SWIN, pretrained=123)
    with pytest.raises(AssertionError, match='strides'):
        FLattenSwinTransformer(**dict(MMDET_SWIN, strides=(4, 2, 2, 1)))
    with pytest.raises(ValueError, match='init_cfg or pretrained'):
        AttnSwinTransformer(**MMDET_SWIN, pretrained='x.pth',
                            init_cfg=dict(type='Pretrained', checkpoint='y'))
    with pytest.raises(ValueError, match="out_type='cls_token'"):
        AttnViT(**MMPRETRAIN_VIT, with_cls_token=False)
    with pytest.raises(ValueError, match='stage_cfgs'):
        AttnSwinTransformer(**MMPRETRAIN_SWIN,
                            stage_cfgs=dict(block_cfgs=dict(window_size=12)))
    with pytest.raises(ValueError, match='layer_scale_init_value'):
        AttnViT(**MMPRETRAIN_VIT, layer_scale_init_value=0.1)


def test_a_value_a_family_cannot_honour_raises_naming_it():
    with pytest.raises(ValueError, match='qk_scale'):
        FLattenSwinTransformer(**dict(MMDET_SWIN, qk_scale=0.5),
                               num_flatten_stages=4)
    with pytest.raises(ValueError, match='attn_drop'):
        FLattenPVT(arch='tiny', attn_drop_rate=0.1)
    with pytest.raises(ValueError, match='sr_ratio'):
        AttnPVT(arch='tiny', attn_cfgs=dict(type='MeanShiftAttention'))
    with pytest.raises(ValueError, match='with_cls_token'):
        FLattenDeiT(with_cls_token=True, out_type='cls_token')
    with pytest.raises(ValueError, match='cannot run in shifted windows'):
        AttnSwinTransformer(**dict(MMDET_SWIN), attn_cfgs=dict(
            type='ShiftWindowMSA', window_msa='FocusedLinearAttention'))


@pytest.mark.parametrize('cls, kwargs', [
    (FLattenSwinTransformer, {}),
    (MSFSwinTransformer, dict(groups=2)),
])
def test_mmdet_keywords_build_the_same_network_as_arch(cls, kwargs):
    by_keywords = cls(**MMDET_SWIN, **kwargs)
    by_arch = cls(arch=dict(embed_dims=32, depths=[2, 2, 2, 2],
                            num_heads=[1, 2, 4, 8]),
                  drop_path_rate=0.2, **kwargs)
    assert by_keywords.state_dict().keys() == by_arch.state_dict().keys()
    by_arch.load_state_dict(by_keywords.state_dict())
    x = torch.randn(1, 3, 64, 96)
    for a, b in zip(_outputs(by_keywords, x), _outputs(by_arch, x)):
        assert torch.equal(a, b)


@pytest.mark.parametrize('cls, kwargs', [
    (FLattenPVT, MMDET_PVT),
    (LaViT, dict(MMDET_PVT, num_layers=[1, 2, 2, 2])),
])
def test_family_backbones_take_mmdet_pvt_keywords(cls, kwargs):
    """mmdet's PVT keywords (``num_layers``, base ``embed_dims``) size the
    families built on PVT; their own defaults (spatial reduction, padding,
    output norms) stay theirs."""
    model = cls(**kwargs).eval()
    assert [len(s.blocks) for s in model.stages] == kwargs['num_layers']
    assert model.num_features == [16, 32, 80, 128]
    outs = _outputs(model, torch.randn(1, 3, 65, 97))
    assert [tuple(o.shape[1:]) for o in outs] == [
        (16, 17, 25), (32, 9, 13), (80, 5, 7), (128, 3, 4)]


def test_vit_families_take_mmpretrain_deit_names():
    """mmpretrain's DeiT configs name the arch 'deit-tiny' and read one
    vector per image: the class-token-free families give the mean token in
    mmpretrain's classes, maps in mmseg's."""
    for name in ('FLattenDeiT', 'LessAttnViT'):
        model = getattr(packages.mmpretrain, name)(
            arch='deit-tiny', img_size=224, patch_size=16,
            drop_path_rate=0.1).eval()
        out, = _outputs(model, torch.randn(2, 3, 225, 353))
        assert out.shape == (2, 192)
    model = packages.mmseg.FLattenDeiT(arch='deit-tiny',
                                       out_indices=(2, 5, 8, 11)).eval()
    assert [o.shape for o in _outputs(model, torch.randn(1, 3, 64, 80))] == [
        (1, 192, 4, 5)] * 4


@pytest.mark.slow
def test_every_stock_config_takes_every_backbone_of_its_arch():
    """``tools/check_drop_in.py``: the installed packages' Swin, PVT, PVTv2
    and ViT/DeiT configs with only ``backbone.type`` changed build and run
    backbone + neck at 224x224 and 225x353; the one refusal is a class token
    asked of an attention that works on the token grid."""
    from vitattn_tools.drop_in import check_all
    cells = check_all(with_stock=False)
    assert len(cells) == 25
    assert [c for c in cells if not (c.ok or c.refusal)] == []
    assert {c.refusal.split(':')[0] for c in cells if c.refusal} == \
        {'with_cls_token=True'}
    swin_t = {c.backbone: c.backbone_params for c in cells
              if c.config.startswith('mmdet::swin/')}
    assert swin_t['AttnSwinTransformer'] == 27_520_698


@pytest.mark.slow
@pytest.mark.parametrize('path', [
    'configs/drop_in/mask-rcnn_flatten-swin-t_fpn_1x_coco.py',
    'configs/drop_in/mask-rcnn_msf-swin-t_fpn_1x_coco.py',
])
def test_mmdet_swin_config_with_only_the_type_changed_trains(
        path, run_recipe):
    """mmdet's stock Swin-T Mask R-CNN with only ``backbone.type`` changed
    trains an iteration and evaluates on the demo data."""
    from mmengine.config import Config

    from vitattn_tools.drop_in import stock_config
    cfg = Config.fromfile(path)
    stock = stock_config('mmdet', 'swin/mask-rcnn_swin-t-p4-w7_fpn_1x_coco.py')
    assert cfg.model.backbone.type != stock.model.backbone.type
    assert {k: v for k, v in cfg.model.backbone.items() if k != 'type'} == \
        {k: v for k, v in stock.model.backbone.items() if k != 'type'}
    cfg.model.backbone.init_cfg = None  # no download on the test machine
    runner, losses, metrics = run_recipe(cfg)
    assert type(runner.model.backbone).__name__ == cfg.model.backbone.type
    assert 'coco/bbox_mAP' in metrics


# ----------------------------------------- the stock packages' own checks
# mmdet's test_swin.py / test_pvt.py and mmpretrain's test_swin_transformer
# / test_vision_transformer.py (installed versions' tags), restated for
# every class of each architecture; mmseg's own files run unchanged in
# test_stock_tests.py.
def _of(*skeletons):
    return [n for n in registered_backbones()
            if skeleton_of(getattr(backbones, n)) in skeletons]


@pytest.mark.parametrize('name', _of(AttnSwinTransformer, AttnPVT,
                                     AttnPVTv2, AttnViT))
def test_refuses_what_the_stock_classes_refuse_with_their_exceptions(name):
    """The stock checks are asserts: the same arguments raise an
    AssertionError here too (also a ValueError / KeyError, as documented);
    a ``pretrained`` that is not a path, a TypeError."""
    cls = getattr(backbones, name)
    size = 'img_size' if skeleton_of(cls) is AttnViT else 'pretrain_img_size'
    with pytest.raises(TypeError):
        cls(pretrained=123)
    with pytest.raises(AssertionError, match='one or two entries'):
        cls(**{size: (224, 224, 224)})
    with pytest.raises(TypeError):
        cls(**{size: 512.})
    with pytest.raises(AssertionError, match='Unknown arch'):
        cls(arch='unknown')
    with pytest.raises(AssertionError, match='lacks'):
        cls(arch=dict(num_heads=[1]))
    with pytest.raises(AssertionError, match='out of range'):
        cls(out_indices=[0, 13])
    with pytest.raises(AssertionError, match='not both'):
        cls(pretrained='a.pth', init_cfg=dict(type='Pretrained',
                                              checkpoint='b.pth'))
    if skeleton_of(cls) is AttnSwinTransformer:
        with pytest.raises(AssertionError, match='strides'):
            cls(strides=(2, 2, 2, 2), patch_size=4)
    if skeleton_of(cls) is AttnViT:  # mmseg's keyword, in mmseg's class
        with pytest.raises(AssertionError, match='output_cls_token'):
            getattr(packages.mmseg, name)(with_cls_token=False,
                                          output_cls_token=True)


def _stock_grid(name, hw, stage):
    """A stage's grid as the stock layout computes it: mmdet's PVT drops
    partial patches; Swin, PVTv2, ViT and the corner-padded families pad
    them (FLatten-PVT and LaViT pad: a documented family property)."""
    if skeleton_of(getattr(backbones, name)) is AttnViT:
        return tuple(-(-s // 16) for s in hw)
    for stride in [4, 2, 2, 2][:stage + 1]:
        hw = tuple(s // stride if name == 'AttnPVT' else -(-s // stride)
                   for s in hw)
    return hw


@pytest.mark.parametrize('name', _of(AttnSwinTransformer, AttnPVT,
                                     AttnPVTv2, AttnViT))
def test_shapes_at_the_stock_tests_sizes(name):
    """mmdet's sizes (31x31: PVTv2 and Swin give 8/4/2/1 maps, 33x33,
    112x137) and mmseg's 32x32 ViT: every class gives the stock layout's
    grids, or says the minimum where the stock class cannot run either
    (mmdet's PVT below 32: its 8x8 reduction needs a whole patch)."""
    model = build_tiny(name)
    for hw in ((31, 31), (32, 32), (33, 33), (112, 137)):
        if min(hw) < model.min_input_size:
            with pytest.raises(ValueError, match='at least'):
                model(torch.randn(1, 3, *hw))
            continue
        with torch.no_grad():
            outs = model(torch.randn(1, 3, *hw))
        grids = [tuple(o.shape[-2:]) for o in outs]
        indices = model.out_indices if skeleton_of(
            type(model)) is not AttnViT else [0] * len(outs)
        assert grids == [_stock_grid(name, hw, i) for i in indices], hw
    assert build_tiny('AttnPVT').min_input_size == 32
    assert build_tiny('AttnPVTv2').min_input_size == 29


def _depth_profile(model, prefix=''):
    """{depth: parameter elements} as the model's get_layer_depth counts."""
    profile = {}
    for name, param in model.named_parameters():
        depth, total = model.get_layer_depth(prefix + name, prefix)
        profile[depth] = profile.get(depth, 0) + param.numel()
    return profile, total


@pytest.mark.parametrize('name', ['mmpretrain-vit-cls', 'mmpretrain-swin'])
def test_layer_depths_are_mmpretrains(name):
    """mmpretrain's layer-wise learning-rate decay reads ``get_layer_depth``:
    with the stock arch, each depth holds the same parameters as in
    mmpretrain's class (stem 0, block j at j + 1, the final norms last;
    Swin's patch merging with its stage's last block)."""
    stock_type, our_type, kwargs, registry = FROZEN_PAIRS[name]
    stock = registry.build(dict(type=stock_type, **kwargs))
    ours = registry.build(dict(type=our_type, **kwargs))
    assert _depth_profile(ours, 'backbone.') == _depth_profile(
        stock, 'backbone.')
    assert ours.get_layer_depth('head.fc.weight', 'backbone.') == \
        stock.get_layer_depth('head.fc.weight', 'backbone.')


@pytest.mark.parametrize('name', registered_backbones())
def test_layer_decay_constructor_rates(name):
    """mmpretrain's ``LearningRateDecayOptimWrapperConstructor`` on every
    backbone: block j of the network gets ``lr * rate ** (L - j - 1)`` with
    ``L = blocks + 2``; the stem the lowest rate, output norms the full."""
    from mmpretrain.engine.optimizers import \
        LearningRateDecayOptimWrapperConstructor as Constructor
    model = build_tiny(name)
    wrapper = Constructor(
        dict(type='OptimWrapper',
             optimizer=dict(type='AdamW', lr=1.0, weight_decay=0.05)),
        dict(layer_decay_rate=0.5))(model)
    rate = {g['param_name']: g['lr'] for g in wrapper.optimizer.param_groups}
    num_layers = sum(len(s.blocks) for s in model.stages) + 2
    assert set(rate) == {n for n, p in model.named_parameters()
                         if p.requires_grad}
    stem = [n for n in rate if n.startswith('patch_embed.')]
    assert stem and all(rate[n] == 0.5**(num_layers - 1) for n in stem)
    block = 0
    for i, stage in enumerate(model.stages):
        for j in range(len(stage.blocks)):
            block += 1
            names = [n for n in rate
                     if n.startswith(f'stages.{i}.blocks.{j}.')]
            assert names and all(rate[n] == 0.5**(num_layers - 1 - block)
                                 for n in names), (i, j)
    outputs = [n for n in rate if n.startswith(('norm', 'ln1.', 'ln2.'))]
    assert all(rate[n] == 1.0 for n in outputs)


def test_vit_api_of_the_stock_classes():
    """What code calls on mmpretrain's and mmseg's ViT: every arch name of
    mmpretrain's zoo with its sizes (``arch_settings``, ``num_layers``,
    ``layers``), and mmseg's static ``resize_pos_embed`` with its
    results."""
    for name, stock in MMPretrainViT.arch_zoo.items():
        with torch.device('meta'):
            ours = AttnViT(arch=name)
        assert ours.arch_settings == stock, name
        assert ours.num_layers == len(ours.layers) == stock['num_layers']
    table = torch.randn(1, 1 + 14 * 14, 8)
    for mode in ('bilinear', 'bicubic'):
        torch.testing.assert_close(
            AttnViT.resize_pos_embed(table, (16, 20), (14, 14), mode),
            MMSegViT.resize_pos_embed(table, (16, 20), (14, 14), mode))


@pytest.mark.parametrize('name', _of(AttnSwinTransformer, AttnPVT,
                                     AttnPVTv2, AttnViT))
def test_stock_dropout_keywords_are_applied(name):
    """``drop_rate`` and ``attn_drop_rate``, as the stock classes take
    them: in training two passes differ, in evaluation they agree. A linear
    attention refuses ``attn_drop_rate``, saying why."""
    x = torch.randn(1, 3, 64, 64)
    for keyword in ('drop_rate', 'attn_drop_rate'):
        try:
            model = build_tiny(name, **{keyword: 0.5})
        except ValueError as error:
            assert keyword == 'attn_drop_rate', error
            assert 'no attention weights to drop' in str(error)
            continue
        with torch.no_grad():
            model.train()
            first, second = model(x), model(x)
            assert any(not torch.equal(a, b) for a, b in zip(first, second))
            model.eval()
            assert all(torch.equal(a, b) for a, b in zip(model(x), model(x)))
