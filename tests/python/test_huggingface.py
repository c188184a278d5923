"""Hugging Face end to end on tpu, each checked against the same run on CPU: loading with
device_map, Trainer (accelerate underneath), generate, mixture-of-experts layers, attention and
Diffusers. Models are built from tiny configs and saved locally by the tests (no hub access)."""

from __future__ import annotations

import copy
import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from conftest import TPU

import torch_tpu

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")

LLAMA = dict(
    vocab_size=128,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=128,
)


def llama(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    config = transformers.LlamaConfig(**LLAMA)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def on_tpu(cpu_model: torch.nn.Module) -> torch.nn.Module:
    """A tpu copy of `cpu_model` (same weights and dtypes)."""
    return copy.deepcopy(cpu_model).to(TPU)


@pytest.fixture(scope="module")
def saved_llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, torch.nn.Module]:
    model = llama()
    path = tmp_path_factory.mktemp("llama")
    model.save_pretrained(path)  # safetensors
    return path, model


def devices_of(model: torch.nn.Module) -> set[str]:
    return {p.device.type for p in model.parameters()}


# --- memory reporting (what accelerate's device_map="auto" reads) ---------------------------


def test_memory_reporting() -> None:
    free, total = torch.tpu.mem_get_info()
    assert 0 < free <= total
    assert torch.tpu.get_device_properties().total_memory == total
    assert torch.accelerator.get_memory_info()[1] == total
    before = torch.tpu.memory_allocated()
    torch.tpu.reset_peak_memory_stats()
    x = torch.empty(1 << 18, device=TPU)  # 1 MiB
    assert torch.tpu.memory_allocated() - before == 1 << 20
    assert torch.accelerator.memory_allocated() == torch.tpu.memory_allocated()
    assert torch.tpu.memory_reserved() == torch.tpu.memory_allocated()
    assert torch.tpu.max_memory_allocated() >= before + (1 << 20)
    stats = torch.tpu.memory_stats()
    assert stats["allocated_bytes.all.current"] == torch.tpu.memory_allocated()
    assert stats["allocation.all.current"] >= 1
    del x
    assert torch.tpu.memory_allocated() == before
    assert "Allocated memory" in torch.tpu.memory_summary()


# --- loading --------------------------------------------------------------------------------


@pytest.mark.parametrize("device_map", ["tpu", {"": "tpu:0"}, "auto"])
def test_from_pretrained_device_map(saved_llama, device_map) -> None:
    path, cpu_model = saved_llama
    model = transformers.AutoModelForCausalLM.from_pretrained(path, device_map=device_map)
    assert devices_of(model) == {"tpu"}
    ids = torch.randint(0, 128, (2, 8))
    torch.testing.assert_close(
        model(ids.to(TPU)).logits.cpu(), cpu_model(ids).logits, atol=1e-5, rtol=1e-5
    )


def test_from_pretrained_bfloat16(saved_llama) -> None:
    path, _ = saved_llama
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, device_map="tpu", dtype=torch.bfloat16
    )
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert devices_of(model) == {"tpu"}


