import random
from typing import Dict, Optional

import numpy as np
import torch
from mmengine.dist import get_world_size
from mmengine.hooks import Hook
from mmengine.registry import HOOKS


@HOOKS.register_module()
class EvaluateBeforeTrainHook(Hook):
    """Run the validation loop once before the first training iteration.

    Gives the untrained (freshly initialised) model's metrics on the same
    validation split, the baseline a short run is compared against. The
    metrics are logged and kept in ``runner.message_hub`` under
    ``'metrics_before_train'``. Skipped when resuming.
    """

    priority = 'LOWEST'  # after weights are initialised / loaded

    def __init__(self):
        self.metrics: Optional[Dict[str, float]] = None

    def before_train(self, runner) -> None:
        if runner.iter > 0:
            return
        runner.logger.info('Evaluating the untrained model first.')
        self.metrics = runner.val_loop.run()
        runner.message_hub.update_info('metrics_before_train', self.metrics)


def get_random_states() -> dict:
    """The states of the global generators a training process draws from:
    Python's ``random``, numpy's legacy global generator, torch's CPU
    generator and, once CUDA is in use, every CUDA device's generator.

    Only tensors and plain Python values, so the result can be stored in a
    checkpoint that loads weights-only.
    """
    kind, key, pos, has_gauss, gauss = np.random.get_state()
    states = dict(
        python=random.getstate(),
        numpy=dict(kind=kind, key=torch.from_numpy(key.astype(np.int64)),
                   pos=pos, has_gauss=has_gauss, gauss=gauss),
        torch=torch.get_rng_state())
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        states['cuda'] = torch.cuda.get_rng_state_all()
    return states


def set_random_states(states: dict) -> None:
    """Restore what :func:`get_random_states` returned."""
    random.setstate(states['python'])
    numpy = states['numpy']
    np.random.set_state((numpy['kind'], numpy['key'].numpy().astype(
        np.uint32), numpy['pos'], numpy['has_gauss'], numpy['gauss']))
    torch.set_rng_state(states['torch'].cpu())
    cuda = states.get('cuda')
    if cuda is not None and torch.cuda.is_available() and len(
            cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all([state.cpu() for state in cuda])


class _RestoreAfterReplay:
    """Stands in for ``IterBasedTrainLoop.dataloader_iterator`` on resume.

    The loop replays the ``num_replayed`` batches trained before the
    checkpoint (so the sampler, the epoch boundaries and the data-loader
    workers' augmentation draws are where they were); only then, before
    the first new batch is drawn, the generators get the checkpoint's
    states. Puts the loop's own iterator back after that.
    """

    def __init__(self, loop, num_replayed: int, states: dict):
        self._loop = loop
        self._iterator = loop.dataloader_iterator
        self._remaining = num_replayed
        self._states = states

    def __iter__(self):
        return self

    def __next__(self):
        if self._remaining == 0:
            set_random_states(self._states)
            self._loop.dataloader_iterator = self._iterator
        else:
            self._remaining -= 1
        return next(self._iterator)


@HOOKS.register_module()
class RandomStateHook(Hook):
    """Make ``--resume`` continue exactly as the uninterrupted run would.

    A resumed run restores weights, optimizer, schedulers and the data
    position, but by default not the random generators: after ``N``
    iterations the straight run has drawn dropout / drop-path masks,
    proposal samples and augmentation parameters that the resumed process
    has not, so from iteration ``N + 1`` on the two runs train on
    different random numbers. This hook

    * writes the generators' states (:func:`get_random_states`) into every
      checkpoint under ``'random_states'``, and on ``--resume`` restores
      them right before the first new batch is drawn (after mmengine's
      ``IterBasedTrainLoop`` has replayed the batches already trained; at
      the start of the epoch for ``EpochBasedTrainLoop``, which resumes at
      epoch boundaries);
    * keeps validation from drawing on the training generators (its data
      loader takes a seed from torch's generator), so a run's training
      numbers do not depend on where validation happened.

    Data-loader workers need nothing saved: mmengine seeds each worker
    from the run's seed and its index, and the replayed batches advance
    them as before. ``tools/train.py`` adds the hook by default
    (``default_hooks.random_state``). In distributed runs only rank 0
    writes the checkpoint, so the per-rank states are not restored there
    (a warning says so).
    """

    priority = 'VERY_HIGH'  # isolate validation before any other hook

    def __init__(self):
        self._resume_states: Optional[dict] = None
        self._outside_val: Optional[dict] = None

    def before_save_checkpoint(self, runner, checkpoint: dict) -> None:
        checkpoint['random_states'] = get_random_states()

    def after_load_checkpoint(self, runner, checkpoint: dict) -> None:
        # Also called by `load_from`: whether this is a resume is only
        # known when training starts (the loop's counters are restored).
        self._resume_states = checkpoint.get('random_states')

    def before_train(self, runner) -> None:
        states, self._resume_states = self._resume_states, None
        if runner.iter == 0:  # a fresh run, possibly from `load_from`
            return
        if states is None:
            runner.logger.warning(
                'The resumed checkpoint holds no random states (written '
                'without RandomStateHook): training continues with fresh '
                'random numbers, not exactly as an uninterrupted run.')
            return
        if get_world_size() > 1:
            runner.logger.warning(
                'Distributed run: the checkpoint holds rank 0\'s random '
                'states only; they are not restored.')
            return
        loop = runner.train_loop
        if hasattr(loop, 'dataloader_iterator'):  # IterBasedTrainLoop
            loop.dataloader_iterator = _RestoreAfterReplay(
                loop, runner.iter, states)
        else:  # EpochBasedTrainLoop: its data loader starts after this
            set_random_states(states)

    def before_val(self, runner) -> None:
        self._outside_val = get_random_states()

    def after_val(self, runner) -> None:
        if self._outside_val is not None:
            set_random_states(self._outside_val)
            self._outside_val = None
