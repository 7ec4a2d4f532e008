"""Leaving PyTorch: ONNX export and its check against ONNX Runtime."""
from .onnx_export import (EXPORTERS, OnnxCheck, check_onnx, export_onnx,
                          wrap_for_export)

__all__ = [
    'EXPORTERS', 'OnnxCheck', 'check_onnx', 'export_onnx', 'wrap_for_export'
]
