"""ONNX export of backbones and whole models, checked against ONNX Runtime.

Two exporters ship with PyTorch: the TorchScript one
(``torch.onnx.export(..., dynamo=False)``), which traces the model once and
records sizes read from tensors as graph operations, and the dynamo one
(``dynamo=True``), which captures the graph with ``torch.export`` and
symbolic shapes. Every backbone of the package exports with dynamic height
and width through the TorchScript exporter (see docs/deployment.md for the
per-backbone results with both); :func:`export_onnx` uses it by default.
"""
from dataclasses import dataclass
from typing import List, Sequence, Tuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

from ..ops import eager_attention

#: Exporters :func:`export_onnx` knows.
EXPORTERS = ('torchscript', 'dynamo')

#: Opset both exporters handle and ONNX Runtime runs everywhere.
DEFAULT_OPSET = 17


class _DetectorFeatures(nn.Module):
    """A detector's backbone + neck: ``images -> tuple of feature maps``
    (the part whose ONNX graph does not depend on the head's post-processing,
    which mmdeploy handles for each head)."""

    def __init__(self, detector: nn.Module):
        super().__init__()
        self.detector = detector

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, ...]:
        return tuple(self.detector.extract_feat(x))


class _ScaleUpsample(nn.Module):
    """mmseg's ``Upsample`` for an integer ``scale_factor``, as
    ``F.interpolate(scale_factor=...)``: mmseg computes the output size
    with ``int()``, which the TorchScript exporter records as a constant.
    For integer factors both give the same size and sampling positions."""

    def __init__(self, upsample: nn.Module):
        super().__init__()
        self.scale_factor = upsample.scale_factor
        self.mode = upsample.mode
        self.align_corners = upsample.align_corners

    @staticmethod
    def supports(module: nn.Module) -> bool:
        try:
            from mmseg.models.utils import Upsample
        except ImportError:  # pragma: no cover
            return False
        factor = getattr(module, 'scale_factor', None)
        return (type(module) is Upsample and not module.size
                and isinstance(factor, float) and factor.is_integer())

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(
            x,
            scale_factor=self.scale_factor,
            mode=self.mode,
            align_corners=self.align_corners)


class _SegmentorLogits(nn.Module):
    """A whole encoder-decoder segmentor: ``images -> per-pixel logits`` at
    the input size (what ``encode_decode`` computes, with the output size
    read from the input instead of from image metas)."""

    def __init__(self, segmentor: nn.Module):
        super().__init__()
        self.segmentor = segmentor
        for module in list(segmentor.modules()):
            for name, child in list(module.named_children()):
                if _ScaleUpsample.supports(child):
                    setattr(module, name, _ScaleUpsample(child))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor]:
        logits = self.segmentor.decode_head(self.segmentor.extract_feat(x))
        return (F.interpolate(
            logits,
            size=x.shape[2:],
            mode='bilinear',
            align_corners=self.segmentor.align_corners), )


class _ClassifierScores(nn.Module):
    """An image classifier: ``images -> class scores`` (pre-softmax)."""

    def __init__(self, classifier: nn.Module):
        super().__init__()
        self.classifier = classifier

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor]:
        return (self.classifier(x, mode='tensor'), )


def wrap_for_export(model: nn.Module) -> Tuple[nn.Module, str]:
    """The exportable part of ``model`` as ``images -> tuple of tensors``.

    Args:
        model (nn.Module): A backbone, or an mmdet detector (exported up to
            its neck), an mmseg encoder-decoder segmentor (whole, logits at
            the input size; its integer-factor ``Upsample`` layers are
            replaced, in place, by an equal size-agnostic form) or an
            mmpretrain image classifier (whole, class scores).

    Returns:
        tuple[nn.Module, str]: The module to export and what it computes.
    """
    # Imported here: each downstream package is optional.
    try:
        from mmdet.models.detectors import BaseDetector
    except ImportError:  # pragma: no cover
        BaseDetector = ()
    try:
        from mmseg.models.segmentors import EncoderDecoder
    except ImportError:  # pragma: no cover
        EncoderDecoder = ()
    try:
        from mmpretrain.models.classifiers import ImageClassifier
    except ImportError:  # pragma: no cover
        ImageClassifier = ()

    if BaseDetector and isinstance(model, BaseDetector):
        return _DetectorFeatures(model), 'detector backbone + neck'
    if EncoderDecoder and isinstance(model, EncoderDecoder):
        return _SegmentorLogits(model), 'segmentor logits'
    if ImageClassifier and isinstance(model, ImageClassifier):
        return _ClassifierScores(model), 'classifier scores'
    if hasattr(model, 'data_preprocessor') and hasattr(model, 'backbone'):
        raise TypeError(
            f'{type(model).__name__} is not a detector, an encoder-decoder '
            'segmentor or an image classifier; export its backbone instead.')
    return model, 'backbone'


def _as_tuple(outputs) -> Tuple[torch.Tensor, ...]:
    if isinstance(outputs, torch.Tensor):
        return (outputs, )
    return tuple(outputs)


