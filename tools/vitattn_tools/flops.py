"""Parameter and FLOP counting for whole detectors, segmentors, classifiers.

FLOPs are multiply-adds (the convention of every table we compare with and
of :mod:`mmengine.analysis`). Two counting conventions are reported:

* ``full``: everything mmengine counts, plus the attention products it
  misses (``scaled_dot_product_attention`` counts zero in mmengine) and
  robust handles for batched ``matmul`` / ``einsum``. The FLatten paper's
  convention (Mask R-CNN Swin-T 800x1280 = 267.0 G).
* ``no_attn_matmul``: the same without the attention products (``matmul``,
  ``bmm``, ``baddbmm``, ``einsum``, SDPA), i.e. what mmcv 1.x's module-hook
  counter measured and what older tables (PVT, L2ViT, LaViT) report
  (Mask R-CNN Swin-T = 263.9 G).

Both come from one trace: the attention operators are tallied separately.
"""
import contextlib
import math
import types
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn as nn
from mmengine.analysis import FlopAnalyzer, parameter_count
from mmengine.analysis.jit_handles import get_shape
from mmengine.config import Config
from mmengine.model import revert_sync_batchnorm
from mmengine.registry import MODELS, init_default_scope

from .tasks import task_of

#: Default input (H, W) per task, as in the papers' tables.
DEFAULT_SHAPES = {
    'detection': (800, 1280),
    'segmentation': (512, 2048),
    'classification': (224, 224),
}

#: Operators that form attention products (left out by ``no_attn_matmul``).
ATTENTION_OPS = ('matmul', 'bmm', 'baddbmm', 'einsum',
                 'scaled_dot_product_attention')

CONVENTIONS = ('full', 'no_attn_matmul')


def _matmul_handle(inputs, outputs) -> int:
    """Batched/broadcast matmul: every output element costs K MACs."""
    k = get_shape(inputs[0])[-1]
    return math.prod(get_shape(outputs[0])) * k


def _baddbmm_handle(inputs, outputs) -> int:
    return math.prod(get_shape(outputs[0])) * get_shape(inputs[1])[-1]


def _sdpa_handle(inputs, outputs) -> int:
    """``softmax(Q K^T) V``: B*H*Nq*Nk*(Dqk + Dv) multiply-adds."""
    q, k, v = (get_shape(x) for x in inputs[:3])
    return math.prod(q[:-1]) * k[-2] * (q[-1] + v[-1])


def _einsum_handle(inputs, outputs) -> int:
    """Exact MACs of a two-operand einsum: the product of all index sizes.

    (mmengine's fallback allocates numpy arrays of the operand shapes.)
    """
    equation = inputs[0].toIValue().replace(' ', '')
    shapes = [get_shape(v) for v in inputs[1].node().inputs()]
    lhs = equation.split('->')[0].split(',')
    if len(lhs) != len(shapes) or '.' in equation:
        raise NotImplementedError(f'einsum {equation} is not supported')
    sizes = {}
    for letters, shape in zip(lhs, shapes):
        sizes.update(zip(letters, shape))
    if len(shapes) == 1:
        return 0
    return math.prod(sizes.values())


@dataclass
class Complexity:
    """Params and FLOPs of one model, split by top-level part."""
    config: str
    task: str
    input_shape: Tuple[int, int]
    params: Dict[str, int] = field(default_factory=dict)
    flops: Dict[str, int] = field(default_factory=dict)
    attn_flops: Dict[str, int] = field(default_factory=dict)

    @property
    def total_params(self) -> int:
        return sum(self.params.values())

    def total_flops(self, convention: str = 'full') -> int:
        if convention not in CONVENTIONS:
            raise ValueError(f'convention must be one of {CONVENTIONS}')
        total = sum(self.flops.values())
        if convention == 'no_attn_matmul':
            total -= sum(self.attn_flops.values())
        return total

    def grouped(self, convention: str = 'full') -> Dict[str, Tuple[int, int]]:
        """``{backbone, neck, heads}`` -> (params, flops)."""
        groups: Dict[str, List[int]] = {}
        for part in self.params:
            group = part if part in ('backbone', 'neck') else 'heads'
            flops = self.flops.get(part, 0)
            if convention == 'no_attn_matmul':
                flops -= self.attn_flops.get(part, 0)
            acc = groups.setdefault(group, [0, 0])
            acc[0] += self.params[part]
            acc[1] += flops
        return {k: tuple(v) for k, v in groups.items()}


