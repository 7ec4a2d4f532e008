"""Shared building blocks: windows and the window wrapper, relative
position bias, positional embeddings, padding, the softmax kernel, the
``attn_cfgs`` grammar, the backbone base class."""
import pytest
import torch
from mmcv.cnn.bricks.transformer import AdaptivePadding
from mmpretrain.models.utils.attention import ShiftWindowMSA, WindowMSA

from tiny_backbones import ARCHS
from vitattn_mm.models.attentions import WindowedAttention
from vitattn_mm.models.attentions import WindowMSA as OurWindowMSA
from vitattn_mm.models.attentions import pass_on, softmax_attention
from vitattn_mm.models.backbones import AttnPVT
from vitattn_mm.models.attentions.cfgs import resolve_attn_cfgs
from vitattn_mm.models.backbones.base_backbone import StagedBackbone
from vitattn_mm.models.layers import (CornerPadding, RelativePositionBias,
                                      ResizablePosEmbed, crop_tokens,
                                      pad_to_multiple, relative_position_bias,
                                      resize_pos_embed, shifted_window_mask,
                                      window_partition, window_reverse)


@pytest.mark.parametrize('hw', [(7, 7), (9, 13), (1, 20)])
def test_window_partition_round_trip(hw):
    x = torch.randn(2, hw[0] * hw[1], 5)
    padded, hw_pad = pad_to_multiple(x, hw, (7, 7))
    assert hw_pad[0] % 7 == 0 and hw_pad[1] % 7 == 0
    windows = window_partition(padded, (7, 7))
    assert windows.shape[1:] == (49, 5)
    back = crop_tokens(window_reverse(windows, hw_pad, (7, 7)), hw)
    torch.testing.assert_close(back, x, rtol=0, atol=0)


@pytest.mark.parametrize('hw, window, shift', [
    ((12, 8), 4, 2), ((7, 7), 7, 3), ((14, 35), 7, 3), ((28, 21), 7, 1),
    ((8, 16), 4, 3), ((203, 322), 7, 3)])
def test_shifted_window_mask_matches_mmpretrain(hw, window, shift):
    reference = ShiftWindowMSA(8, 2, window_size=window, shift_size=shift)
    expected = reference.get_attn_mask(hw, window, shift,
                                       torch.device('cpu'))
    ours = shifted_window_mask(hw, (window, window), (shift, shift))
    assert ours.dtype == expected.dtype
    torch.testing.assert_close(ours, expected, rtol=0, atol=0)
    # +0.0 where tokens may attend, as mmpretrain's (not -0.0).
    assert not ours[ours == 0].signbit().any()


@pytest.mark.parametrize('shift', [(0, 0), (7, 3), (3, -1)])
def test_shifted_window_mask_refuses_what_has_no_mask(shift):
    """No shift (mmpretrain returns no mask) or a shift of a whole window
    or more: refused by name."""
    with pytest.raises(ValueError, match=r'shift in \[1, window\)'):
        shifted_window_mask((14, 14), (7, 7), shift)


def test_relative_position_bias_matches_mmpretrain():
    reference = WindowMSA(8, (5, 5), num_heads=2)
    ours = RelativePositionBias((5, 5), num_heads=2)
    ours.relative_position_bias_table.data.copy_(
        reference.relative_position_bias_table)
    index = reference.relative_position_index
    expected = reference.relative_position_bias_table[index.view(-1)].view(
        25, 25, -1).permute(2, 0, 1)
    torch.testing.assert_close(ours(), expected)
    # Derived buffers stay out of checkpoints.
    assert list(ours.state_dict()) == ['relative_position_bias_table']
    # Swin's WindowMSA keeps the table and the saved index as mmpretrain's
    # does, and reads the bias through the same function.
    swin = OurWindowMSA(8, 2, window_size=(5, 5))
    swin.load_state_dict(reference.state_dict(), strict=True)
    torch.testing.assert_close(relative_position_bias(swin), expected)


def test_pos_embed_resize():
    embed = ResizablePosEmbed(6, (4, 4))
    assert embed((4, 4)) is embed.weight
    with torch.no_grad():
        first = embed((5, 7))
        assert first.shape == (1, 35, 6)
        assert torch.equal(embed((5, 7)), first)
        embed.weight.add_(1.0)  # an optimizer step changes the result
        assert not torch.equal(embed((5, 7)), first)
    out = embed((5, 7))  # training: part of the graph
    out.sum().backward()
    assert embed.weight.grad is not None


