"""TorchTitan's debug models on tpu (or on CPU with Gloo, the reference), from their own configs.

Run under torchrun, e.g.::

    torchrun --nproc-per-node 2 recipes/titan/train.py --device tpu --parallel fsdp --out /tmp/t

``--model`` picks Llama 3's debug model (the default) or DeepSeek V3's, a mixture of experts.
``--parallel fsdp`` shards with FSDP2 (``data_parallel_shard_degree 2``), ``tp`` runs 1-D tensor
parallel, ``pp`` and ``pp_interleaved`` pipeline stages (TorchTitan's 1F1B and Interleaved1F1B
schedules, one and two stages a rank), ``pp_fsdp`` two 1F1B stages each sharded by FSDP2 over
half the ranks (4 ranks), and ``--compile`` compiles the model and loss with
torch_tpu's backend. ``--parallel simple_fsdp`` runs TorchTitan's graph trainer
(``experiments/graph_trainer``) with SimpleFSDP, eagerly, or with ``--compile`` as a whole step:
forward, loss and backward traced into one graph with its FSDP collectives (``aot_fx_trace``).
Each run writes ``losses.json`` (the global average loss per logged step, from
rank 0, or under a pipeline the last rank, which holds the last stage) and ``steps.json`` (when
each was logged, in seconds, and on tpu the running counts of executions and host syncs) into
``--out``. ``--checkpoint-at N`` saves a
torch.distributed.checkpoint there at step N, and a later run with the same ``--out`` resumes
from the newest. ``--override MODULE.FUNCTION`` (repeatable) is TorchTitan's own
``override.imports``: ``torch_tpu.integrations.torchtitan.jax_rms_norm`` and ``.pallas_attention``
swap RMSNorm and attention for torch_tpu's kernels, and the run then also writes
``kernel_runs.json`` (how many times each kernel ran, forward and backward). Runs that are to
be compared start from one seed checkpoint:

    torchrun --nproc-per-node 1 recipes/titan/train.py --device cpu --create-seed-checkpoint \
        --out /tmp/seed        # then: --seed-checkpoint /tmp/seed/checkpoint/step-0

Everything TorchTitan 0.3.0 needs adapting for lives in ``compat.py``.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["tpu", "cpu"], default="tpu")
    parser.add_argument(
        "--model", choices=["llama3", "deepseek_v3"], default="llama3", help="deepseek_v3: MoE"
    )
    parser.add_argument(
        "--parallel",
        choices=["fsdp", "simple_fsdp", "tp", "pp", "pp_interleaved", "pp_fsdp"],
        default="fsdp",
    )
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch", type=int, default=4, help="local batch size per rank")
    parser.add_argument(
        "--layers", type=int, default=2, help="layers of the debug model (6 in full)"
    )
    parser.add_argument(
        "--log-freq",
        type=int,
        default=1,
        help="TorchTitan's metrics.log_freq: steps whose loss is logged (the first and every N-th)",
    )
    parser.add_argument("--checkpoint-at", type=int, default=0, help="0: no checkpoint")
    parser.add_argument(
        "--seed-checkpoint", type=Path, help="start from these weights (a step-0 checkpoint folder)"
    )
    parser.add_argument(
        "--create-seed-checkpoint",
        action="store_true",
        help="only write --out/checkpoint/step-0 (one process, --device cpu)",
    )
    parser.add_argument(
        "--override",
        action="append",
        default=[],
        metavar="MODULE.FUNCTION",
        help="TorchTitan's override.imports: swap layers, e.g. "
        "torch_tpu.integrations.torchtitan.jax_rms_norm (repeatable)",
    )
    parser.add_argument("--out", type=Path, required=True)
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import compat  # noqa: I001  (must run before torchtitan is imported)

    compat.select_device(args.device)
    from assets import make_assets

    tokenizer_dir, dataset_dir = make_assets(args.out / "assets")
    config = compat.debug_model_config(
        model=args.model,
        tokenizer_dir=tokenizer_dir,
        dataset_dir=dataset_dir,
        dump_folder=args.out,
        parallel=args.parallel,
        compile=args.compile,
        steps=args.steps,
        seq_len=args.seq_len,
        local_batch_size=args.batch,
        n_layers=args.layers,
        checkpoint_at=args.checkpoint_at,
        seed_checkpoint=args.seed_checkpoint,
        create_seed_checkpoint=args.create_seed_checkpoint,
        overrides=args.override,
        log_freq=args.log_freq,
    )
    if args.create_seed_checkpoint:
        compat.create_seed_checkpoint(config)
        return
    losses, per_step = compat.train(config)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    reporter = world - 1 if args.parallel in compat.PIPELINE_SCHEDULES else 0
    if int(os.environ.get("RANK", "0")) == reporter:
        (args.out / "losses.json").write_text(json.dumps(losses))
        (args.out / "steps.json").write_text(json.dumps(per_step))
        if args.override:
            (args.out / "kernel_runs.json").write_text(json.dumps(compat.kernel_runs()))


if __name__ == "__main__":
    main()
