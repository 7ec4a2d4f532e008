"""Shared building blocks: windows, relative position bias, positional
embeddings, the backbone base class."""
import pytest
import torch
from mmpretrain.models.utils.attention import ShiftWindowMSA, WindowMSA

from vitattn_mm.models.layers import (RelativePositionBias, ResizablePosEmbed,
                                      VitAttnBackbone, crop_tokens,
                                      pad_to_multiple, shifted_window_mask,
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


def test_shifted_window_mask_matches_mmpretrain():
    reference = ShiftWindowMSA(8, 2, window_size=4, shift_size=2)
    expected = reference.get_attn_mask((12, 8), 4, 2, torch.device('cpu'))
    ours = shifted_window_mask((12, 8), (4, 4), (2, 2))
    torch.testing.assert_close(ours, expected)


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


def test_pos_embed_resize_and_cache():
    embed = ResizablePosEmbed(6, (4, 4))
    assert embed((4, 4)) is embed.weight
    with torch.no_grad():
        first = embed((5, 7))
        assert first.shape == (1, 35, 6)
        assert embed((5, 7)) is first  # cached at inference
        embed.weight.add_(1.0)  # an optimizer step invalidates the cache
        assert not torch.equal(embed((5, 7)), first)
    out = embed((5, 7))  # training: part of the graph
    out.sum().backward()
    assert embed.weight.grad is not None


def test_pos_embed_resizes_checkpoint_on_load():
    small = ResizablePosEmbed(3, (2, 2))
    big = ResizablePosEmbed(3, (4, 4))
    small.load_state_dict(big.state_dict())
    assert small.weight.shape == (1, 4, 3)


class _Zoo(VitAttnBackbone):
    arch_zoo = {('t', 'tiny'): dict(depth=2), 'b': dict(depth=4)}
    arch_keys = ('depth', )
    min_input_size = 32

    def forward(self, x):
        self.check_input_size(x)
        return x

    def _freeze_stages(self):
        pass


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
