"""TorchRec on tpu: fbgemm's jagged ops (torch_tpu.integrations.fbgemm) against fbgemm's CPU
kernels, TorchRec's unsharded EmbeddingBagCollection / EmbeddingCollection forward and
backward against the same modules on the CPU, fbgemm's dense TBE, and DLRM sharded by
DistributedModelParallel over tpu_dist (2 ranks under torchrun) against the same run over
Gloo on the CPU (tests/python/dist_workers/torchrec_worker.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

pytest.importorskip("torchrec", reason="TorchRec is not installed: bash scripts/setup.sh torchrec")
import fbgemm_gpu  # noqa: E402,F401 - defines torch.ops.fbgemm
from dist_workers.launch import assert_passed, by_case, once_per_run, torchrun  # noqa: E402
from torchrec import (  # noqa: E402
    EmbeddingBagCollection,
    EmbeddingBagConfig,
    EmbeddingCollection,
    EmbeddingConfig,
    KeyedJaggedTensor,
    PoolingType,
)

import torch_tpu  # noqa: E402

TPU = torch.device("tpu")
fbgemm = torch.ops.fbgemm


def jagged(features: int, batch: int, rows: int, seed: int, max_length: int = 4) -> tuple:
    """Lengths [features * batch], values and per-sample weights of a random jagged batch."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.randint(0, max_length, (features * batch,), generator=g)
    values = torch.randint(0, rows, (int(lengths.sum()),), generator=g)
    weights = torch.rand(values.shape, generator=g)
    return lengths, values, weights


def both(fn: Any, *args: Any) -> tuple[Any, Any]:
    """fn on the CPU arguments, and on their tpu copies."""
    on_tpu = [a.to(TPU) if isinstance(a, torch.Tensor) else a for a in args]
    return fn(*args), fn(*on_tpu)


def same(got: Any, want: Any) -> None:
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            same(g, w)
    elif want is None:
        assert got is None
    else:
        assert got.device.type == "tpu"
        torch.testing.assert_close(got.cpu(), want)


# --- fbgemm's ops, one by one ------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_cumsums(dtype: torch.dtype) -> None:
    lengths = torch.tensor([3, 0, 2, 5, 1], dtype=dtype)
    for op in (
        fbgemm.asynchronous_complete_cumsum,
        fbgemm.asynchronous_inclusive_cumsum,
        fbgemm.asynchronous_exclusive_cumsum,
    ):
        same(*reversed(both(op, lengths)))
    rows = torch.tensor([[1, 2, 3], [0, 4, 1]], dtype=dtype)
    same(*reversed(both(fbgemm.asynchronous_complete_cumsum, rows)))


@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("given_sum", [False, True])
@pytest.mark.parametrize("permute", [[2, 0, 1], [1, 1, 2], [2]])
def test_permute_2d_sparse_data(weighted: bool, given_sum: bool, permute: list[int]) -> None:
    lengths, values, weights = jagged(3, 4, 100, seed=1)
    lengths = lengths.view(3, 4).to(torch.int32)
    order = torch.tensor(permute, dtype=torch.int32)
    total = int(lengths[order].sum()) if given_sum else None
    w = weights if weighted else None
    want = fbgemm.permute_2D_sparse_data(order, lengths, values, w, total)
    got = fbgemm.permute_2D_sparse_data(
        order.to(TPU), lengths.to(TPU), values.to(TPU), None if w is None else w.to(TPU), total
    )
    same(got, want)


def test_permute_1d_sparse_data() -> None:
    lengths, values, weights = jagged(5, 1, 50, seed=2)
    lengths = lengths.to(torch.int32)  # fbgemm's CPU kernel takes int32 lengths only
    order = torch.tensor([4, 0, 3, 1, 2], dtype=torch.int32)
    want = fbgemm.permute_1D_sparse_data(order, lengths, values, weights)
    got = fbgemm.permute_1D_sparse_data(
        order.to(TPU), lengths.to(TPU), values.to(TPU), weights.to(TPU)
    )
    same(got, want)


def test_segment_sum_csr_offsets_range_invert_permute() -> None:
    csr = torch.tensor([0, 2, 2, 5], dtype=torch.int32)
    values = torch.randn(10)
    same(*reversed(both(lambda c, v: fbgemm.segment_sum_csr(2, c, v), csr, values)))
    offsets = torch.tensor([0, 3, 3, 7])
    same(*reversed(both(lambda o: fbgemm.offsets_range(o, 9), offsets)))
    same(*reversed(both(fbgemm.invert_permute, torch.tensor([3, 0, 2, 1]))))