def test_device_map_auto_splits_when_memory_is_short(saved_llama) -> None:
    path, cpu_model = saved_llama
    # About half the model's bytes on tpu: accelerate puts the rest on the CPU.
    size = sum(p.numel() * p.element_size() for p in cpu_model.parameters())
    model = transformers.AutoModelForCausalLM.from_pretrained(
        path, device_map="auto", max_memory={"tpu:0": size // 2, "cpu": 10 * size}
    )
    # Offloaded weights wait on the meta device until their module runs, as with CUDA.
    assert set(model.hf_device_map.values()) == {0, "cpu"}
    assert "tpu" in devices_of(model)
    ids = torch.randint(0, 128, (2, 8))
    torch.testing.assert_close(model(ids).logits.cpu(), cpu_model(ids).logits, atol=1e-5, rtol=1e-5)


def test_bad_device_map_and_checkpoint(saved_llama) -> None:
    path, _ = saved_llama
    # As CUDA: a device that does not exist is torch.AcceleratorError.
    with pytest.raises(torch.AcceleratorError, match="out of range"):
        transformers.AutoModelForCausalLM.from_pretrained(path, device_map={"": "tpu:7"})
    small = transformers.LlamaConfig(**{**LLAMA, "hidden_size": 32})
    with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
        transformers.AutoModelForCausalLM.from_pretrained(path, config=small, device_map="tpu")


# --- generate -------------------------------------------------------------------------------


def test_generate_matches_cpu() -> None:
    cpu_model = llama()
    model = on_tpu(cpu_model)
    ids = torch.randint(0, 128, (2, 8))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding in a batch
    for options in (
        dict(do_sample=False),
        dict(do_sample=False, num_beams=3),
        dict(do_sample=False, attention_mask=mask),
    ):
        tpu_options = {k: v.to(TPU) if torch.is_tensor(v) else v for k, v in options.items()}
        expected = cpu_model.generate(ids, max_new_tokens=6, **options)
        actual = model.generate(ids.to(TPU), max_new_tokens=6, **tpu_options)
        assert torch.equal(actual.cpu(), expected), options
    # Sampling is reproducible from the seed.
    samples = []
    for _ in range(2):
        torch.manual_seed(3)
        samples.append(model.generate(ids.to(TPU), max_new_tokens=6, do_sample=True).cpu())
    assert torch.equal(samples[0], samples[1])


@pytest.fixture
def strict_mode() -> Iterator[None]:
    with torch_tpu.eager_mode("strict"):
        yield


@pytest.mark.usefixtures("strict_mode")
def test_generate_static_cache_compiles_once() -> None:
    # Strict's counts (DeferAndFuse's are test_generate_compiles_grow_with_log_of_length's: there
    # a second generate's cache reset joins its first step's graph, one more executable once).
    cpu_model = llama()
    model = on_tpu(cpu_model)
    ids = torch.randint(0, 128, (1, 8))
    expected = cpu_model.generate(ids, max_new_tokens=10, do_sample=False)
    options = dict(max_new_tokens=10, do_sample=False, cache_implementation="static")
    graphs = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    assert torch.equal(model.generate(ids.to(TPU), **options).cpu(), expected)
    # transformers compiles the decoding step with our "tpu" backend by itself: one graph for
    # all ten tokens (a second only if Dynamo specializes the first step), not one per token.
    assert 1 <= torch._dynamo.utils.counters["stats"]["unique_graphs"] - graphs <= 2
    compiles = torch_tpu.metrics()["compiles"]
    # A second generate of the same shapes reuses every executable: no compile per token.
    assert torch.equal(model.generate(ids.to(TPU), **options).cpu(), expected)
    assert torch_tpu.metrics()["compiles"] == compiles


@pytest.mark.parametrize("cache", ["static", "dynamic"])
@pytest.mark.parametrize("mode", ["strict", "defer_and_fuse"])
def test_generate_compiles_grow_with_log_of_length(mode: str, cache: str) -> None:
    # generate appends each token with torch.cat to input_ids and positions, and reads their
    # last element through views; the default dynamic cache grows keys and values by cat too,
    # and attention reads them whole: at exact sizes that compiled 3 to 5 executables per token
    # (and in DeferAndFuse the whole step's fused graph), so a first long answer spent its time
    # compiling. Size buckets make it a few per power of two of the length.
    torch.manual_seed(0)
    config = transformers.Qwen3Config(**LLAMA, head_dim=16)
    cpu_model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model = on_tpu(cpu_model)
    ids = torch.randint(0, 128, (1, 8))
    was_on = torch_tpu._C._size_buckets()
    torch_tpu._C._set_size_buckets(True)
    try:
        with torch_tpu.eager_mode(mode):
            for tokens in (6, 40):  # lengths 9-14, then 15-48
                options = dict(
                    max_new_tokens=tokens,
                    min_new_tokens=tokens,
                    do_sample=False,
                )
                if cache == "static":
                    options["cache_implementation"] = "static"
                compiles = torch_tpu.metrics()["compiles"]
                actual = model.generate(ids.to(TPU), **options).cpu()
                assert torch.equal(actual, cpu_model.generate(ids, **options))
        # Exact sizes: over 100 (3 to 5 per new length); buckets: the cats, copy, add and
        # attention of the buckets of 32 and 64, the static cache's new size, the fused graphs
        # around them.
        assert torch_tpu.metrics()["compiles"] - compiles <= 24, (
            torch_tpu.metrics()["compiles"] - compiles
        )
    finally:
        torch_tpu._C._set_size_buckets(was_on)


# --- mixture of experts: histc over expert ids and _grouped_mm ------------------------------


def test_histc_integer_input() -> None:
    ids = torch.tensor([0, 1, 1, 3, 7, -2, 2, 3], dtype=torch.int32)
    result = torch.histc(ids.to(TPU), bins=4, min=0, max=3)
    assert result.dtype == torch.int32  # as CUDA: the counts keep the input's dtype
    assert torch.equal(result.cpu(), torch.histc(ids.float(), bins=4, min=0, max=3).int())


def offsets(*ends: int) -> torch.Tensor:
    return torch.tensor(ends, dtype=torch.int32)


GROUPED_MM_CASES = {
    "ragged_rows": (lambda: torch.randn(6, 8), lambda: torch.randn(3, 8, 4), offsets(2, 4, 6)),
    "ragged_k": (lambda: torch.randn(8, 12), lambda: torch.randn(12, 4), offsets(4, 8, 12)),
    "ragged_cols": (lambda: torch.randn(3, 8, 8), lambda: torch.randn(8, 12), offsets(4, 8, 12)),
    "batched": (lambda: torch.randn(3, 8, 4), lambda: torch.randn(3, 4, 8), None),
}


@pytest.mark.parametrize("case", list(GROUPED_MM_CASES))
def test_grouped_mm_forward_and_backward(case: str) -> None:
    make_a, make_b, offs = GROUPED_MM_CASES[case]
    torch.manual_seed(0)
    a, b = make_a().requires_grad_(), make_b().requires_grad_()
    ta, tb = a.detach().to(TPU).requires_grad_(), b.detach().to(TPU).requires_grad_()
    expected = torch._grouped_mm(a, b, offs=offs)
    torch_tpu.reset_metrics()
    actual = torch._grouped_mm(ta, tb, offs=None if offs is None else offs.to(TPU))
    assert torch_tpu.metrics()["host_syncs"] == 0  # offs is never read on the host
    torch.testing.assert_close(actual.cpu(), expected, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(expected)
    if case == "ragged_rows":  # CPU's backward needs the other forms, which it takes contiguous
        expected.backward(grad)
        actual.backward(grad.to(TPU))
        torch.testing.assert_close(ta.grad.cpu(), a.grad, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(tb.grad.cpu(), b.grad, atol=1e-5, rtol=1e-5)


def test_grouped_mm_bfloat16_and_bias() -> None:
    a, b = torch.randn(6, 8).bfloat16(), torch.randn(3, 8, 8).bfloat16()
    expected = torch._grouped_mm(a, b, offs=offsets(2, 4, 6))
    actual = torch._grouped_mm(a.to(TPU), b.to(TPU), offs=offsets(2, 4, 6).to(TPU))
    assert actual.dtype == torch.bfloat16
    torch.testing.assert_close(actual.cpu(), expected, atol=1e-2, rtol=1.6e-2)
    with pytest.raises(RuntimeError, match="Bias not supported"):
        torch._grouped_mm(a.to(TPU), b.to(TPU), offs=offsets(2, 4, 6).to(TPU), bias=b[:, 0].to(TPU))


MOE_CONFIGS = {
    "mixtral": lambda: transformers.MixtralConfig(
        **{**LLAMA, "intermediate_size": 64}, num_local_experts=4, num_experts_per_tok=2
    ),
    "qwen3_moe": lambda: transformers.Qwen3MoeConfig(
        **{**LLAMA, "intermediate_size": 64},
        moe_intermediate_size=32,
        num_experts=4,
        num_experts_per_tok=2,
    ),
}


@pytest.mark.parametrize("name", list(MOE_CONFIGS))
def test_moe_forward_backward_generate(name: str) -> None:
    torch.manual_seed(0)
    cpu_model = transformers.AutoModelForCausalLM.from_config(MOE_CONFIGS[name]())
    model = on_tpu(cpu_model)
    ids = torch.randint(0, 128, (2, 8))
    expected = cpu_model(ids, labels=ids)
    actual = model(ids.to(TPU), labels=ids.to(TPU))
    torch.testing.assert_close(actual.logits.cpu(), expected.logits, atol=1e-5, rtol=1e-5)
    expected.loss.backward()
    actual.loss.backward()
    for (label, p), q in zip(cpu_model.named_parameters(), model.parameters(), strict=True):
        if p.grad is not None:
            torch.testing.assert_close(q.grad.cpu(), p.grad, atol=1e-5, rtol=1e-4, msg=label)
    assert torch.equal(
        model.generate(ids.to(TPU), max_new_tokens=5, do_sample=False).cpu(),
        cpu_model.generate(ids, max_new_tokens=5, do_sample=False),
    )


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_moe_compiled(dtype: torch.dtype) -> None:
    torch.manual_seed(0)
    cpu_model = transformers.AutoModelForCausalLM.from_config(MOE_CONFIGS["mixtral"]())
    cpu_model = cpu_model.to(dtype)
    model = on_tpu(cpu_model)
    compiled = torch.compile(model, backend="tpu")
    ids = torch.randint(0, 128, (2, 8))
    expected = cpu_model(ids, labels=ids)
    actual = compiled(ids.to(TPU), labels=ids.to(TPU))
    tolerance = (
        dict(atol=2e-2, rtol=2e-2) if dtype == torch.bfloat16 else dict(atol=1e-5, rtol=1e-5)
    )
    torch.testing.assert_close(actual.logits.cpu(), expected.logits, **tolerance)
    expected.loss.backward()
    actual.loss.backward()
    for p, q in zip(cpu_model.parameters(), model.parameters(), strict=True):
        if p.grad is not None:
            torch.testing.assert_close(q.grad.cpu(), p.grad, **tolerance)


# --- attention ------------------------------------------------------------------------------

SDPA_CASES = {
    "plain": dict(),
    "causal": dict(is_causal=True),
    "gqa": dict(is_causal=True, enable_gqa=True, kv_heads=2),
    "bool_mask": dict(mask=lambda: torch.rand(8, 8) > 0.3),
    "float_mask": dict(mask=lambda: torch.randn(2, 1, 8, 8)),
    "query_len_5": dict(q_len=5),
    "scale": dict(scale=0.3),
}


@pytest.mark.usefixtures("strict_mode")  # counts executions as Strict runs them, op by op
@pytest.mark.parametrize("case", list(SDPA_CASES))
def test_sdpa_is_one_lowering_with_gradients(case: str) -> None:
    options = dict(SDPA_CASES[case])
    kv_heads = options.pop("kv_heads", 4)
    q_len = options.pop("q_len", 8)
    make_mask = options.pop("mask", None)
    torch.manual_seed(0)
    q = torch.randn(2, 4, q_len, 16, requires_grad=True)
    k = torch.randn(2, kv_heads, 8, 16, requires_grad=True)
    v = torch.randn(2, kv_heads, 8, 16, requires_grad=True)
    mask = make_mask() if make_mask else None
    on_device = [t.detach().to(TPU).requires_grad_() for t in (q, k, v)]
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, **options)
    device_mask = None if mask is None else mask.to(TPU)
    if mask is None or mask.dtype != torch.bool:  # torch turns a bool mask into float first
        torch_tpu.reset_metrics()
    actual = F.scaled_dot_product_attention(*on_device, attn_mask=device_mask, **options)
    if mask is None or mask.dtype != torch.bool:
        assert torch_tpu.metrics()["executions"] == 1
    torch.testing.assert_close(actual.cpu(), expected, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(expected)
    expected.backward(grad)
    actual.backward(grad.to(TPU))
    for cpu_input, tpu_input in zip((q, k, v), on_device, strict=True):
        torch.testing.assert_close(tpu_input.grad.cpu(), cpu_input.grad, atol=1e-5, rtol=1e-5)


def test_sdpa_mask_gradient_compiled_and_dropout() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 8, 16) for _ in range(3))
    mask = torch.randn(1, 4, 8, 8, requires_grad=True)
    tpu_mask = mask.detach().to(TPU).requires_grad_()
    F.scaled_dot_product_attention(q, k, v, attn_mask=mask).sum().backward()
    F.scaled_dot_product_attention(
        q.to(TPU), k.to(TPU), v.to(TPU), attn_mask=tpu_mask
    ).sum().backward()
    torch.testing.assert_close(tpu_mask.grad.cpu(), mask.grad, atol=1e-5, rtol=1e-5)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # [B, L, H, D] buffers seen as [B, H, L, D]: the output keeps that layout.
        return (
            F.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            .transpose(1, 2)
            .reshape(2, 8, 64)
        )

    inputs = [t.transpose(1, 2).contiguous().requires_grad_() for t in (q, k, v)]
    on_device = [t.detach().to(TPU).requires_grad_() for t in inputs]
    expected = attend(*inputs)
    actual = torch.compile(attend, backend="tpu")(*on_device)
    torch.testing.assert_close(actual.cpu(), expected, atol=1e-5, rtol=1e-5)
    expected.sum().backward()
    actual.sum().backward()
    torch.testing.assert_close(on_device[0].grad.cpu(), inputs[0].grad, atol=1e-5, rtol=1e-5)


def test_sdpa_dropout_is_fused_seeded_and_differentiable() -> None:
    # Uniform attention over an identity value matrix shows the kept, scaled weights.
    length, p = 64, 0.3
    q = torch.zeros(2, 2, length, 8, device=TPU)
    v = torch.eye(length, device=TPU).expand(2, 2, length, length).contiguous()
    torch.manual_seed(5)
    torch_tpu.reset_metrics()
    dropped = F.scaled_dot_product_attention(q, q, v, dropout_p=p).cpu()
    assert torch_tpu.metrics()["executions"] == 1
    assert abs((dropped == 0).float().mean().item() - p) < 0.03
    kept = dropped[dropped != 0]
    torch.testing.assert_close(kept, torch.full_like(kept, 1 / length / (1 - p)))
    torch.manual_seed(5)
    assert torch.equal(F.scaled_dot_product_attention(q, q, v, dropout_p=p).cpu(), dropped)
    assert not torch.equal(F.scaled_dot_product_attention(q, q, v, dropout_p=p).cpu(), dropped)

    # The backward redraws forward's mask from the seed and offset the forward returned.
    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(11)
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.4, is_causal=True)

    inputs = [
        torch.randn(1, 2, 4, 3, dtype=torch.float64, device=TPU, requires_grad=True)
        for _ in range(3)
    ]
    assert torch.autograd.gradcheck(attend, inputs, eps=1e-6, atol=1e-5)


