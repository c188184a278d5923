"""Matrix-product throughput through the tpu device next to the machine's own peers, in one
table from one run: torch on CUDA (where the GPU is visible to torch) and jax.jit (where jax is
installed, on its default backend), with each result checked against the first column's.

    .venv/bin/python bench/matmul.py                  # the plugin torch_tpu selects
    TORCH_TPU_PJRT_PLUGIN=cuda python3 bench/matmul.py --sizes 4096,8192 --dtype bfloat16

TFLOP/s counts 2·n³ per product; each cell is the median over repeats of a batch of products
enqueued back to back and waited for once.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

import torch_tpu

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def median_seconds_per_product(
    product: Callable[[], object], wait: Callable[[object], None], batch: int, repeats: int
) -> float:
    wait(product())  # compile and warm up
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        last = None
        for _ in range(batch):
            last = product()
        wait(last)
        samples.append((time.perf_counter() - start) / batch)
    return statistics.median(samples)


def torch_cell(device: str, a: torch.Tensor, b: torch.Tensor) -> tuple[Callable, Callable]:
    a, b = a.to(device), b.to(device)
    module = getattr(torch, device)

    def wait(result: object) -> None:
        module.synchronize()

    return (lambda: a @ b), wait


def jax_cell(a: torch.Tensor, b: torch.Tensor) -> tuple[Callable, Callable] | None:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        return None
    dtype = {torch.bfloat16: jnp.bfloat16, torch.float16: jnp.float16}.get(a.dtype, jnp.float32)
    ja = jnp.asarray(a.float().numpy(), dtype=dtype)
    jb = jnp.asarray(b.float().numpy(), dtype=dtype)
    matmul = jax.jit(lambda x, y: x @ y)
    return (lambda: matmul(ja, jb)), (lambda result: result.block_until_ready())


def to_cpu(result: object) -> torch.Tensor:
    if isinstance(result, torch.Tensor):
        return result.float().cpu()
    import numpy as np

    return torch.from_numpy(np.asarray(result, dtype=np.float32))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1024,4096", help="comma-separated n of n×n×n")
    parser.add_argument("--dtype", default="bfloat16", choices=sorted(DTYPES))
    parser.add_argument("--batch", type=int, default=20, help="products per timed batch")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    dtype = DTYPES[args.dtype]

    print(f"tpu device: plugin {torch_tpu.plugin_path()}, {torch.tpu.get_device_name()}")
    columns = ["tpu"] + (["torch cuda"] if torch.cuda.is_available() else [])
    header = f"{'n':>6} " + " ".join(f"{c + ' TFLOP/s':>18}" for c in columns + ["jax.jit"])
    print(f"{args.dtype} matrix products\n{header} {'tpu/peer':>9}")
    for n in (int(s) for s in args.sizes.split(",")):
        generator = torch.Generator().manual_seed(n)
        a = torch.randn(n, n, generator=generator).to(dtype)
        b = torch.randn(n, n, generator=generator).to(dtype)
        cells: dict[str, tuple[Callable, Callable] | None] = {
            "tpu": torch_cell("tpu", a, b),
            "torch cuda": torch_cell("cuda", a, b) if "torch cuda" in columns else None,
            "jax.jit": jax_cell(a, b),
        }
        reference = to_cpu(cells["tpu"][0]())  # type: ignore[index]
        rates: dict[str, float] = {}
        for name, cell in cells.items():
            if cell is None:
                continue
            product, wait = cell
            result = to_cpu(product())
            # Products of n random terms in bf16: compare with a tolerance that grows with n.
            tolerance = 2e-2 * n**0.5 if dtype != torch.float32 else 1e-3 * n**0.5
            error = (result - reference).abs().max().item()
            if error > tolerance:
                raise SystemExit(f"{name} at n={n} differs from tpu by {error} (> {tolerance})")
            seconds = median_seconds_per_product(product, wait, args.batch, args.repeats)
            rates[name] = 2 * n**3 / seconds / 1e12
        best_peer = max((v for k, v in rates.items() if k != "tpu"), default=float("nan"))
        row = " ".join(f"{rates.get(c, float('nan')):>18.1f}" for c in columns + ["jax.jit"])
        print(f"{n:>6} {row} {rates['tpu'] / best_peer:>9.2f}")


if __name__ == "__main__":
    main()
