"""The backbones as each OpenMMLab package's configs build them.

Where the stock classes of mmdet, mmseg and mmpretrain disagree (mmpretrain's
Swin returns the last stage and counts ``frozen_stages`` from stage 0;
mmseg's ViT has no final norm and returns maps), every backbone of that
architecture has one class per package, carrying that package's defaults
and meanings, registered in that package's ``MODELS``. A config therefore
builds what its own package's class would, and nothing reads mmengine's
global default scope. In plain Python the class from
``vitattn_mm.models.backbones`` follows the documented defaults; the
package classes are here::

    from vitattn_mm.models.backbones.packages import mmpretrain
    model = mmpretrain.FLattenSwinTransformer(arch='tiny')  # out_indices (3,)

Each namespace holds every registered backbone (the plain class where the
package agrees with it).
"""
from types import SimpleNamespace

#: The packages whose ``MODELS`` registries the backbones are registered in.
PACKAGES = ('mmdet', 'mmseg', 'mmpretrain')

mmdet = SimpleNamespace()
mmseg = SimpleNamespace()
mmpretrain = SimpleNamespace()