@pytest.mark.parametrize("padding", [0.0, -1.5])
def test_jagged_to_padded_dense(padding: float) -> None:
    offsets = torch.tensor([0, 2, 2, 6, 7])
    values = torch.randn(7, 3)
    want = fbgemm.jagged_to_padded_dense(values, [offsets], [3], padding)
    got = fbgemm.jagged_to_padded_dense(values.to(TPU), [offsets.to(TPU)], [3], padding)
    same(got, want)
    same(
        fbgemm.jagged_2d_to_dense(values.to(TPU), offsets.to(TPU), 4),
        fbgemm.jagged_2d_to_dense(values, offsets, 4),
    )


def test_permute_pooled_embs_forward_and_backward() -> None:
    dims = [2, 3, 1, 2]
    offsets = torch.tensor([0, 2, 5, 6, 8])
    order = torch.tensor([2, 0, 3, 1])
    inverse = torch.argsort(order)
    inv_offsets = torch.cat(
        [torch.zeros(1, dtype=torch.long), torch.cumsum(torch.tensor(dims)[order], 0)]
    )
    pooled = torch.randn(3, sum(dims), requires_grad=True)
    pooled_tpu = pooled.detach().to(TPU).requires_grad_()
    want = fbgemm.permute_pooled_embs_auto_grad(pooled, offsets, order, inv_offsets, inverse)
    got = fbgemm.permute_pooled_embs_auto_grad(
        pooled_tpu, offsets.to(TPU), order.to(TPU), inv_offsets.to(TPU), inverse.to(TPU)
    )
    same(got, want)
    grad = torch.randn_like(want)
    want.backward(grad)
    got.backward(grad.to(TPU))
    same(pooled_tpu.grad, pooled.grad)


def test_bounds_check_indices_zeroes_and_counts_what_lies_outside() -> None:
    rows = torch.tensor([10, 4])
    offsets = torch.tensor([0, 2, 3, 5, 7])  # 2 features x batch 2
    indices = torch.tensor([1, 12, 9, 3, 4, -1, -2])
    want_indices, want_warning = indices.clone(), torch.zeros(1, dtype=torch.long)
    fbgemm.bounds_check_indices(rows, want_indices, offsets, 1, want_warning)
    got_indices, got_warning = indices.to(TPU), torch.zeros(1, dtype=torch.long, device=TPU)
    fbgemm.bounds_check_indices(rows.to(TPU), got_indices, offsets.to(TPU), 1, got_warning)
    same(got_indices, want_indices)
    same(got_warning, want_warning)
    with pytest.raises(IndexError, match="outside their tables"):
        fbgemm.bounds_check_indices(rows.to(TPU), indices.to(TPU), offsets.to(TPU), 0, got_warning)


@pytest.mark.parametrize("sequence,positions,weighted", [(False, False, True), (True, True, False)])
@pytest.mark.parametrize("keep", [False, True], ids=["rows", "keep_index"])
@pytest.mark.parametrize("dtype", [torch.long, torch.int32], ids=str)
def test_block_bucketize_sparse_features(
    sequence: bool, positions: bool, weighted: bool, keep: bool, dtype: torch.dtype
) -> None:
    """Row-wise sharding's split of a batch into ranks' row blocks (indices past the blocks
    included), against fbgemm's CPU kernel: lengths, indices, weights, positions in the bag
    and the permutation back."""
    g = torch.Generator().manual_seed(3)
    lengths = torch.randint(0, 5, (3 * 4,), generator=g).to(dtype)
    block_sizes = torch.tensor([5, 8, 3], dtype=dtype)
    indices = torch.randint(0, 20, (int(lengths.sum()),), generator=g).to(dtype)
    weights = torch.rand(indices.shape, generator=g) if weighted else None

    def bucketize(*args: Any) -> Any:
        return fbgemm.block_bucketize_sparse_features(*args, keep_orig_idx=keep)

    want, got = both(bucketize, lengths, indices, positions, sequence, block_sizes, 2, weights)
    same(got, want)


def test_bad_input_raises() -> None:
    with pytest.raises(ValueError, match="1-d or 2-d"):
        fbgemm.asynchronous_complete_cumsum(torch.ones(2, 2, 2, dtype=torch.long, device=TPU))
    with pytest.raises(ValueError, match="2-d lengths"):
        fbgemm.permute_2D_sparse_data(
            torch.tensor([0], device=TPU),
            torch.tensor([1, 2], device=TPU),
            torch.tensor([1, 2, 3], device=TPU),
        )
    with pytest.raises(ValueError, match="weights .* differ in length"):
        fbgemm.permute_1D_sparse_data(
            torch.tensor([0], device=TPU),
            torch.tensor([2], device=TPU),
            torch.tensor([1, 2], device=TPU),
            torch.ones(3, device=TPU),
        )


