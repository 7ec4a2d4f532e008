"""What every ``tools/model_converters/<family>2vitattn.py`` shares: the
classifier key layout and the command line."""
import argparse
import os
import os.path as osp
import re
from collections import OrderedDict
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch

from vitattn_mm.models.checkpoint.pretrained import StateDict, unwrap_state_dict
from vitattn_mm.models.backbones.backbone_spec import BackboneSpec
from vitattn_mm.models.checkpoint.files import load_checkpoint_file


def file_stages(state_dict: StateDict) -> Dict[int, Tuple[int, int]]:
    """Each stage of a converted file: its blocks and its width (read off
    its first block's ``norm1``)."""
    blocks: Dict[int, set] = {}
    for key in state_dict:
        m = re.match(r'stages\.(\d+)\.blocks\.(\d+)\.', key)
        if m:
            blocks.setdefault(int(m.group(1)), set()).add(int(m.group(2)))
    return {stage: (len(found), state_dict.get(
        f'stages.{stage}.blocks.0.norm1.weight', torch.empty(0)).shape[-1])
        for stage, found in blocks.items()}


def arch_for(backbone_cls: type, state_dict: StateDict) -> BackboneSpec:
    """The arch of ``backbone_cls``'s zoo whose stages an official file
    fills (blocks and width of each), as its description: nothing is
    built (a skeleton converts a file by the blocks of the network it goes
    into)."""
    best, best_score = None, -1
    for key in backbone_cls.arch_zoo:
        spec = backbone_cls.spec(arch=key if isinstance(key, str) else key[0])
        found = file_stages(backbone_cls.convert_official_keys(
            OrderedDict(state_dict), spec.block_attention))
        score = sum(found.get(i) == (stage.depth, stage.embed_dims)
                    for i, stage in enumerate(spec.stages))
        if score > best_score:
            best, best_score = spec, score
    return best


def to_classifier_keys(state_dict: StateDict,
                       backbone_cls: type,
                       head_prefix: str = 'head.') -> StateDict:
    """Official classifier weights -> mmpretrain ``ImageClassifier`` keys.

    The backbone part goes through ``backbone_cls``'s converter with the
    blocks of the arch it fills (:func:`arch_for`) and under
    ``backbone.``; the linear head (``head_prefix``) becomes ``head.fc.``.
    """
    head = {k: v for k, v in state_dict.items() if k.startswith(head_prefix)}
    backbone = {k: v for k, v in state_dict.items() if k not in head}
    backbone = backbone_cls.convert_official_keys(
        backbone, arch_for(backbone_cls, backbone).block_attention)
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
