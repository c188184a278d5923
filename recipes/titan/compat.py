"""Everything TorchTitan 0.3.0 needs adapting for, in one place.

- **Device.** TorchTitan asks ``torch._utils._get_available_device_type()`` at import time, which
  answers ``"tpu"`` once torch_tpu is loaded (torch's accelerator hooks). The CPU reference run
  makes it answer ``"cpu"`` instead, so the same recipe runs on Gloo.
- **Attention.** The debug model defaults to flex attention, compiled by Inductor, which has no
  tpu code generator. ``DenseMaskAttention`` takes its place in the config: the same
  packed-document causal mask (TorchTitan's own mask functions), made dense and handed to
  ``F.scaled_dot_product_attention``. The block mask itself is built without Inductor too.
- **Files.** The tokenizer and the C4 sample come from ``assets.py``; datasets runs offline.
- **Gloo.** The CPU reference reduce-scatters with SUM where FSDP2 would ask Gloo for the
  PREMUL_SUM it lacks (the factor is 1, so the sums are the same).
- **torch 2.13.** TorchTitan 0.3.0 was released against torch 2.14. It calls
  ``torch.distributed.set_timeout``, which 2.13 lacks; it is defined here over the group's own
  method. Its pipeline trainer hands the schedule microbatches already split
  (``step(arg_mbs=, kwarg_mbs=, target_mbs=)``), where 2.13's ``step`` takes the whole batch:
  such calls go to the schedule's own ``_step_microbatches``. Its default SPMD backend
  (``spmd_types``) hands FSDP2 plain parameters with mesh dimensions, which 2.13's
  ``fully_shard`` refuses (on Gloo as on tpu); the recipe selects its ``full_dtensor`` backend.
- **No Triton.** TorchTitan imports its expert-parallel kernels, written in Triton for CUDA, when
  any model module is imported. Without triton installed (this recipe needs none of them) a
  placeholder stands in whose kernels raise if called. The graph trainer's FSDP bucketing pass
  weighs ops by inductor's roofline estimate, which asks Triton for the GPU's bandwidth: it gets
  a fixed figure.
- **SimpleFSDP, whole step.** ``--parallel simple_fsdp`` is TorchTitan's graph trainer
  (``experiments/graph_trainer``) on its own Llama 3 registry, with causal SDPA (a traced step
  would bake one batch's document mask in). Its ``aot_fx_trace`` mode runs through a pass
  pipeline registered here: the graph trainer's passes with one FSDP bucket and without its
  recompute, then on tpu ``torch_tpu.integrations.torchtitan.tpu_programs``; the trainer's
  eager code around the traced step runs in DeferAndFuse on tpu.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")


def select_device(device: str) -> None:
    """Makes TorchTitan pick ``device``; must run before torch and torchtitan are imported."""
    if device == "cpu":
        # Not even loaded: torch would take tpu as the accelerator of CPU tensors' barriers.
        os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"
    import torch

    stand_in_for_triton_kernels()
    _set_timeout_from_torch_2_14()
    _pipeline_steps_on_split_microbatches()

    if device == "cpu":
        import torch._utils

        torch._utils._get_available_device_type = lambda: "cpu"
        original = torch._utils._get_device_module
        torch._utils._get_device_module = lambda name: (
            _host_device_module() if name == "cpu" else original(name)
        )
        _sum_reductions_for_gloo()
        return
    import torch_tpu  # noqa: F401  (registers the device and tpu_dist)

    if not torch.tpu.is_available():
        raise RuntimeError("recipes/titan: --device tpu, but torch.tpu.is_available() is False")


def _host_device_module() -> Any:
    """``torch.cpu`` with the memory questions TorchTitan's metrics ask a device, answered."""
    import platform
    import types

    import torch

    class HostDeviceModule(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            return getattr(torch.cpu, name)

    host = HostDeviceModule("host_device")
    host.get_device_name = lambda device=None: platform.processor() or "host"
    host.get_device_properties = lambda device=None: types.SimpleNamespace(
        total_memory=os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    )
    host.memory_stats = lambda device=None: {}
    host.reset_peak_memory_stats = lambda device=None: None
    host.empty_cache = lambda: None
    host.current_device = lambda: 0
    return host


def _sum_reductions_for_gloo() -> None:
    """FSDP2 reduce-scatters with PREMUL_SUM(1.0) once TorchTitan sets the divide factor to 1;
    Gloo has no PREMUL_SUM, and a plain SUM is the same reduction."""
    from torch.distributed.fsdp import FSDPModule
    from torchtitan.distributed import fsdp

    disable_division = fsdp.disable_fsdp_gradient_division

    def disable_division_with_sums(model: Any) -> None:
        disable_division(model)
        for module in model.modules():
            if isinstance(module, FSDPModule):
                module.set_force_sum_reduction_for_comms(True)

    fsdp.disable_fsdp_gradient_division = disable_division_with_sums


def _set_timeout_from_torch_2_14() -> None:
    """``torch.distributed.set_timeout(timeout, group)`` is new in torch 2.14; on 2.13 the same is
    the group's own ``set_timeout``. TorchTitan calls it after the first step."""
    import torch.distributed as dist

    if hasattr(dist, "set_timeout"):
        return

    def set_timeout(timeout: Any, group: Any = None) -> None:
        (group or dist.distributed_c10d._get_default_group()).set_timeout(timeout)

    dist.set_timeout = set_timeout


def _pipeline_steps_on_split_microbatches() -> None:
    """torch 2.14's ``schedule.step(arg_mbs=..., kwarg_mbs=..., target_mbs=...)`` on 2.13: the
    per-step set-up ``step`` does (each stage's backward flag, its state cleared), then the
    lists run through the schedule's ``_step_microbatches``, as ``step`` runs its own split."""
    import inspect

    from torch.distributed.pipelining import schedules

    for schedule in (schedules.PipelineScheduleSingle, schedules.PipelineScheduleMulti):
        whole_batch_step = schedule.step
        if "arg_mbs" in inspect.signature(whole_batch_step).parameters:
            return

        def step(
            self: Any,
            *args: Any,
            arg_mbs: list | None = None,
            kwarg_mbs: list | None = None,
            target_mbs: list | None = None,
            losses: list | None = None,
            return_outputs: bool = True,
            loss_kwargs: dict[str, Any] | None = None,
            whole_batch_step: Any = whole_batch_step,
            **kwargs: Any,
        ) -> Any:
            if arg_mbs is None and kwarg_mbs is None and target_mbs is None:
                return whole_batch_step(
                    self,
                    *args,
                    losses=losses,
                    return_outputs=return_outputs,
                    loss_kwargs=loss_kwargs,
                    **kwargs,
                )
            for stage in getattr(self, "_stages", None) or [self._stage]:
                stage.has_backward = self._has_backward
                stage.clear_runtime_states()
            self._step_microbatches(
                arg_mbs, kwarg_mbs, target_mbs, losses, return_outputs, loss_kwargs=loss_kwargs
            )
            stages = getattr(self, "_stages", None) or [self._stage]
            for stage in stages:
                if stage.is_last and return_outputs:
                    return self._merge_outputs(stage.output_chunks)
            return None

        schedule.step = step


def stand_in_for_triton_kernels() -> None:
    import importlib.util
    import sys
    import types

    if importlib.util.find_spec("triton") is not None:
        return
    name = "torchtitan.distributed.minimal_async_ep.kernels"
    placeholder = types.ModuleType(name)

    def kernel(kernel_name: str) -> Any:
        if kernel_name.startswith("_"):
            raise AttributeError(kernel_name)

        def unavailable(*args: Any, **kwargs: Any) -> None:
            raise NotImplementedError(
                f"{kernel_name} is a Triton kernel and triton is not installed"
            )

        return unavailable

    placeholder.__getattr__ = kernel  # type: ignore[method-assign]
    sys.modules[name] = placeholder


# --parallel's pipeline choices: TorchTitan's schedule names. The interleaved one runs two stages
# a rank, so it needs layers for twice as many stages; pp_fsdp runs two 1F1B stages, each
# sharded with FSDP2 over the rest of the ranks (4 ranks: 2 stages x 2 shards).
PIPELINE_SCHEDULES = {"pp": "1F1B", "pp_interleaved": "Interleaved1F1B", "pp_fsdp": "1F1B"}


def debug_model_config(
    *,
    model: str,
    tokenizer_dir: Path,
    dataset_dir: Path,
    dump_folder: Path,
    parallel: str,
    compile: bool,
    steps: int,
    seq_len: int,
    local_batch_size: int,
    n_layers: int,
    checkpoint_at: int,
    seed_checkpoint: Path | None,
    create_seed_checkpoint: bool = False,
    overrides: list[str] | None = None,
    log_freq: int = 1,
) -> Any:
    """TorchTitan's own debug-model config for ``model`` (``llama3``; ``deepseek_v3``, whose
    layers after the first are mixture-of-experts), sized for a test and pointed at our files."""
    import importlib

    registry = importlib.import_module(f"torchtitan.models.{model}")
    configs = importlib.import_module(f"torchtitan.models.{model}.config_registry")
    config = getattr(configs, f"{model}_debugmodel")()
    spec = registry.model_registry("debugmodel")
    spec.model.layers = spec.model.layers[:n_layers]
    simple_fsdp = parallel == "simple_fsdp"
    if simple_fsdp and model != "llama3":
        raise ValueError("recipes/titan: --parallel simple_fsdp runs the llama3 debug model")
    for layer in spec.model.layers:
        # SimpleFSDP's graph trainer traces the step, which would bake one batch's document
        # mask into the graph: it gets causal SDPA, as TorchTitan's own graph-trainer tests do.
        layer.attention.inner_attention = (
            _causal_sdpa_config() if simple_fsdp else _dense_mask_attention().Config()
        )
    config.model_spec = spec
    config.hf_assets_path = str(tokenizer_dir)
    config.dump_folder = str(dump_folder)
    config.dataloader.dataset_path = str(dataset_dir)

    if overrides:
        # The CPU reference runs without torch_tpu loaded (see select_device).
        if _device_type() != "tpu" and any(o.startswith("torch_tpu.") for o in overrides):
            raise ValueError("recipes/titan: torch_tpu's kernels swap in with --device tpu")
        config.override.imports = list(overrides)

    config.training.steps = steps
    config.training.seq_len = seq_len
    config.training.local_batch_size = local_batch_size
    # Full precision everywhere, so tpu and the CPU reference can be compared closely.
    config.training.mixed_precision_param = "float32"
    config.activation_checkpoint = None
    config.validator.enable = False
    config.training.disable_cuda_graphs = True  # no CUDA graphs on tpu (nor under a pipeline)
    config.metrics.log_freq = log_freq
    config.debug.seed = 0
    config.debug.deterministic = True

    world = int(os.environ.get("WORLD_SIZE", "1"))
    parallelism = config.parallelism
    parallelism.pipeline_parallel_degree = 1
    parallelism.spmd_backend = "full_dtensor"  # see the module's note on torch 2.13
    parallelism.data_parallel_shard_degree = 1
    parallelism.tensor_parallel_degree = 1
    if parallel in ("fsdp", "simple_fsdp"):
        parallelism.data_parallel_shard_degree = world
    elif parallel == "tp":
        parallelism.tensor_parallel_degree = world
    else:  # pipeline stages on tpu_dist's send/recv, one microbatch a sample
        stages = 2 if parallel == "pp_fsdp" else world
        if world % stages:
            raise ValueError(f"recipes/titan: --parallel {parallel} needs a multiple of 2 ranks")
        parallelism.pipeline_parallel_degree = stages
        parallelism.data_parallel_shard_degree = world // stages
        parallelism.pipeline_parallel_schedule = PIPELINE_SCHEDULES[parallel]
        parallelism.pipeline_parallel_microbatch_size = 1

    if simple_fsdp:
        config = _graph_trainer_config(config, whole_step=compile)
    elif compile:
        config.compile.enable = True
        config.compile.backend = "tpu" if _device_type() == "tpu" else "inductor"

    checkpoint = config.checkpoint
    checkpoint.folder = "checkpoint"
    checkpoint.last_save_model_only = False
    checkpoint.enable = checkpoint_at > 0 or seed_checkpoint is not None or create_seed_checkpoint
    # Without a checkpoint step the run saves only at its end; the seed is loaded, not saved.
    checkpoint.interval = checkpoint_at or steps
    checkpoint.create_seed_checkpoint = create_seed_checkpoint
    if seed_checkpoint is not None:
        # Every run starts from the same weights: TorchTitan's own seed checkpoint, made once on
        # CPU. Initialising on each device would draw from different generators.
        checkpoint.initial_load_path = str(seed_checkpoint.resolve())
        checkpoint.initial_load_model_only = True
    return config


WHOLE_STEP_PIPELINE = "recipes_titan_whole_step"
# The graph trainer's activation recompute (its memory policies): the recipes keep every
# activation, as their eager runs do.
RECOMPUTE_PASSES = (
    "tag_with_memory_policy_pass",
    "apply_cpu_offload_pass",
    "selective_activation_remat_pass",
)


def _causal_sdpa_config() -> Any:
    from torchtitan.models.common.attention import ScaledDotProductAttention

    return ScaledDotProductAttention.Config()


def _graph_trainer_config(config: Any, *, whole_step: bool) -> Any:
    """``config`` as TorchTitan's graph trainer runs it (``experiments/graph_trainer``): the
    model's parameters sharded by SimpleFSDP (DTensor redistributes in the forward, so tracing
    sees the all-gathers and reduce-scatters as ops), and with ``whole_step`` its
    ``aot_fx_trace`` mode: forward, loss and backward traced into one graph, run through
    :data:`WHOLE_STEP_PIPELINE`. Without it the same model runs eagerly."""
    from torchtitan.experiments.graph_trainer.configs import (
        GraphTrainerCompileConfig,
        to_graph_trainer_config,
    )
    from torchtitan.experiments.graph_trainer.llama3 import model_registry

    graph_config = to_graph_trainer_config(config, model_registry)
    graph_config.activation_checkpoint = None  # full precision, nothing recomputed
    if whole_step:
        _register_whole_step_pipeline()
        if _device_type() == "tpu":
            # What the trainer runs eagerly around the traced step (gradient clipping, the
            # optimizer, the loss's bookkeeping) joins the pending graph instead of running op
            # by op, so that it becomes part of the step's programs.
            import torch_tpu

            torch_tpu.set_eager_mode("defer_and_fuse")
        graph_config.compile = GraphTrainerCompileConfig(
            enable=True, mode="aot_fx_trace", pass_pipeline=WHOLE_STEP_PIPELINE
        )
    else:
        graph_config.compile = GraphTrainerCompileConfig(enable=False, mode=None)
    return graph_config


def _roofline_without_triton() -> None:
    """The bucketing pass orders collectives by inductor's roofline estimates, which ask Triton
    for the GPU's memory bandwidth. Without triton the estimate gets a fixed figure: it only
    weighs ops against each other, and one bucket leaves nothing to choose."""
    import importlib.util

    if importlib.util.find_spec("triton") is not None:
        return
    from torch.utils import _runtime_estimation

    _runtime_estimation.get_gpu_dram_gbps = lambda: 100  # type: ignore[attr-defined]


def _one_reduce_scatter(gm: Any, example_inputs: Any = None) -> Any:
    """torch's own reduce-scatter bucketing (inductor's ``bucket_reduce_scatter``) after the
    graph trainer's: the gradients its per-module plan leaves out (those whose backward nodes
    carry the loss's module name) join the one bucket."""
    from torch._inductor.fx_passes.bucketing import bucket_reduce_scatter

    bucket_reduce_scatter(gm, lambda bucket: 1e6, mode="custom_ops")  # MB: no cap
    gm.recompile()
    return gm


def _register_whole_step_pipeline() -> None:
    """The graph trainer's own passes (clean-up, FSDP bucketing; not its recompute) with one bucket
    for the whole model: one all-gather of every parameter before the forward and one
    reduce-scatter of every gradient after the backward. On tpu the traced step then becomes
    torch_tpu programs (``torch_tpu.integrations.torchtitan.tpu_programs``); on CPU it runs as
    traced. Inductor's passes (regional compile of flex attention, CUDA graphs) are left out."""
    import functools

    from torchtitan.experiments.graph_trainer import passes as graph_passes
    from torchtitan.experiments.graph_trainer.registry import register_pass_pipeline

    _roofline_without_triton()

    @register_pass_pipeline(WHOLE_STEP_PIPELINE)
    def pipeline(traced: Any, config: Any, *, parallel_dims: Any = None) -> list[Any]:
        steps = [
            step
            for step in graph_passes.compile_time_passes(
                traced, config, parallel_dims=parallel_dims, include_inductor=False
            )
            if graph_passes._get_pass_name(step) not in RECOMPUTE_PASSES
        ]
        for i, step in enumerate(steps):
            if isinstance(step, functools.partial) and "module_bucket_plans" in step.keywords:
                every_module = [
                    fqn
                    for plan in step.keywords["module_bucket_plans"]
                    for fqn in ([plan] if isinstance(plan, str) else plan)
                ]
                steps[i] = functools.partial(
                    step.func,
                    *step.args,
                    **{**step.keywords, "module_bucket_plans": [every_module]},
                )
        steps.append(_one_reduce_scatter)
        if _device_type() == "tpu":
            from torch_tpu.integrations.torchtitan import tpu_programs

            steps.append(tpu_programs)
        return steps


def kernel_runs() -> dict[str, dict[str, int]]:
    """How many times each of torch_tpu's layer kernels ran eagerly, forward and backward."""
    from torch_tpu.kernels import layers

    return {
        op.name: {"forward": op.runs, "backward": op.backward_op.runs if op.backward_op else 0}
        for op in (layers.rms_norm, layers.masked_attention)
    }


def create_seed_checkpoint(config: Any) -> None:
    """Saves step 0 of ``config``'s model (one process, on CPU), as ``torchtitan.train`` does."""
    trainer = config.build()
    try:
        trainer.checkpointer.save(curr_step=0, last_step=True)
    finally:
        trainer.close()


def _dense_mask_attention() -> type:
    """A FlexAttention whose forward is dense-masked SDPA; built lazily (imports torchtitan)."""
    from dataclasses import dataclass

    import torch
    import torch.nn.functional as F
    from torch.nn.attention.flex_attention import create_block_mask, create_mask
    from torchtitan.models.common import attention

    # The mask is built where the model runs, eagerly; TorchTitan compiles it with Inductor.
    attention._compiled_create_block_mask = create_block_mask

    # Not a FlexAttention itself (TorchTitan would refuse to compile it with any backend but
    # Inductor), but configured as one, so that the model builds flex's block masks for it.
    class DenseMaskAttention(attention.Module):
        @dataclass(kw_only=True, slots=True)
        class Config(attention.FlexAttention.Config):
            pass

        def __init__(self, config: Config) -> None:
            super().__init__()

        def forward(  # type: ignore[override]
            self,
            q_BLNH: torch.Tensor,
            k_BLNH: torch.Tensor,
            v_BLNH: torch.Tensor,
            *,
            attention_masks: Any,
            score_mod: Any = None,
            scale: float | None = None,
            enable_gqa: bool = False,
            out_transform: Any = None,
            **kwargs: Any,
        ) -> torch.Tensor:
            if score_mod is not None or out_transform is not None:
                raise NotImplementedError("DenseMaskAttention: score_mod and out_transform")
            batch, q_len, kv_len = q_BLNH.shape[0], q_BLNH.shape[1], k_BLNH.shape[1]
            mask = create_mask(
                attention_masks.mask_mod, batch, None, q_len, kv_len, device=q_BLNH.device
            )
            out_BNLH = F.scaled_dot_product_attention(
                q_BLNH.transpose(1, 2),
                k_BLNH.transpose(1, 2),
                v_BLNH.transpose(1, 2),
                attn_mask=mask,
                scale=scale,
                enable_gqa=enable_gqa,
            )
            return out_BNLH.transpose(1, 2)

    return DenseMaskAttention


def _device_type() -> str:
    from torchtitan.tools import utils

    return utils.device_type


def train(config: Any) -> tuple[list[float], dict[str, list[float]]]:
    """Builds the trainer and trains. Returns the global average loss of each step it ran, and
    per step: when its loss was logged (seconds, a monotonic clock) and, on tpu, torch_tpu's
    running counts of executions and host syncs."""
    import torch
    from torchtitan.tools.logging import init_logger

    init_logger()
    trainer = config.build()
    losses: list[float] = []
    per_step: dict[str, list[float]] = {"logged_at": []}
    counters = ("executions", "host_syncs") if _device_type() == "tpu" else ()
    log = trainer.metrics_processor.log

    def record(step: int, global_avg_loss: float, *args: Any, **kwargs: Any) -> None:
        losses.append(float(global_avg_loss))  # read from the device: the step has finished
        per_step["logged_at"].append(time.perf_counter())
        if counters:
            import torch_tpu

            metrics = torch_tpu.metrics()
            for name in counters:
                per_step.setdefault(name, []).append(metrics[name])
        log(step, global_avg_loss, *args, **kwargs)

    trainer.metrics_processor.log = record
    try:
        trainer.train()
    finally:
        trainer.close()
        if torch.distributed.is_initialized():
            torch.distributed.destroy_process_group()
    return losses, per_step
