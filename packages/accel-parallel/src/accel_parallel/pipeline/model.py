"""``PipelinedModel``: what ``prepare`` returns for a pipeline-parallel model.

Calling it runs one whole training step of the pipeline schedule — the forward and the
backward of every micro-batch — because 1F1B interleaves them: the loss must be computed
inside the schedule. So the call takes the target (and the loss function, unless the
``PipelineParallelConfig`` has one) and returns the batch's loss, already backpropagated:
the mean of the micro-batches' losses, broadcast from the last stage to every rank of the
pipeline, so ``accelerator.gather``/``reduce`` see it everywhere. ``accelerator.backward``
then only checks that it got this loss, once (the gradients are there already).

Under ``torch.no_grad()``, in ``eval()`` mode, or when prepared with ``evaluation_mode=True``,
the call runs forward only and returns the last stage's output on every rank (or, with a
target, the mean loss): see :mod:`.evaluate`. Each batch shape gets its own schedule (torch's
stages fix their buffers' shapes at their first step), the last few kept.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import torch
from accel_state import ConfigurationError
from torch import nn

from accel_parallel.pipeline.config import PipelineParallelConfig
from accel_parallel.pipeline.evaluate import batch_key, mean_loss, share_output

__all__ = ["PipelinedModel", "PipelineTopology", "build_schedule", "schedules_have_eval"]

#: schedules kept per model and kind (training / forward-only), one per batch shape
MAX_SCHEDULES = 4


class PipelineTopology:
    """This rank's place in the pipeline: its group, its rank in it, the stages it holds."""

    def __init__(self, group: Any, pp_rank: int, pp_size: int, num_stages: int) -> None:
        self.group = group
        self.pp_rank = pp_rank
        self.pp_size = pp_size
        self.num_stages = num_stages
        #: stages of this rank, in schedule order (loop assignment: stage s on rank s % pp)
        self.stage_indices = list(range(pp_rank, num_stages, pp_size))

    @property
    def has_first(self) -> bool:
        return 0 in self.stage_indices

    @property
    def has_last(self) -> bool:
        return self.num_stages - 1 in self.stage_indices

    def global_rank(self, pp_rank: int) -> int:
        import torch.distributed as dist

        return dist.get_global_rank(self.group, pp_rank)


def schedules_have_eval() -> bool:
    """Whether this torch's schedules run forward only (``schedule.eval``, torch 2.9)."""
    from torch.distributed import pipelining

    return callable(getattr(pipelining.ScheduleGPipe, "eval", None))


def build_schedule(stages: Sequence[nn.Module], topology: PipelineTopology,
                   config: PipelineParallelConfig, device: torch.device,
                   loss_fn: Callable[[Any, Any], Any] | None, *,
                   forward_only: bool = False) -> Any:
    """A torch schedule running this rank's stage modules (fresh ``PipelineStage``s).
    Gradients are not scaled by the schedule (``loss_fn`` already divides by the number of
    micro-batches), so every torch version computes the same mean. ``forward_only``: no loss
    function (the caller computes the loss from the outputs), and GPipe's loop for one
    stage per rank, whatever the training schedule (the forwards are the same); several
    stages per rank need torch's multi-stage forward-only run (torch >= 2.9)."""
    import inspect

    from torch.distributed import pipelining

    multi = config.schedule == "interleaved_1f1b"
    if forward_only and multi and not schedules_have_eval():
        raise ConfigurationError(
            f"Evaluating an interleaved pipeline (schedule='interleaved_1f1b', "
            f"{len(stages)} stages per rank) needs torch>=2.9 (schedule.eval); this is torch "
            f"{torch.__version__}. Upgrade torch, or evaluate with schedule='1f1b' or "
            "'gpipe' (one stage per rank), or with pp_size=1.")
    pipeline_stages = [pipelining.PipelineStage(module, index, topology.num_stages, device,
                                                group=topology.group)
                       for module, index in zip(stages, topology.stage_indices, strict=True)]
    n_micro = config.microbatches(topology.pp_size)
    classes = {"gpipe": pipelining.ScheduleGPipe, "1f1b": pipelining.Schedule1F1B,
               "interleaved_1f1b": pipelining.ScheduleInterleaved1F1B}
    cls = pipelining.ScheduleGPipe if forward_only and not multi else classes[config.schedule]
    options: dict[str, Any] = {"loss_fn": None if forward_only else loss_fn}
    if "scale_grads" in inspect.signature(cls.__init__).parameters:
        options["scale_grads"] = False
    if multi:
        return cls(pipeline_stages, n_micro, **options)
    return cls(pipeline_stages[0], n_micro, **options)