def test_attention_implementations_agree() -> None:
    ids = torch.randint(0, 128, (2, 8))
    logits = {}
    for implementation in ("sdpa", "eager"):
        torch.manual_seed(0)
        config = transformers.LlamaConfig(**LLAMA)
        model = transformers.AutoModelForCausalLM.from_config(
            config, attn_implementation=implementation
        ).to(TPU)
        logits[implementation] = model(ids.to(TPU)).logits.cpu()
    torch.testing.assert_close(logits["sdpa"], logits["eager"], atol=1e-5, rtol=1e-5)


# --- optimizers: fused Adam/AdamW and GradScaler --------------------------------------------

ADAM_OPTIONS = [
    {},
    {"amsgrad": True, "weight_decay": 0.1},
    {"maximize": True, "weight_decay": 0.01},
    {"lr": 0.01, "tensor_lr": True},
]


@pytest.mark.parametrize(
    ("optimizer", "options"),
    list(itertools.product([torch.optim.Adam, torch.optim.AdamW], ADAM_OPTIONS)),
    ids=lambda x: getattr(x, "__name__", None) or "-".join(map(str, x)) or "defaults",
)
def test_fused_adam_matches_cpu(optimizer: type, options: dict) -> None:
    options = dict(options)
    tensor_lr = options.pop("tensor_lr", False)
    torch.manual_seed(0)
    initial = [torch.randn(5, 3), torch.randn(7)]
    cpu_params = [p.clone().requires_grad_() for p in initial]
    tpu_params = [p.to(TPU).requires_grad_() for p in initial]

    def make(params: list[torch.Tensor], device: torch.device | str) -> torch.optim.Optimizer:
        lr = options.get("lr", 1e-3)
        lr = torch.tensor(lr, device=device) if tensor_lr else lr
        return optimizer(params, fused=True, **{**options, "lr": lr})

    cpu_opt, tpu_opt = make(cpu_params, "cpu"), make(tpu_params, TPU)
    for _ in range(3):
        grads = [torch.randn_like(p) for p in initial]
        for p, q, g in zip(cpu_params, tpu_params, grads, strict=True):
            p.grad, q.grad = g.clone(), g.to(TPU)
        cpu_opt.step()
        tpu_opt.step()
    for p, q in zip(cpu_params, tpu_params, strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), atol=1e-6, rtol=1e-6)
        for key in cpu_opt.state[p]:
            torch.testing.assert_close(tpu_opt.state[q][key].cpu(), cpu_opt.state[p][key])