def test_pos_embed_resizes_checkpoint_on_load():
    """A position table learned on another grid is resized when the
    backbone loads it (any loader: here plain ``load_state_dict``)."""
    arch = ARCHS['pvt-1111-w8']
    torch.manual_seed(0)
    small = AttnPVT(arch, pretrain_img_size=64)
    big = AttnPVT(arch, pretrain_img_size=128)
    small.load_state_dict(big.state_dict(), strict=True)
    table = small.stages[0].pos_embed
    assert table.grid_hw == (16, 16) and table.weight.shape == (1, 256, 8)
    torch.testing.assert_close(
        table.weight,
        resize_pos_embed(big.stages[0].pos_embed.weight, (32, 32),
                         (16, 16)))


class _Zoo(StagedBackbone):
    arch_zoo = {('t', 'tiny'): dict(depth=2), 'b': dict(depth=4)}
    arch_keys = ('depth', )
    min_input_size = 32

    def __init__(self):
        super().__init__(num_stages=1, out_indices=0)

    def forward(self, x):
        self.check_input_size(x)
        return x


def test_arch_zoo_errors_list_valid_names():
    assert _Zoo.parse_arch('tiny') == dict(depth=2)
    with pytest.raises(KeyError, match="Valid arch names: t, tiny, b"):
        _Zoo.parse_arch('huge')
    with pytest.raises(KeyError, match="lacks \\['depth'\\]"):
        _Zoo.parse_arch(dict(width=3))


def test_out_indices_and_min_size_errors():
    assert _Zoo.normalize_out_indices((-1, 0), 4) == (0, 3)
    with pytest.raises(ValueError, match='out of range'):
        _Zoo.normalize_out_indices((4, ), 4)
    with pytest.raises(ValueError, match='at least 32x32'):
        _Zoo()(torch.zeros(1, 3, 16, 64))


def test_train_returns_self():
    model = _Zoo()
    assert model.train() is model and model.eval() is model


@pytest.mark.parametrize('pad_small_map', [True, False])
@pytest.mark.parametrize('hw', [(7, 7), (9, 13), (14, 21), (4, 10)])
@pytest.mark.parametrize('shift', [0, 3])
def test_windowed_window_msa_is_mmpretrains_shift_window_msa(
        hw, shift, pad_small_map):
    """The window wrapper around Swin's WindowMSA computes what mmpretrain's
    ShiftWindowMSA does (mmdet's is its ``pad_small_map=True``), and
    refuses what it refuses."""
    torch.manual_seed(0)
    ref = ShiftWindowMSA(16, 2, window_size=7, shift_size=shift,
                         pad_small_map=pad_small_map).eval()
    ours = WindowedAttention(16, 2, window_size=7, shift_size=shift,
                             pad_small_map=pad_small_map).eval()
    ours.load_state_dict(ref.state_dict(), strict=True)
    x = torch.randn(2, hw[0] * hw[1], 16)
    if min(hw) < 7 and not pad_small_map:
        with pytest.raises(AssertionError):
            ref(x, hw)
        with pytest.raises(ValueError, match='smaller than the window'):
            ours(x, hw)
        return
    out, state = ours(x, hw)
    assert state is None  # stateless: hands on the state it got
    torch.testing.assert_close(out, ref(x, hw), rtol=0, atol=1e-6)
    assert isinstance(ours.w_msa, OurWindowMSA)


def test_window_wrapper_refuses_to_shift_an_attention_without_mask():
    with pytest.raises(ValueError, match='cannot run in shifted windows: '
                       'FocusedLinearAttention takes no additive mask'):
        WindowedAttention(16, 2, shift=True,
                          window_msa='FocusedLinearAttention')
    unshifted = WindowedAttention(16, 2, window_size=(4, 5),
                                  window_msa='FocusedLinearAttention')
    assert unshifted.w_msa.positional_encoding.grid_hw == (4, 5)


@pytest.mark.parametrize('hw', [(8, 8), (9, 13), (1, 3)])
def test_corner_padding_equals_mmcv(hw):
    ref = AdaptivePadding(kernel_size=4, stride=4, padding='corner')
    x = torch.randn(1, 2, *hw)
    assert torch.equal(CornerPadding(4)(x), ref(x))