class PipelinedModel(nn.Module):
    """This rank's part of the model (:attr:`module`, the original parameter names) and the
    schedule that trains the whole pipeline; see the module docstring for the call."""

    def __init__(self, module: nn.Module, stages: list[nn.Module], topology: PipelineTopology,
                 config: PipelineParallelConfig, device: torch.device,
                 model_name: str, key_order: list[str], *,
                 evaluation_only: bool = False) -> None:
        super().__init__()
        self.module = module
        self._stages = stages  # a list: not registered, they share :attr:`module`'s children
        self.topology = topology
        self.config = config
        self.num_microbatches = config.microbatches(topology.pp_size)
        self.device = device
        self.model_name = model_name
        #: the whole model's state-dict keys in their order (for get_state_dict)
        self.key_order = key_order
        #: prepared with ``evaluation_mode=True``: every call runs forward only
        self.evaluation_only = evaluation_only
        self._call_loss_fn: Callable[[Any, Any], Any] | None = None
        self._schedules: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._step = 0
        self._consumed = True
        #: the last training call's loss broadcast, on the rank that sent it (see _share_loss)
        self._sending: Any = None

    # -- the schedule's loss ---------------------------------------------------------------
    def _micro_loss(self, output: Any, target: Any) -> torch.Tensor:
        loss_fn = self._call_loss_fn or self.config.loss_fn
        return loss_fn(output, target) / self.num_microbatches

    def train(self, mode: bool = True) -> PipelinedModel:
        super().train(mode)
        for stage in self._stages:
            stage.train(mode)
        return self

    def _schedule_for(self, key: tuple[Any, ...], forward_only: bool) -> Any:
        """The schedule for this batch shape (built at its first use; the least recently
        used dropped beyond :data:`MAX_SCHEDULES` of a kind)."""
        key = (forward_only, key)
        schedule = self._schedules.get(key)
        if schedule is None:
            schedule = build_schedule(self._stages, self.topology, self.config, self.device,
                                      self._micro_loss, forward_only=forward_only)
            self._schedules[key] = schedule
            same = [k for k in self._schedules if k[0] == forward_only]
            if len(same) > MAX_SCHEDULES:
                del self._schedules[same[0]]
        self._schedules.move_to_end(key)
        return schedule

    # -- one step ------------------------------------------------------------------------------
    def forward(self, *args: Any, target: Any = None,
                loss_fn: Callable[[Any, Any], Any] | None = None, **kwargs: Any) -> Any:
        """Run the schedule on the batch (``args`` reach the first stage, ``kwargs`` every
        stage, ``target`` the loss on the last); returns the batch's mean loss on every
        rank, its backward already done. Forward only (see the module docstring): the last
        stage's output, or the mean loss with ``target``, on every rank."""
        self._finish_sending()
        if self.evaluation_only or not self.training or not torch.is_grad_enabled():
            return self._evaluate(args, kwargs, target, loss_fn)
        self._check_call(args, target, loss_fn)
        schedule = self._schedule_for(batch_key(args, kwargs, target), forward_only=False)
        self._call_loss_fn = loss_fn
        losses: list[torch.Tensor] = []
        step_args = args if self.topology.has_first else ()
        try:
            if self.topology.has_last:
                schedule.step(*step_args, target=target, losses=losses, **kwargs)
            else:
                schedule.step(*step_args, **kwargs)
        finally:
            self._call_loss_fn = None
        loss = self._share_loss(
            torch.stack([part.detach().float() for part in losses]).sum()
            if self.topology.has_last else None, defer_send=True)
        self._step += 1
        self._consumed = False
        loss._accel_pipeline_step = (id(self), self._step)  # type: ignore[attr-defined]
        return loss

    def _evaluate(self, args: tuple[Any, ...], kwargs: dict[str, Any], target: Any,
                  loss_fn: Callable[[Any, Any], Any] | None) -> Any:
        """The forward-only call: torch's ``schedule.eval`` (its ``step`` on a schedule
        without a loss before torch 2.9), the loss computed here from the outputs."""
        fn = loss_fn or self.config.loss_fn
        if target is not None and fn is None:
            raise ConfigurationError(
                f"The pipeline-parallel {self.model_name} was called with target= but has no "
                "loss function: set PipelineParallelConfig(loss_fn=...) or pass "
                "model(inputs, target=labels, loss_fn=...); call model(inputs) for the "
                "outputs alone.")
        self._check_batch(args[0] if args else target)
        schedule = self._schedule_for(batch_key(args, kwargs, target), forward_only=True)
        run = getattr(schedule, "eval", None) if schedules_have_eval() else None
        step_args = args if self.topology.has_first else ()
        with torch.no_grad():
            output = (run or schedule.step)(*step_args, **kwargs)
            if target is None:
                return share_output(output, self.topology, self.device, self.model_name)
            loss = mean_loss(output, target, fn, self.num_microbatches) \
                if self.topology.has_last else None
        loss = self._share_loss(loss)
        loss._accel_pipeline_eval = id(self)  # type: ignore[attr-defined]
        return loss

    def _check_call(self, args: tuple[Any, ...], target: Any, loss_fn: Any) -> None:
        """Refuse a call the pipeline cannot run, before anything runs."""
        name = self.model_name
        if not self._consumed:
            raise ConfigurationError(
                f"The pipeline-parallel {name} was called again before accelerator.backward("
                "loss) took the loss of its previous call: the schedule already ran that "
                "step's backward, so each call's loss must go to accelerator.backward (then "
                "optimizer.step()) before the next call.")
        if target is None:
            raise ConfigurationError(
                f"The pipeline-parallel {name} computes the loss inside its schedule: call it "
                "as model(inputs, target=labels) (the last stage computes loss_fn(output, "
                "target) per micro-batch).")
        if loss_fn is None and self.config.loss_fn is None:
            raise ConfigurationError(
                f"The pipeline-parallel {name} needs a loss function: set "
                "PipelineParallelConfig(loss_fn=...) or call model(inputs, target=labels, "
                "loss_fn=...).")
        self._check_batch(args[0] if args else target)

    def _check_batch(self, batch: Any) -> None:
        size = batch.shape[0] if isinstance(batch, torch.Tensor) and batch.dim() else None
        if size is not None and size % self.num_microbatches:
            raise ConfigurationError(
                f"A batch of {size} sample(s) does not split into {self.num_microbatches} "
                "pipeline micro-batches: use a batch size divisible by num_microbatches, or "
                "set PipelineParallelConfig(num_microbatches=...) to a divisor of it.")

    def _share_loss(self, loss: torch.Tensor | None, *,
                    defer_send: bool = False) -> torch.Tensor:
        """The last stage's 0-d loss on every rank of the pipeline.

        The receiving ranks wait for it. With ``defer_send`` the last stage, which already
        holds the value, does not: it finishes its send at the next call. A blocking
        broadcast would hold it until the first stage (the last to finish the step's
        backward in 1F1B) reached the broadcast, instead of letting it step its optimizer
        meanwhile, as a hand-written pipeline loop does (measured: 1F1B on 2 CPU processes,
        5% of the step)."""
        import torch.distributed as dist

        if loss is None:
            loss = torch.zeros((), dtype=torch.float32, device=self.device)
        loss = loss.to(self.device)
        if self.topology.pp_size > 1:
            source = self.topology.global_rank(self.topology.pp_size - 1)
            work = dist.broadcast(loss, src=source, group=self.topology.group, async_op=True)
            if defer_send and dist.get_rank() == source:
                self._sending = work
            else:
                work.wait()
        return loss

    def _finish_sending(self) -> None:
        """Wait for the previous call's loss send (a no-op on the other ranks)."""
        if self._sending is not None:
            work, self._sending = self._sending, None
            work.wait()

    def consume(self, loss: torch.Tensor) -> None:
        """``accelerator.backward(loss)``: accept the loss of the last call, once."""
        if getattr(loss, "_accel_pipeline_eval", None) == id(self):
            raise ConfigurationError(
                f"accelerator.backward got the loss of a forward-only call of {self.model_name} "
                "(called under torch.no_grad(), in eval() mode, or prepared with "
                "evaluation_mode=True): nothing ran backward. To train, call model.train() "
                "and call it with gradients enabled (on a model prepared for training).")
        mark = getattr(loss, "_accel_pipeline_step", None)
        if mark != (id(self), self._step) or self._consumed:
            what = ("a loss of an earlier step, or one already passed to backward"
                    if mark is not None and mark[0] == id(self) else
                    "a loss that did not come from the pipeline's call")
            raise ConfigurationError(
                f"accelerator.backward got {what}. With pipeline parallelism the schedule "
                f"runs the backward inside the call of {self.model_name}: pass exactly the "
                "loss the call returned, once per call (a loss computed from it would not "
                "change the gradients; scale the loss in loss_fn instead).")
        self._consumed = True

    def owns(self, loss: torch.Tensor) -> bool:
        mark = getattr(loss, "_accel_pipeline_step", None)
        return (mark is not None and mark[0] == id(self)) or getattr(
            loss, "_accel_pipeline_eval", None) == id(self)