def test_fused_adamw_update_runs_as_one_executable() -> None:
    params = [torch.randn(5, 3, device=TPU) for _ in range(8)]
    grads = [torch.randn_like(p) for p in params]
    moments = [torch.zeros_like(p) for p in params]
    squares = [torch.zeros_like(p) for p in params]
    steps = [torch.ones((), device=TPU) for _ in params]
    expected = [p.cpu() for p in params]
    torch._fused_adamw_(
        expected, [g.cpu() for g in grads], [m.cpu() for m in moments],
        [s.cpu() for s in squares], [], [s.cpu() for s in steps], lr=1e-3, beta1=0.9,
        beta2=0.999, weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False,
    )  # fmt: skip
    for call in range(2):
        torch.tpu.synchronize()
        torch_tpu.reset_metrics()
        torch._fused_adamw_(
            params, grads, moments, squares, [], steps, lr=1e-3, beta1=0.9, beta2=0.999,
            weight_decay=0.01, eps=1e-8, amsgrad=False, maximize=False,
        )  # fmt: skip
        torch.tpu.synchronize()
        metrics = torch_tpu.metrics()
        assert metrics["executions"] == 1, metrics  # not one per op and parameter
        if call == 0:
            for p, e in zip(params, expected, strict=True):
                torch.testing.assert_close(p.cpu(), e, atol=1e-6, rtol=1e-6)
        else:
            assert metrics["compiles"] == 0, metrics  # the same executable every step


