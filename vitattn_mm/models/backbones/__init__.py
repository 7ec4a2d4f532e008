from .flatten import FLattenPVT, FLattenPVTv2, FLattenSwinTransformer  # noqa: F401