class _TensorForward(nn.Module):
    """Calls a task model in ``mode='tensor'`` with one dummy data sample."""

    def __init__(self, model: nn.Module, data_sample=None):
        super().__init__()
        self.model = model
        self.data_samples = None if data_sample is None else [data_sample]

    def forward(self, inputs):
        if self.data_samples is None:
            return self.model(inputs, mode='tensor')
        return self.model(inputs, self.data_samples, mode='tensor')


def _data_sample(task: str, shape: Tuple[int, int]):
    meta = dict(img_shape=shape, ori_shape=shape, pad_shape=shape,
                batch_input_shape=shape, scale_factor=(1.0, 1.0))
    if task == 'detection':
        from mmdet.structures import DetDataSample
        return DetDataSample(metainfo=meta)
    if task == 'segmentation':
        from mmseg.structures import SegDataSample
        return SegDataSample(metainfo=meta)
    return None


#: RoIs the mask heads see in a dummy forward (mmdet 2.x ``forward_dummy``
#: and mmdet 3.x ``StandardRoIHead.forward``).
MASK_ROIS_COUNTED = 100


def _cascade_forward_counted(self, x, rpn_results_list, batch_data_samples):
    """``CascadeRoIHead.forward`` with the mask heads on the first
    :data:`MASK_ROIS_COUNTED` RoIs, as every published Cascade Mask R-CNN
    count (Swin, FLatten) was made. mmdet 3.x runs them on all 1000
    proposals, which triples the head cost (~1430 G at 800x1280)."""
    from mmdet.structures.bbox import bbox2roi
    img_metas = [sample.metainfo for sample in batch_data_samples]
    proposals = [results.bboxes for results in rpn_results_list]
    rois = bbox2roi(proposals)
    rois, cls_scores, bbox_preds = self._refine_roi(
        x, rois, img_metas, tuple(len(p) for p in proposals))
    results = (cls_scores, bbox_preds)
    if self.with_mask:
        mask_rois = torch.cat(rois)[:MASK_ROIS_COUNTED]
        results += tuple(
            self._mask_forward(stage, x, mask_rois)['mask_preds']
            for stage in range(self.num_stages))
    return results


@contextlib.contextmanager
def _published_counting_rules(model: nn.Module):
    """Temporarily make tensor-mode forwards count what the papers count."""
    patched = []
    try:
        from mmdet.models.roi_heads import CascadeRoIHead
    except ImportError:  # pragma: no cover - mmdet is a dependency
        CascadeRoIHead = None
    for module in model.modules():
        if (CascadeRoIHead is not None
                and type(module).forward is CascadeRoIHead.forward):
            module.forward = types.MethodType(_cascade_forward_counted,
                                              module)
            patched.append(module)
    try:
        yield
    finally:
        for module in patched:
            del module.forward


def build_model(cfg: Config) -> nn.Module:
    """Build ``cfg.model`` in its scope, without loading any weights."""
    init_default_scope(cfg.get('default_scope'))
    model_cfg = cfg.model.copy()
    model = MODELS.build(model_cfg)
    return revert_sync_batchnorm(model)