# --- TorchRec's unsharded modules --------------------------------------------------------


def kjt(keys: list[str], batch: tuple, weighted: bool) -> KeyedJaggedTensor:
    lengths, values, weights = batch
    return KeyedJaggedTensor.from_lengths_sync(
        keys=keys, values=values, lengths=lengths, weights=weights if weighted else None
    )


def ebc_tables(pooling: PoolingType) -> list[EmbeddingBagConfig]:
    return [
        EmbeddingBagConfig(
            name="t0", embedding_dim=8, num_embeddings=50, feature_names=["f0"], pooling=pooling
        ),
        EmbeddingBagConfig(
            name="t1",
            embedding_dim=4,
            num_embeddings=30,
            feature_names=["f1", "f2"],
            pooling=pooling,
        ),
    ]


@pytest.mark.parametrize(
    "pooling,weighted",
    [(PoolingType.SUM, False), (PoolingType.MEAN, False), (PoolingType.SUM, True)],
    ids=["sum", "mean", "weighted"],
)
def test_embedding_bag_collection_matches_cpu(pooling: PoolingType, weighted: bool) -> None:
    keys = ["f0", "f1", "f2"]
    cpu = EmbeddingBagCollection(ebc_tables(pooling), is_weighted=weighted, device="cpu")
    tpu = EmbeddingBagCollection(ebc_tables(pooling), is_weighted=weighted, device=TPU)
    tpu.load_state_dict(cpu.state_dict())
    for seed in range(3):
        batch = jagged(len(keys), 4, 30, seed)
        # A KeyedJaggedTensor caches its split on first use: each device gets its own.
        want = cpu(kjt(keys, batch, weighted))
        got = tpu(kjt(keys, batch, weighted).to(TPU))
        assert got.keys() == want.keys()
        same(got.values(), want.values())
        grad = torch.randn_like(want.values())
        want.values().backward(grad)
        got.values().backward(grad.to(TPU))
    for (name, want_param), (_, got_param) in zip(
        cpu.named_parameters(), tpu.named_parameters(), strict=True
    ):
        assert got_param.grad is not None, name
        same(got_param.grad, want_param.grad)


def test_embedding_collection_matches_cpu() -> None:
    tables = [
        EmbeddingConfig(name="t0", embedding_dim=8, num_embeddings=40, feature_names=["f0", "f1"])
    ]
    cpu = EmbeddingCollection(tables=tables, device="cpu")
    tpu = EmbeddingCollection(tables=tables, device=TPU)
    tpu.load_state_dict(cpu.state_dict())
    batch = jagged(2, 5, 40, seed=4)
    want = cpu(kjt(["f0", "f1"], batch, False))
    got = tpu(kjt(["f0", "f1"], batch, False).to(TPU))
    loss_cpu = sum((jt.values() ** 2).sum() for jt in want.values())
    loss_tpu = sum((jt.values() ** 2).sum() for jt in got.values())
    for key in want:
        same(got[key].values(), want[key].values())
        same(got[key].lengths(), want[key].lengths())
        same(got[key].offsets(), want[key].offsets())
    loss_cpu.backward()
    loss_tpu.backward()
    same(tpu.embeddings["t0"].weight.grad, cpu.embeddings["t0"].weight.grad)


def test_repeated_batches_compile_nothing_new() -> None:
    """Executables depend on the batch's lengths only: a second pass over the same batches
    (new tensors, same lengths) runs from the cache."""
    keys = ["f0", "f1", "f2"]
    model = EmbeddingBagCollection(ebc_tables(PoolingType.SUM), is_weighted=True, device=TPU)
    batches = [jagged(len(keys), 4, 30, seed) for seed in range(4)]

    def run_pass() -> None:
        for batch in batches:
            out = model(kjt(keys, batch, True).to(TPU)).values()
            out.sum().backward()
        model.zero_grad()
        torch.tpu.synchronize()

    run_pass()
    # DeferAndFuse may cut its first fused graphs where later passes do not: one more pass.
    if torch_tpu.get_eager_mode() == "defer_and_fuse":
        run_pass()
    compiles = torch_tpu.metrics()["compiles"]
    run_pass()
    assert torch_tpu.metrics()["compiles"] == compiles