@pytest.mark.parametrize("fused", [True, False])
def test_grad_scaler_skips_overflow_steps(fused: bool) -> None:
    results = {}
    for device in ("cpu", TPU):
        param = torch.tensor([1.0, 2.0, 3.0, 4.0], device=device, requires_grad=True)
        opt = torch.optim.AdamW([param], lr=0.1, fused=fused)
        scaler = torch.amp.GradScaler(torch.device(device).type, init_scale=4.0, growth_interval=2)
        for g in (
            [1, 2, 3, 4],
            [1, float("inf"), 3, 4],
            [0.5, 1, 1, 1],
            [0.5, 1, 1, 1],
            [1, 1, 1, 1],
        ):
            opt.zero_grad()
            scaler.scale((param * torch.tensor(g, device=device)).sum()).backward()
            scaler.step(opt)
            scaler.update()
        results[str(device)] = (param.detach().cpu(), scaler.get_scale(), param.grad.cpu())
    cpu, tpu = results["cpu"], results[str(TPU)]
    torch.testing.assert_close(tpu[0], cpu[0])
    assert tpu[1] == cpu[1]
    torch.testing.assert_close(tpu[2], cpu[2])


# --- Trainer ----------------------------------------------------------------------------------


class TokenDataset(torch.utils.data.Dataset):
    def __init__(self) -> None:
        self.ids = torch.randint(0, 128, (16, 12), generator=torch.Generator().manual_seed(0))

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def train(output_dir: Path, use_cpu: bool, resume: bool = False, **options) -> tuple:
    model = llama()
    args = transformers.TrainingArguments(
        output_dir=str(output_dir),
        per_device_train_batch_size=2,
        gradient_accumulation_steps=2,
        max_steps=4,
        learning_rate=1e-3,
        max_grad_norm=0.5,
        logging_steps=1,
        save_steps=2,
        report_to=[],
        use_cpu=use_cpu,
        seed=0,
        data_seed=0,
        **options,
    )
    trainer = transformers.Trainer(model=model, args=args, train_dataset=TokenDataset())
    trainer.train(resume_from_checkpoint=str(output_dir / "checkpoint-2") if resume else None)
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return trainer.args.device, losses, model