def count_complexity(cfg: Config,
                     shape: Optional[Sequence[int]] = None,
                     model: Optional[nn.Module] = None,
                     config_name: str = '') -> Complexity:
    """Count params and FLOPs of a config's whole model.

    Args:
        cfg (Config): An mmdet / mmseg / mmpretrain config.
        shape (tuple[int, int], optional): Input (H, W). Default: the
            task's default in :data:`DEFAULT_SHAPES`.
        model (nn.Module, optional): Already built model. Default: None.
        config_name (str): Name to report. Default: ''.

    Returns:
        Complexity: Per-part params and FLOPs (both conventions).
    """
    task = task_of(cfg)
    shape = tuple(shape) if shape is not None else DEFAULT_SHAPES[task]
    if model is None:
        model = build_model(cfg)
    model.eval()
    inputs = torch.randn(1, 3, *shape)
    wrapper = _TensorForward(model, _data_sample(task, shape))
    analyzer = FlopAnalyzer(wrapper, (inputs, ))
    analyzer.set_op_handle(
        **{
            'aten::matmul': _matmul_handle,
            'aten::baddbmm': _baddbmm_handle,
            'aten::einsum': _einsum_handle,
            'aten::scaled_dot_product_attention': _sdpa_handle,
        })
    analyzer.unsupported_ops_warnings(False)
    analyzer.uncalled_modules_warnings(False)
    analyzer.tracer_warnings('none')
    # A TorchScript trace records what eager mode computes at this size
    # (the size-aware primitives build size-independent graphs only for
    # ONNX export and torch.compile).
    with torch.no_grad(), _published_counting_rules(model):
        by_module_op = analyzer.by_module_and_operator()

    result = Complexity(config=config_name, task=task, input_shape=shape)
    param_counts = parameter_count(model)
    for name, _ in model.named_children():
        if name == 'data_preprocessor':
            continue
        result.params[name] = param_counts.get(name, 0)
        ops = by_module_op.get(f'model.{name}', {})
        result.flops[name] = int(sum(ops.values()))
        result.attn_flops[name] = int(
            sum(ops.get(op, 0) for op in ATTENTION_OPS))
    # The tracer attributes some functional calls (e.g. mmseg's resize in
    # decode heads) to the top-level model instead of the child that made
    # them. They belong to the heads: keep them, under 'other'.
    total_ops = by_module_op.get('', {})
    other = int(sum(total_ops.values())) - sum(result.flops.values())
    if other:
        result.params.setdefault('other', 0)
        result.flops['other'] = other
        result.attn_flops['other'] = int(
            sum(total_ops.get(op, 0) for op in ATTENTION_OPS)) - sum(
                result.attn_flops.values())
    return result


def count_backbone_macs(backbone: nn.Module, shape: Sequence[int]) -> int:
    """Multiply-adds of one ``backbone`` forward pass on a ``1 x 3 x H x W``
    input, attention matmuls included (the counter and handles of
    :func:`count_complexity`)."""
    backbone.eval()
    analyzer = FlopAnalyzer(backbone, (torch.randn(1, 3, *shape), ))
    analyzer.set_op_handle(
        **{
            'aten::matmul': _matmul_handle,
            'aten::baddbmm': _baddbmm_handle,
            'aten::einsum': _einsum_handle,
            'aten::scaled_dot_product_attention': _sdpa_handle,
        })
    analyzer.unsupported_ops_warnings(False)
    analyzer.uncalled_modules_warnings(False)
    analyzer.tracer_warnings('none')
    with torch.no_grad():
        return int(analyzer.total())


def format_complexity(result: Complexity) -> str:
    """Human-readable report as printed by ``tools/get_flops.py``."""
    h, w = result.input_shape
    lines = [
        f'Config: {result.config}',
        f'Task: {result.task}   Input: 1x3x{h}x{w}',
        f'{"part":<10}{"params (M)":>12}{"GFLOPs":>12}'
        f'{"GFLOPs w/o attn matmul":>26}',
    ]
    full = result.grouped('full')
    legacy = result.grouped('no_attn_matmul')
    for part in ('backbone', 'neck', 'heads'):
        if part in full:
            params, flops = full[part]
            lines.append(f'{part:<10}{params / 1e6:>12.2f}{flops / 1e9:>12.1f}'
                         f'{legacy[part][1] / 1e9:>26.1f}')
    lines.append(f'{"total":<10}{result.total_params / 1e6:>12.2f}'
                 f'{result.total_flops("full") / 1e9:>12.1f}'
                 f'{result.total_flops("no_attn_matmul") / 1e9:>26.1f}')
    lines.append(
        'FLOPs are multiply-adds. "w/o attn matmul" leaves out matmul/bmm/'
        'einsum/SDPA, like the mmcv 1.x counter used by older tables.')
    return '\n'.join(lines)