# --- fbgemm's table-batched embeddings (TBE) ---------------------------------------------


def test_dense_tbe_matches_cpu() -> None:
    """fbgemm's dense TBE (what TorchRec's data-parallel tables run), moved to tpu: the pooled
    lookup and the weights' gradient."""
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        DenseTableBatchedEmbeddingBagsCodegen,
        PoolingMode,
    )

    specs = [(20, 8), (12, 4)]
    lengths, values, weights = jagged(2, 3, 12, seed=5)
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)])
    for mode in (PoolingMode.SUM, PoolingMode.MEAN):
        cpu = DenseTableBatchedEmbeddingBagsCodegen(specs, pooling_mode=mode, use_cpu=True)
        tpu = DenseTableBatchedEmbeddingBagsCodegen(specs, pooling_mode=mode, use_cpu=True)
        tpu.load_state_dict(cpu.state_dict())
        tpu.to(TPU)
        per_sample = weights if mode == PoolingMode.SUM else None
        want = cpu(values, offsets, per_sample)
        got = tpu(
            values.to(TPU), offsets.to(TPU), None if per_sample is None else per_sample.to(TPU)
        )
        same(got, want)
        grad = torch.randn_like(want)
        want.backward(grad)
        got.backward(grad.to(TPU))
        same(tpu.weights.grad, cpu.weights.grad)


def fused_tbes(mode: str, rows: list[int], table_of_feature: list[int]) -> tuple[Any, Any]:
    """fbgemm's training TBE (SGD fused into its backward) over tables of `rows` rows of 8, on
    the CPU and on tpu, holding the same tables."""
    from fbgemm_gpu.split_embedding_configs import EmbOptimType
    from fbgemm_gpu.split_table_batched_embeddings_ops_common import EmbeddingLocation
    from fbgemm_gpu.split_table_batched_embeddings_ops_training import (
        ComputeDevice,
        PoolingMode,
        SplitTableBatchedEmbeddingBagsCodegen,
    )

    def tbe(device: torch.device) -> SplitTableBatchedEmbeddingBagsCodegen:
        specs = [(n, 8, EmbeddingLocation.HOST, ComputeDevice.CPU) for n in rows]
        return SplitTableBatchedEmbeddingBagsCodegen(
            embedding_specs=specs,
            feature_table_map=table_of_feature,
            optimizer=EmbOptimType.EXACT_SGD,
            learning_rate=0.1,
            pooling_mode=PoolingMode.SUM if mode == "sum" else PoolingMode.MEAN,
            device=device,
        )

    cpu, tpu = tbe(torch.device("cpu")), tbe(TPU)
    with torch.no_grad():
        pairs = zip(cpu.split_embedding_weights(), tpu.split_embedding_weights(), strict=True)
        for want, got in pairs:
            got.copy_(want)
    return cpu, tpu