@pytest.mark.parametrize("bf16", [False, True])
def test_trainer_matches_cpu_and_resumes(tmp_path: Path, bf16: bool) -> None:
    device, losses, model = train(tmp_path / "tpu", use_cpu=False, bf16=bf16)
    assert device.type == "tpu" and devices_of(model) == {"tpu"}  # picked with no device given
    _, cpu_losses, cpu_model = train(tmp_path / "cpu", use_cpu=True, bf16=bf16)
    tolerance = dict(atol=2e-2, rtol=2e-2) if bf16 else dict(atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(torch.tensor(losses), torch.tensor(cpu_losses), **tolerance)
    for p, q in zip(cpu_model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(q.detach().cpu(), p.detach(), **tolerance)
    if not bf16:
        # Resuming from the step-2 checkpoint ends where the uninterrupted run ended.
        _, _, resumed = train(tmp_path / "tpu", use_cpu=False, resume=True)
        for p, q in zip(model.parameters(), resumed.parameters(), strict=True):
            torch.testing.assert_close(q.detach().cpu(), p.detach().cpu(), atol=1e-6, rtol=1e-6)


# --- Diffusers --------------------------------------------------------------------------------


def unet() -> torch.nn.Module:
    diffusers = pytest.importorskip("diffusers")
    return diffusers.UNet2DModel(
        sample_size=8,
        in_channels=3,
        out_channels=3,
        layers_per_block=1,
        block_out_channels=(16, 32),
        down_block_types=("DownBlock2D", "AttnDownBlock2D"),
        up_block_types=("AttnUpBlock2D", "UpBlock2D"),
        norm_num_groups=8,
    )


def dit() -> torch.nn.Module:
    diffusers = pytest.importorskip("diffusers")
    return diffusers.DiTTransformer2DModel(
        num_attention_heads=2,
        attention_head_dim=8,
        in_channels=4,
        out_channels=4,
        num_layers=2,
        sample_size=8,
        patch_size=2,
        num_embeds_ada_norm=10,
        norm_num_groups=4,
    )


def denoise(model: torch.nn.Module, sample: torch.Tensor) -> torch.Tensor:
    """Three DDIM steps of a class-conditional DiT (label 0)."""
    diffusers = pytest.importorskip("diffusers")
    scheduler = diffusers.DDIMScheduler(num_train_timesteps=50)
    scheduler.set_timesteps(3)
    batch = sample.shape[0]
    labels = torch.zeros(batch, dtype=torch.long, device=sample.device)
    with torch.no_grad():
        for t in scheduler.timesteps:
            timestep = torch.full((batch,), int(t), device=sample.device)
            out = model(sample, timestep=timestep, class_labels=labels).sample
            sample = scheduler.step(out, t, sample).prev_sample
    return sample


@pytest.mark.parametrize("compiled", [False, True])
def test_diffusers_unet_pipeline_matches_cpu(compiled: bool) -> None:
    diffusers = pytest.importorskip("diffusers")
    torch.manual_seed(0)
    pipe = diffusers.DDIMPipeline(
        unet=unet().eval(), scheduler=diffusers.DDIMScheduler(num_train_timesteps=50)
    )
    pipe.set_progress_bar_config(disable=True)

    def images() -> torch.Tensor:
        generator = torch.Generator().manual_seed(1)  # noise drawn on the CPU, then moved
        out = pipe(batch_size=2, generator=generator, num_inference_steps=3, output_type="np")
        return torch.from_numpy(out.images)

    expected = images()
    pipe.to(TPU)
    if compiled:
        pipe.unet = torch.compile(pipe.unet, backend="tpu")
    torch.testing.assert_close(images(), expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("compiled", [False, True])
def test_diffusers_dit_denoising_matches_cpu(compiled: bool) -> None:
    torch.manual_seed(0)
    cpu_model = dit().eval()
    model = copy.deepcopy(cpu_model).to(TPU)
    if compiled:
        model = torch.compile(model, backend="tpu")
    sample = torch.randn(2, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    expected = denoise(cpu_model, sample.clone())
    actual = denoise(model, sample.to(TPU))
    torch.testing.assert_close(actual.cpu(), expected, atol=1e-4, rtol=1e-4)