def test_padding_copies_nothing_eagerly_where_none_is_needed(monkeypatch):
    """A zero amount returns the input itself (``F.pad`` would copy it);
    while a graph is captured every pad is applied, zero or not."""
    from vitattn_mm.models.layers import padding
    x = torch.randn(1, 2, 8, 12)
    assert CornerPadding(4)(x) is x
    assert CornerPadding(4)(x[..., :9]).shape[-2:] == (8, 12)
    tokens = torch.randn(2, 8 * 12, 3)
    padded, hw = pad_to_multiple(tokens, (8, 12), (4, 4))
    assert hw == (8, 12) and padded.data_ptr() == tokens.data_ptr()
    assert crop_tokens(padded, (8, 12)).data_ptr() == tokens.data_ptr()
    monkeypatch.setattr(padding, 'capturing', lambda: True)
    out = CornerPadding(4)(x)
    assert out is not x and torch.equal(out, x)


def test_softmax_kernel_fused_equals_explicit():
    q, k, v = (torch.randn(2, 3, 5, 7, 8) for _ in range(3))
    bias = torch.randn(3, 1, 7, 7)  # (windows, 1, N, N)
    torch.testing.assert_close(
        softmax_attention(q, k, v, bias, scale=0.3),
        softmax_attention(q, k, v, bias, scale=0.3, fused=False))


def test_attn_cfgs_grammar():
    """A dict (or None) serves every stage; a list one entry per stage: a
    dict for its blocks, a list per block, None the skeleton's own."""
    own = dict(type='Own')
    a, b = dict(type='A'), dict(type='B')
    arch, depths, grids = dict(depths=[1, 2]), [1, 2], [(8, 8), (4, 4)]

    def resolve(cfgs, default=own):
        return resolve_attn_cfgs(cfgs, arch, depths, grids, default)

    assert resolve(None) == [[own], [own, own]]
    assert resolve(a) == [[a], [a, a]]
    assert resolve([None, [a, b]]) == [[own], [a, b]]
    assert resolve([None, None],
                   lambda i, j: dict(type=f'{i}{j}'))[1] == [dict(type='10'),
                                                             dict(type='11')]
    # A family's plan is called with the arch and the pretraining grids.
    seen = []
    assert resolve(lambda arch_, grids_: seen.append((arch_, grids_)) or
                   [a, None]) == [[a], [own, own]]
    assert seen == [(arch, grids)]
    with pytest.raises(ValueError, match='3 entries for 2 stages'):
        resolve([a, a, a])
    with pytest.raises(ValueError, match='stage 1 lists 1 blocks; the stage '
                       'has 2'):
        resolve([a, [b]])


def test_pass_on_gives_what_an_attention_takes_and_refuses_the_rest():
    cfg = pass_on({}, OurWindowMSA, attn_drop=0.1, sr_ratio=0)
    assert cfg == dict(attn_drop=0.1)
    with pytest.raises(ValueError, match='sr_ratio=2 cannot be honoured'):
        pass_on({}, OurWindowMSA, sr_ratio=2)


@pytest.mark.parametrize('uses', ['both', 'first', 'second'])
def test_autocast_once_gives_autocasts_values_and_gradients(uses):
    """Tokens that reach two projections under bf16 autocast, cast once
    (``autocast_once``, as SpatialReductionAttention's and FLatten's
    q / kv take them): the projections' outputs and every gradient are
    bitwise autograd's through autocast's two casts, with either output
    alone too; without autocast the tokens pass as they are."""
    from vitattn_mm.models.layers.common import autocast_once
    torch.manual_seed(0)
    q, kv = torch.nn.Linear(16, 16), torch.nn.Linear(16, 32)
    tokens = torch.randn(2, 7, 16, requires_grad=True)
    results = []
    for once in (True, False):
        # Activations, not a leaf (whose cast autocast would cache).
        x = tokens * 1
        with torch.autocast('cpu', dtype=torch.bfloat16):
            a, b = autocast_once(x) if once else (x, x)
            if once:
                assert a.dtype == b.dtype == torch.bfloat16
            outs = {'first': [q(a)], 'second': [kv(b)]}
            outs['both'] = outs['first'] + outs['second']
            loss = sum((o.float() * o.float().cos()).sum()
                       for o in outs[uses])
        results.append((outs[uses], torch.autograd.grad(
            loss, [tokens, *q.parameters(), *kv.parameters()],
            allow_unused=True)))
    (outs, grads), (outs_ref, grads_ref) = results
    for got, want in zip(outs + list(grads), outs_ref + list(grads_ref)):
        assert (got is None) == (want is None)
        if got is not None:
            assert got.dtype == want.dtype and torch.equal(got, want)
    a, b = autocast_once(x)
    assert a is x and b is x


