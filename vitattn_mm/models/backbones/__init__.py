# The skeletons, then the families that configure them.
from .cswin import AttnCSwinTransformer  # noqa: F401
from .flatten import (FLattenCSwinTransformer, FLattenDeiT,  # noqa: F401
                      FLattenPVT, FLattenPVTv2, FLattenSwinTransformer)
from .l2vit import L2ViT  # noqa: F401
from .lavit import LaViT, LessAttnSwinTransformer, LessAttnViT  # noqa: F401
from .msf import MSFSwinTransformer, MSFViT  # noqa: F401
from .pvt import AttnPVT, AttnPVTv2  # noqa: F401
from .swin import AttnSwinTransformer  # noqa: F401
from .vit import AttnViT  # noqa: F401