def export_onnx(model: nn.Module,
                path: str,
                shape: Sequence[int],
                dynamic: bool = True,
                exporter: str = 'torchscript',
                opset: int = DEFAULT_OPSET,
                batch: int = 1) -> List[str]:
    """Export ``model`` (``images -> tensor(s)``) to an ONNX file.

    The model is put in eval mode. With ``dynamic`` the batch, height and
    width of the input (and of every output) are symbolic, so ONNX Runtime
    runs the file at any size the model accepts. Attentions export their
    eager composition whatever their ``attn_backend`` (ONNX knows no
    custom op of this package).

    Args:
        model (nn.Module): Module mapping ``(B, C, H, W)`` images to a
            tensor or a tuple of tensors (see :func:`wrap_for_export`).
        path (str): ONNX file to write.
        shape (Sequence[int]): ``(H, W)`` of the example input traced.
        dynamic (bool): Symbolic batch, height and width. Default: True.
        exporter (str): 'torchscript' or 'dynamo'. Default: 'torchscript'.
        opset (int): ONNX opset. Default: 17.
        batch (int): Batch of the example input. Default: 1.

    Returns:
        list[str]: Names of the graph's outputs.
    """
    if exporter not in EXPORTERS:
        raise ValueError(f'exporter must be one of {EXPORTERS}, got '
                         f'{exporter!r}')
    if len(shape) != 2:
        raise ValueError(f'shape must be (H, W), got {tuple(shape)}')
    model.eval()
    with eager_attention(model):
        return _export(model, path, shape, dynamic, exporter, opset, batch)


def _export(model, path, shape, dynamic, exporter, opset, batch):
    param = next(model.parameters(), None)
    in_channels = _input_channels(model)
    x = torch.randn(batch, in_channels, *shape,
                    device=param.device if param is not None else 'cpu')
    with torch.no_grad():
        num_outputs = len(_as_tuple(model(x)))
    output_names = [f'output{i}' for i in range(num_outputs)]
    kwargs = dict(
        input_names=['input'],
        output_names=output_names,
        opset_version=opset)
    if exporter == 'torchscript':
        if dynamic:
            axes = {0: 'batch', 2: 'height', 3: 'width'}
            kwargs['dynamic_axes'] = {
                name: {
                    0: 'batch',
                    2: f'{name}_height',
                    3: f'{name}_width'
                }
                for name in output_names
            }
            kwargs['dynamic_axes']['input'] = axes
        torch.onnx.export(model, (x, ), path, dynamo=False, **kwargs)
    else:
        if dynamic:
            dim = torch.export.Dim.DYNAMIC
            kwargs['dynamic_shapes'] = ({0: dim, 2: dim, 3: dim}, )
        program = torch.onnx.export(
            model, (x, ), dynamo=True, external_data=False, **kwargs)
        program.save(path)
    return output_names


def _input_channels(model: nn.Module) -> int:
    """Input channels of the first conv / linear patch embedding (3 for
    RGB models)."""
    for module in model.modules():
        if isinstance(module, nn.Conv2d):
            return module.in_channels
        if isinstance(module, nn.Linear):  # pixel-norm patch embeddings
            break
    return 3


@dataclass
class OnnxCheck:
    """ONNX Runtime against PyTorch at one input size."""
    shape: Tuple[int, int]
    max_abs_diff: float
    output_shapes: List[Tuple[int, ...]]

    def __str__(self) -> str:
        shapes = ', '.join('x'.join(map(str, s)) for s in self.output_shapes)
        return (f'{self.shape[0]}x{self.shape[1]}: max abs diff '
                f'{self.max_abs_diff:.2e} (outputs {shapes})')


def check_onnx(path: str,
               model: nn.Module,
               shapes: Sequence[Sequence[int]],
               batch: int = 1,
               seed: int = 0) -> List[OnnxCheck]:
    """Run an exported file in ONNX Runtime and compare with PyTorch.

    Args:
        path (str): The ONNX file.
        model (nn.Module): The PyTorch module it was exported from.
        shapes (Sequence[tuple[int, int]]): ``(H, W)`` sizes to try.
        batch (int): Batch of the random inputs. Default: 1.
        seed (int): Seed of the random inputs. Default: 0.

    Returns:
        list[OnnxCheck]: One per size, with the largest absolute difference
        over every output.

    Raises:
        ValueError: If ONNX Runtime returns a different number of outputs
            or outputs of other shapes than PyTorch (a size baked into the
            graph shows up here or as an ONNX Runtime error).
    """
    try:
        import onnxruntime as ort
    except ImportError as e:  # pragma: no cover
        raise ImportError('checking an ONNX file needs onnxruntime: pip '
                          'install -r requirements/tests.txt') from e
    session = ort.InferenceSession(
        path, providers=['CPUExecutionProvider'])
    input_name = session.get_inputs()[0].name
    in_channels = session.get_inputs()[0].shape[1]
    if not isinstance(in_channels, int):
        in_channels = _input_channels(model)
    generator = torch.Generator().manual_seed(seed)
    model.eval()
    results = []
    for shape in shapes:
        x = torch.randn(batch, in_channels, *shape, generator=generator)
        with torch.no_grad():
            expected = _as_tuple(model(x))
        got = session.run(None, {input_name: x.numpy()})
        if len(got) != len(expected):
            raise ValueError(f'ONNX Runtime returned {len(got)} outputs, '
                             f'PyTorch {len(expected)}')
        diff = 0.
        for ref, out in zip(expected, got):
            if tuple(ref.shape) != out.shape:
                raise ValueError(
                    f'at {shape[0]}x{shape[1]} ONNX Runtime returned an '
                    f'output of shape {out.shape}, PyTorch '
                    f'{tuple(ref.shape)}: a size is baked into the graph')
            diff = max(diff, float(np.abs(ref.numpy() - out).max()))
        results.append(
            OnnxCheck((int(shape[0]), int(shape[1])), diff,
                      [tuple(r.shape) for r in expected]))
    return results