@pytest.mark.parametrize('identity_dtype,branch_dtype', [
    (torch.float64, torch.float64), (torch.float32, torch.float32),
    (torch.float32, torch.bfloat16), (torch.bfloat16, torch.bfloat16)])
def test_residual_drop_path_is_mmcvs(identity_dtype, branch_dtype):
    """``add_residual`` in training: mmcv's ``DropPath`` then the sum,
    in one pass. The same samples dropped for the same seed; the sum and
    the branch's gradient equal the exact ``identity + branch * mask /
    keep`` within the rounding of their dtype, the scaled branch and its
    gradient without a bias (a scale rounded to bf16 would shorten every
    kept branch by 0.16%); the identity's gradient passed as it is."""
    from mmcv.cnn.bricks import DropPath

    from vitattn_mm.models.layers.drop_path import add_residual
    drop_path = DropPath(0.1).train()
    keep = 0.9
    torch.manual_seed(0)
    identity = torch.randn(64, 37, 24, dtype=identity_dtype)
    branch = torch.randn(64, 37, 24, dtype=branch_dtype)
    grad = torch.randn(64, 37, 24, dtype=torch.promote_types(
        identity_dtype, branch_dtype))
    torch.manual_seed(1)
    expected = identity + drop_path(branch)
    torch.manual_seed(1)
    i, b = (t.clone().requires_grad_() for t in (identity, branch))
    out = add_residual(i, b, drop_path)
    out.backward(grad)
    assert out.dtype == expected.dtype
    # The draw is mmcv's: the same samples dropped (and some kept).
    dropped = (expected == identity).flatten(1).all(1)
    assert 0 < dropped.sum() < len(dropped)
    assert torch.equal((out.detach() == identity).flatten(1).all(1), dropped)
    mask = (~dropped).double()[:, None, None]
    scaled = branch.double() * mask / keep
    eps = torch.finfo(out.dtype).eps
    err = (out.detach().double() - identity.double() - scaled).abs()
    assert (err <= 2 * eps * (identity.double().abs() + scaled.abs())).all()
    assert b.grad.dtype == branch_dtype and i.grad.dtype == identity_dtype
    assert torch.equal(i.grad, grad.to(identity_dtype))
    # The scaled branch alone (a zero stream) and its gradient: within an
    # ulp, unbiased (a bf16 scale: -1.6e-3).
    torch.manual_seed(1)
    alone = add_residual(torch.zeros_like(identity), branch, drop_path)
    for got, want in ((alone, scaled), (b.grad, grad.double() * mask / keep)):
        kept = want != 0
        rel = (got.double()[kept] - want[kept]) / want[kept]
        assert rel.abs().max() <= torch.finfo(got.dtype).eps
        assert abs(rel.mean()) < 1e-4


def test_residual_without_drop_path_is_the_sum():
    """Evaluation, a rate of 0 and ``nn.Identity``: the plain sum, and no
    random number drawn; another stochastic-depth module (timm's may not
    rescale) keeps its own rule."""
    from mmcv.cnn.bricks import DropPath

    from vitattn_mm.models.layers.drop_path import add_residual
    identity, branch = torch.randn(2, 5, 3), torch.randn(2, 5, 3)
    for module in (DropPath(0.3).eval(), DropPath(0.).train(),
                   torch.nn.Identity().train()):
        state = torch.random.get_rng_state()
        assert torch.equal(add_residual(identity, branch, module),
                           identity + branch)
        assert torch.equal(torch.random.get_rng_state(), state)

    class HalfPath(torch.nn.Module):
        drop_prob = 0.5

        def forward(self, x):
            return x / 2

    assert torch.equal(add_residual(identity, branch, HalfPath().train()),
                       identity + branch / 2)