def tbe_batch(
    g: torch.Generator,
    rows: list[int],
    table_of_feature: list[int],
    batch: int,
    low: int,
    high: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """indices, offsets and per-sample weights of `batch` bags a feature, low..high-1 ids each."""
    lengths = torch.randint(low, high, (len(table_of_feature) * batch,), generator=g)
    indices = torch.cat(
        [
            torch.randint(0, rows[table_of_feature[bag // batch]], (int(n),), generator=g)
            for bag, n in enumerate(lengths.tolist())
        ]
    )
    offsets = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)])
    return indices, offsets, torch.rand(indices.shape, generator=g)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_fused_tbe_matches_cpu(mode: str) -> None:
    """fbgemm's training TBE on tpu (what sharded tables run) against the same on the CPU: the
    pooled lookup (weighted for sum) and the tables after the fused SGD update of each step,
    with two features reading one table. (Row-wise Adagrad is held against the CPU by the
    sharded cases: fbgemm's CPU kernel refuses this direct set-up.)"""
    rows, table_of_feature = [20, 12], [0, 1, 0]
    cpu, tpu = fused_tbes(mode, rows, table_of_feature)
    g = torch.Generator().manual_seed(6)
    for _ in range(3):
        tbe_step(cpu, tpu, tbe_batch(g, rows, table_of_feature, 5, 0, 4), weighted=mode == "sum")


def tbe_step(cpu: Any, tpu: Any, batch: tuple, weighted: bool) -> None:
    """A lookup and its fused update on both, compared: the pooled rows, then the tables."""
    indices, offsets, weights = batch
    want = cpu(indices, offsets, weights if weighted else None)
    got = tpu(indices.to(TPU), offsets.to(TPU), weights.to(TPU) if weighted else None)
    same(got, want)
    grad = torch.randn_like(want)
    want.backward(grad)
    got.backward(grad.to(TPU))
    for got_table, want_table in zip(
        tpu.split_embedding_weights(), cpu.split_embedding_weights(), strict=True
    ):
        same(got_table, want_table)


@pytest.mark.parametrize("module", ["ebc", "tbe"])
def test_new_batch_lengths_compile_nothing_in_a_met_bucket(
    module: str, size_buckets_on: None
) -> None:
    """Each batch a new count of indices (a jagged batch), every feature's count in one bucket:
    once the uploads met two lengths of it, the lookups and their gradients (and the TBE's
    bounds check and fused update) run at the bucket (docs/design/buckets.md, Jagged indices),
    equal to the CPU's, and new counts compile nothing."""
    keys, rows, table_of_feature = ["f0", "f1", "f2"], [30, 30], [0, 1, 1]
    g = torch.Generator().manual_seed(7)
    if module == "ebc":
        cpu = EmbeddingBagCollection(ebc_tables(PoolingType.SUM), is_weighted=True, device="cpu")
        tpu = EmbeddingBagCollection(ebc_tables(PoolingType.SUM), is_weighted=True, device=TPU)
        tpu.load_state_dict(cpu.state_dict())
    else:
        cpu, tpu = fused_tbes("sum", rows, table_of_feature)

    def step() -> None:
        # 24..28 indices a feature (the 32 bucket), 72..84 in all (the 128 bucket).
        batch = tbe_batch(g, rows, table_of_feature, 4, 6, 8)
        if module == "tbe":
            tbe_step(cpu, tpu, batch, weighted=True)
            return
        indices, offsets, weights = batch
        lengths = offsets[1:] - offsets[:-1]
        want = cpu(kjt(keys, (lengths, indices, weights), True)).values()
        got = tpu(kjt(keys, (lengths, indices, weights), True).to(TPU)).values()
        same(got, want)
        want.sum().backward()
        got.sum().backward()

    with torch_tpu.eager_mode("strict"):  # buckets are for ops run one by one
        for _ in range(4):
            step()
        start = torch_tpu.metrics()["compiles"]
        for _ in range(4):
            step()
        assert torch_tpu.metrics()["compiles"] == start
    if module == "ebc":
        pairs = zip(cpu.named_parameters(), tpu.named_parameters(), strict=True)
        for (name, want), (_, got) in pairs:
            assert got.grad is not None, name
            same(got.grad, want.grad)


# --- Sharded: DistributedModelParallel over tpu_dist vs Gloo on the CPU ------------------

# "sharding-optimizer"; "+checkpoint": the tpu run's parameters are compared after a
# torch.distributed.checkpoint save on both ranks and a load into a freshly sharded model.
DEFAULT_CASES = ["table_wise-sgd+checkpoint"]
FULL_CASES = [
    "table_wise-rowwise_adagrad",
    "column_wise-sgd",
    "column_wise-rowwise_adagrad+checkpoint",
    "data_parallel-sgd",
    "auto-sgd",
    "row_wise-sgd",
    "row_wise-rowwise_adagrad+checkpoint",
]


def sharded(tmp_path_factory: pytest.TempPathFactory, cases: list[str]) -> list[dict]:
    def launch() -> list[dict]:
        folder: Path = tmp_path_factory.mktemp("torchrec_worker")
        env = {"DIST_TMP": str(folder), "TORCHREC_CASES": ",".join(cases)}
        per_rank = torchrun("torchrec_worker.py", folder / "results", timeout=400, env=env)
        return by_case(per_rank)

    return once_per_run(tmp_path_factory, f"torchrec_worker-{'-'.join(cases)}", launch)


@pytest.mark.parametrize("case", DEFAULT_CASES)
def test_dlrm_sharded_matches_gloo_cpu(case: str, tmp_path_factory: pytest.TempPathFactory) -> None:
    """20 DLRM steps on 2 ranks: every loss and local parameter shard equal to the CPU's, the
    parameters read back from a checkpoint."""
    assert_passed(sharded(tmp_path_factory, DEFAULT_CASES), case)


@pytest.mark.full_suite
@pytest.mark.parametrize("case", FULL_CASES)
def test_dlrm_sharded_matches_gloo_cpu_full(
    case: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    assert_passed(sharded(tmp_path_factory, FULL_CASES), case)
