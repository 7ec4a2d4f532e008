"""Training-engine pieces: CPU mixed precision and the untrained baseline."""
import torch
import torch.nn as nn
from mmengine.optim import build_optim_wrapper

import vitattn_mm  # noqa: F401


class TwoPart(nn.Module):

    def __init__(self):
        super().__init__()
        self.backbone = nn.Linear(4, 4)
        self.head = nn.Linear(4, 1)
        self.seen = {}

    def forward(self, x):
        feat = self.backbone(x)
        self.seen['feat'] = feat.dtype
        out = self.head(feat)
        self.seen['out'] = out.dtype
        return out


def test_autocast_wrapper_limits_bf16_to_named_modules():
    model = TwoPart()
    wrapper = build_optim_wrapper(
        model,
        dict(type='AutocastOptimWrapper', modules=('backbone', ),
             optimizer=dict(type='SGD', lr=0.1)))
    with wrapper.optim_context(model):
        loss = model(torch.randn(3, 4)).sum()
    # the backbone ran in bf16 but handed fp32 on; the head ran in fp32
    assert model.seen == {'feat': torch.float32, 'out': torch.float32}
    wrapper.update_params(loss)
    assert model.backbone.weight.grad is None  # zeroed after the step
    hooks = model.backbone._forward_hooks, model.backbone._forward_pre_hooks
    assert not any(hooks), 'hooks must not outlive the step'


def test_autocast_wrapper_whole_model():
    model = TwoPart()
    wrapper = build_optim_wrapper(
        model, dict(type='AutocastOptimWrapper',
                    optimizer=dict(type='SGD', lr=0.1)))
    with wrapper.optim_context(model):
        model(torch.randn(3, 4))
    assert model.seen == {'feat': torch.bfloat16, 'out': torch.bfloat16}
