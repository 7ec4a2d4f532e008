"""Layer-wise learning-rate decay: each parameter's depth, as mmpretrain's
``LearningRateDecayOptimWrapperConstructor`` asks the backbone for it."""
import re
from itertools import chain
from typing import Tuple


class LayerDepth:
    """``get_layer_depth`` for a :class:`StagedBackbone`, counted as
    mmpretrain's ViT and Swin count it: the stem is depth 0, block ``j`` of
    the whole network depth ``j + 1``, what follows the blocks (output and
    final norms) and anything outside the backbone (necks, heads) the last
    depth, ``num_blocks + 1``. A stage's other modules go with the block
    they sit beside: a patch embedding or position table that opens a stage
    takes the depth of the block before it (as the stem's take 0); a
    downsampling or norm that closes a stage, its last block's (mmpretrain's
    Swin counts its ``downsample`` so).
    """

    _BLOCK = re.compile(r'stages\.(\d+)\.blocks\.(\d+)\.')
    _STAGE = re.compile(r'stages\.(\d+)\.(\w+)')

    def get_layer_depth(self, param_name: str,
                        prefix: str = '') -> Tuple[int, int]:
        """The depth of parameter ``param_name`` and the number of depths.

        Args:
            param_name (str): The parameter's name in the model.
            prefix (str): The backbone's prefix in the model (e.g.
                ``'backbone.'``); a name without it is outside the
                backbone. Default: ''.

        Returns:
            tuple[int, int]: The depth and ``num_blocks + 2``.
        """
        depths = [len(stage.blocks) for stage in self.stages]
        num_layers = sum(depths) + 2
        if not param_name.startswith(prefix):
            return num_layers - 1, num_layers
        name = param_name[len(prefix):]
        block = self._BLOCK.match(name)
        if block:
            stage, index = int(block[1]), int(block[2])
            return sum(depths[:stage]) + index + 1, num_layers
        part = self._STAGE.match(name)
        if part:
            stage = int(part[1])
            closes = part[2] in ('norm', 'downsample')
            return sum(depths[:stage + closes]), num_layers
        if name.split('.')[0] in self._stem_names():
            return 0, num_layers
        return num_layers - 1, num_layers

    def _stem_names(self) -> set:
        """Names of the stem's modules and loose parameters (attributes of
        the backbone itself)."""
        stem = {id(m) for m in self.stem_modules() + self.stem_parameters()}
        return {name for name, m in chain(self.named_children(),
                                          self.named_parameters(
                                              recurse=False))
                if id(m) in stem}
