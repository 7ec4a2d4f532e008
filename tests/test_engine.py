"""Training-engine pieces: CPU mixed precision, the untrained baseline and
exact resuming."""
import pytest
import torch
import torch.nn as nn
from mmengine.optim import build_optim_wrapper

import vitattn_mm  # noqa: F401

DEMO_CONFIG = 'configs/demo/mask-rcnn_flatten-swin-nano_fpn_8e_demo.py'


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


def test_random_states_round_trip_through_a_weights_only_file(tmp_path):
    import random

    import numpy as np

    from vitattn_mm.engine.hooks import get_random_states, set_random_states
    states = get_random_states()
    draws = (random.random(), np.random.rand(), torch.rand(1))
    torch.save(states, tmp_path / 'states.pth')
    set_random_states(torch.load(tmp_path / 'states.pth', weights_only=True))
    assert (random.random(), np.random.rand(), torch.rand(1)) == draws


def test_validation_does_not_draw_from_the_training_generators():
    from vitattn_mm.engine import RandomStateHook
    hook = RandomStateHook()
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    hook.before_val(runner=None)
    torch.rand(5)  # e.g. the validation data loader's seed
    hook.after_val(runner=None)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.slow
def test_resumed_run_reproduces_the_uninterrupted_one(demo_data, tmp_path):
    """tools' config, 4 iterations straight vs 3 + resume: the same losses
    at every iteration and bit-identical weights. Exercises drop path,
    random flips, RPN / RoI sampling, two data-loader workers, an epoch
    boundary inside the replayed batches and a validation in between."""
    from mmengine.runner import Runner

    from vitattn_tools.runtime import load_tool_config

    def train(work_dir, max_iters, resume=False, **options):
        cfg = load_tool_config(
            DEMO_CONFIG, str(tmp_path / work_dir), dict(
                {'custom_hooks': [],
                 'model.backbone.drop_path_rate': 0.2,
                 'train_dataloader.num_workers': 2,
                 'train_dataloader.dataset.indices': 4,  # 2 batches/epoch
                 'val_dataloader.dataset.indices': 2}, **options),
            demo_data, max_iters)
        cfg.resume = resume
        runner = Runner.from_cfg(cfg)
        runner.train()
        losses = runner.message_hub.get_scalar('train/loss').data[0]
        weights = runner.model.state_dict()
        return losses, weights

    straight_losses, straight = train('straight', 4,
                                      **{'train_cfg.val_interval': 2})
    train('split', 3)
    split_losses, split = train('split', 4, resume=True)

    assert len(straight_losses) == 4
    assert split_losses.tolist() == straight_losses.tolist()
    assert max((straight[k] - split[k]).abs().max().item()
               for k in straight if straight[k].is_floating_point()) == 0
