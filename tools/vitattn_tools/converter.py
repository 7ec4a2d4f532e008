"""What every ``tools/model_converters/<family>2vitattn.py`` shares: the
classifier key layout and the command line."""
import argparse
import os
import os.path as osp
from collections import OrderedDict
from typing import Callable, Optional, Sequence

import torch
import torch.nn as nn

from vitattn_mm.models.checkpoint.pretrained import StateDict, unwrap_state_dict
from vitattn_mm.models.checkpoint.files import load_checkpoint_file


def backbone_for(backbone_cls: type, state_dict: StateDict) -> nn.Module:
    """The arch of ``backbone_cls``'s zoo whose layout an official file
    fills, built on the meta device (no memory): a skeleton converts a
    file by the blocks of the model it is loaded into."""
    best, best_score = None, -1
    for key in backbone_cls.arch_zoo:
        with torch.device('meta'):
            model = backbone_cls(arch=key if isinstance(key, str) else key[0])
        own = model.state_dict()
        converted = model.convert_official(OrderedDict(state_dict))
        score = sum(k in own and own[k].shape == v.shape
                    for k, v in converted.items())
        if score > best_score:
            best, best_score = model, score
    return best


def to_classifier_keys(state_dict: StateDict,
                       backbone_cls: type,
                       head_prefix: str = 'head.') -> StateDict:
    """Official classifier weights -> mmpretrain ``ImageClassifier`` keys.

    The backbone part goes through the ``convert_official`` of the
    ``backbone_cls`` arch it fills (:func:`backbone_for`) and under
    ``backbone.``; the linear head (``head_prefix``) becomes ``head.fc.``.
    """
    head = {k: v for k, v in state_dict.items() if k.startswith(head_prefix)}
    backbone = {k: v for k, v in state_dict.items() if k not in head}
    backbone = backbone_for(backbone_cls, backbone).convert_official(
        backbone)
    converted = OrderedDict(
        (f'backbone.{k}', v) for k, v in backbone.items())
    converted.update(
        (f'head.fc.{k[len(head_prefix):]}', v) for k, v in head.items())
    return converted


def converter_main(convert: Callable[[StateDict], StateDict],
                   family: str,
                   argv: Optional[Sequence[str]] = None) -> None:
    """Command line: ``SRC DST [--key NAME]``; writes ``{'state_dict': ...}``
    that classification configs load with ``load_from`` and backbones with
    ``init_cfg=dict(type='Pretrained', checkpoint=DST)``.

    Args:
        convert (callable): Official state dict -> our keys; raises
            ``ValueError`` for a file of another layout.
        family (str): Name used in the help text.
        argv (list[str], optional): Arguments. Default: ``sys.argv[1:]``.
    """
    parser = argparse.ArgumentParser(
        description=f'Convert an official {family} checkpoint to vitattn_mm '
        'key names')
    parser.add_argument('src', help='official checkpoint (path or URL)')
    parser.add_argument('dst', help='where to save the converted file')
    parser.add_argument(
        '--key',
        help="container of the weights in SRC, e.g. 'model_ema'; default: "
        "the first of 'state_dict', 'model', 'module'")
    args = parser.parse_args(argv)
    # Weights-only; the official scripts' pickled options (argparse
    # Namespace, yacs CfgNode) are allowlisted by vitattn_mm.models.checkpoint.files.
    checkpoint = load_checkpoint_file(args.src)
    converted = convert(unwrap_state_dict(checkpoint, args.key))
    if osp.dirname(args.dst):
        os.makedirs(osp.dirname(args.dst), exist_ok=True)
    torch.save({'state_dict': converted}, args.dst)
    print(f'Saved {len(converted)} tensors to {args.dst}')
