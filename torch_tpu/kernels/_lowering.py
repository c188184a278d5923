"""A jax function lowered to StableHLO that our plugin runs: jax's own lowering for the
plugin's platform, int64 kept (x64), Pallas interpreted on the CPU plugin, every function
renamed so that kernels never collide inside one module, and custom calls the plugin cannot
run refused before anything is compiled."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

# What each plugin can execute of the custom calls jax emits. Others (jaxlib's LAPACK and
# cuSolver kernels, Python callbacks, Mosaic GPU) live in jaxlib's own runtime, not in the
# plugin, and would fail at compile or run time.
_SHARDING_MARKERS = {"Sharding", "SPMDFullToShardShape", "SPMDShardToFullShape"}
RUNNABLE_CUSTOM_CALLS: dict[str, frozenset[str]] = {
    "cpu": frozenset(_SHARDING_MARKERS),
    # Pallas's Triton lowering: XLA's GPU compiler runs it itself. (Mosaic GPU is refused.)
    "cuda": frozenset(_SHARDING_MARKERS | {"__gpu$xla.gpu.triton"}),
    # Pallas's Mosaic lowering: libtpu compiles it.
    "tpu": frozenset(_SHARDING_MARKERS | {"tpu_custom_call"}),
}

_MLIR_TYPES = {
    "bool": "i1",
    "int8": "i8",
    "int16": "i16",
    "int32": "i32",
    "int64": "i64",
    "uint8": "ui8",
    "uint16": "ui16",
    "uint32": "ui32",
    "uint64": "ui64",
    "float16": "f16",
    "bfloat16": "bf16",
    "float32": "f32",
    "float64": "f64",
    "complex64": "complex<f32>",
    "complex128": "complex<f64>",
}

_TORCH_DTYPES = {
    "bool": torch.bool,
    "int8": torch.int8,
    "int16": torch.int16,
    "int32": torch.int32,
    "int64": torch.int64,
    "uint8": torch.uint8,
    "uint16": torch.uint16,
    "uint32": torch.uint32,
    "uint64": torch.uint64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "float32": torch.float32,
    "float64": torch.float64,
    "complex64": torch.complex64,
    "complex128": torch.complex128,
}


class KernelError(RuntimeError):
    """A jax function that cannot run on this plugin (a custom call it lacks, a StableHLO
    version it cannot read, a dtype the device has no type for)."""


def import_jax() -> Any:
    try:
        import jax
    except ImportError as error:
        raise ImportError(
            "torch_tpu.kernels needs jax: install the project's `kernels` extra "
            "(pip install 'torch_tpu[kernels]')"
        ) from error
    # torch_tpu owns the accelerator: jax in this process only lowers, and runs kernels on CPU
    # tensors, so it must not open the chips itself (on a TPU host it would take them).
    if jax.config.jax_platforms is None and "JAX_PLATFORMS" not in os.environ:
        jax.config.update("jax_platforms", "cpu")
    return jax


def torch_dtype(jax_dtype: Any) -> torch.dtype:
    name = str(jax_dtype)
    if name not in _TORCH_DTYPES:
        raise KernelError(f"torch_tpu.kernels: jax dtype {name} has no torch dtype")
    return _TORCH_DTYPES[name]


@functools.cache
def jax_dtype_name(dtype: torch.dtype) -> str:
    """Cached: every call of a jax op names its tensors' dtypes (its kernel's key)."""
    name = str(dtype).removeprefix("torch.")
    if name not in _MLIR_TYPES:
        raise KernelError(f"torch_tpu.kernels: a tensor of {dtype} cannot be passed to jax")
    return name


def platform() -> str:
    """The plugin's platform as jax names lowering targets (cpu, cuda, tpu)."""
    name = torch.tpu.get_device_properties().platform_name.lower()
    return "cuda" if name in ("cuda", "gpu") else name


def _version(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.split(r"[.,]", text.strip()) if part.isdigit())


@functools.cache
def check_versions() -> None:
    """jax writes StableHLO of its own version; the plugin must be able to read it."""
    from jaxlib.mlir.dialects import stablehlo

    from .. import _C

    attributes = dict(
        line.split("=", 1) for line in _C._plugin_attributes().splitlines() if "=" in line
    )
    emitted = stablehlo.get_current_version()
    readable = attributes.get("stablehlo_current_version")
    if readable is not None and _version(emitted) > _version(readable):
        jax = import_jax()
        raise KernelError(
            f"torch_tpu.kernels: jax {jax.__version__} writes StableHLO {emitted}, newer than "
            f"the {platform()} plugin ({torch_tpu_plugin()}) reads "
            f"({readable.replace(',', '.')}): install an older jax, one whose StableHLO is at "
            f"most {readable.replace(',', '.')}, or a newer plugin"
        )


def torch_tpu_plugin() -> str:
    return torch.tpu.get_device_properties().plugin_path


@contextlib.contextmanager
def _pallas_interpreted_on_cpu() -> Iterator[None]:
    """Pallas kernels on the CPU plugin run in jax's HLO interpret mode (plain StableHLO):
    while this is active, pallas_call lowers for cpu as if called with interpret=True."""
    try:
        from jax._src.interpreters import mlir
        from jax._src.pallas import hlo_interpreter
        from jax._src.pallas import pallas_call as pallas_module
    except ImportError:  # no Pallas in this jax: nothing to interpret
        yield
        return
    _InterpretSwitch.install(
        mlir, pallas_module.pallas_call_p, pallas_module._pallas_call_lowering, hlo_interpreter
    )
    _InterpretSwitch.active += 1
    try:
        yield
    finally:
        _InterpretSwitch.active -= 1


class _InterpretSwitch:
    """A cpu lowering rule for pallas_call: interpret when we lower, else jax's own refusal."""

    active = 0
    installed = False

    @classmethod
    def install(
        cls, mlir: Any, primitive: Any, pallas_call_lowering: Any, hlo_interpreter: Any
    ) -> None:
        if cls.installed:
            return

        jax_rule = pallas_call_lowering

        def rule(ctx: Any, *in_nodes: Any, interpret: Any, **params: Any) -> Any:
            if not cls.active:  # anyone else's lowering: jax's own rule, untouched
                return jax_rule(ctx, *in_nodes, interpret=interpret, **params)
            impl = functools.partial(hlo_interpreter.pallas_call_hlo_interpret, **params)
            return mlir.lower_fun(impl, multiple_results=True)(ctx, *in_nodes)

        mlir.register_lowering(primitive, rule, platform="cpu")
        cls.installed = True


@dataclass(frozen=True)
class LoweredKernel:
    key: str  # what torch_tpu::jax_call is called with
    functions: str  # the func.func definitions, renamed
    entry: str
    params: list[tuple[list[int], str]]
    results: list[tuple[list[int], str]]


_FUNCTION = re.compile(r"func\.func (?:public |private )?@([\w$.]+)\(")
_CUSTOM_CALL = re.compile(r"custom_call @([\w$.]+)|call_target_name = \"([^\"]+)\"")


def custom_call_targets(text: str) -> set[str]:
    return {a or b for a, b in _CUSTOM_CALL.findall(text)}


def lower(
    fn: Callable[..., Any],
    name: str,
    avals: Sequence[tuple[tuple[int, ...], str]],
) -> LoweredKernel:
    """Lowers fn (positional arrays in, an array or a tuple/list of arrays out) for the
    plugin's platform, at the given shapes and dtypes."""
    jax = import_jax()
    specs = [jax.ShapeDtypeStruct(shape, dtype) for shape, dtype in avals]
    text, outs = _lowered(jax, fn, specs, name)
    return _kernel(name, _module_body(text), avals, [(o.shape, str(o.dtype)) for o in outs])


def _lowered(
    jax: Any, fn: Callable[..., Any], specs: list[Any], name: str
) -> tuple[str, list[Any]]:
    """jax's StableHLO text of fn for the plugin's platform, and its outputs' shapes; custom
    calls the plugin cannot run are refused here."""
    check_versions()
    target = platform()
    interpreting = _pallas_interpreted_on_cpu() if target == "cpu" else contextlib.nullcontext()
    with jax.enable_x64(True), interpreting:
        lowered = jax.jit(fn, keep_unused=True).trace(*specs).lower(lowering_platforms=(target,))
        text = lowered.as_text()
        outs = jax.tree_util.tree_leaves(lowered.out_info)
    refused = custom_call_targets(text) - RUNNABLE_CUSTOM_CALLS.get(target, frozenset())
    if refused:
        raise KernelError(
            f"torch_tpu.kernels: {name} calls the custom call target(s) "
            f"{', '.join(sorted(refused))}, which the {target} plugin ({torch_tpu_plugin()}) "
            f"cannot run; it runs: {', '.join(sorted(RUNNABLE_CUSTOM_CALLS.get(target, ())))}"
        )
    return text, outs


def lower_on_devices(
    fn: Callable[..., Any],
    name: str,
    avals: Sequence[tuple[tuple[int, ...], str]],
    axis_name: str,
    count: int,
) -> LoweredKernel:
    """Lowers fn as the program of each of `count` devices, the named axis spanning them (a
    psum over it is an all-reduce across the devices). Each parameter and result gains a
    leading dimension of 1: the device's block of jax's global array."""
    jax = import_jax()
    from jax.sharding import AbstractMesh
    from jax.sharding import PartitionSpec as P

    def block(*blocks: Any) -> Any:
        out = fn(*(b[0] for b in blocks))
        return tuple(o[None] for o in out) if isinstance(out, tuple) else out[None]

    mesh = AbstractMesh((count,), (axis_name,))
    spmd = jax.shard_map(block, mesh=mesh, in_specs=P(axis_name), out_specs=P(axis_name))
    specs = [jax.ShapeDtypeStruct((count, *shape), dtype) for shape, dtype in avals]
    text, outs = _lowered(jax, spmd, specs, name)
    return _kernel(
        name,
        _device_program(text, name),
        [((1, *shape), dtype) for shape, dtype in avals],
        [((1, *o.shape[1:]), str(o.dtype)) for o in outs],
    )


def _kernel(
    name: str,
    body: str,
    params: Sequence[tuple[tuple[int, ...], str]],
    results: Sequence[tuple[tuple[int, ...], str]],
) -> LoweredKernel:
    """The functions of `body` (public @main the entry), renamed after their content."""
    digest = hashlib.sha1(body.encode()).hexdigest()[:16]
    prefix = f"jax_{re.sub(r'[^A-Za-z0-9_]', '_', name)}_{digest}_"
    return LoweredKernel(
        key=f"{name}@{digest}",
        functions=_renamed(body, prefix),
        entry=prefix + "main",
        params=[(list(shape), _MLIR_TYPES[dtype]) for shape, dtype in params],
        results=[(list(shape), _MLIR_TYPES[dtype]) for shape, dtype in results],
    )


def _module_body(module_text: str) -> str:
    lines = module_text.strip().splitlines()
    if not (lines[0].startswith("module") and lines[0].endswith("{") and lines[-1] == "}"):
        raise KernelError("torch_tpu.kernels: jax's lowering is not one module")
    return "\n".join(lines[1:-1]) + "\n"


def _renamed(body: str, prefix: str) -> str:
    """Every function renamed prefix + name, and private (our module's @main calls them)."""
    names = sorted(set(_FUNCTION.findall(body)), key=len, reverse=True)
    symbol = re.compile(r"@(" + "|".join(re.escape(n) for n in names) + r")(?![\w$.])")
    body = symbol.sub(lambda match: "@" + prefix + match.group(1), body)
    return body.replace("func.func public @", "func.func private @")


_MANUAL = re.compile(r"sdy\.manual_computation\(.*manual_axes=\{[^}]*\} \((.*)\) \{$")
_RETURN = re.compile(r"^\s*sdy\.return (.*) : (.*)$")


_CHANNEL = re.compile(
    r"channel_handle = #stablehlo\.channel_handle<[^>]*>(, )?|(, )?use_global_device_ids"
)


def _as_replicas(line: str) -> str:
    """jax numbers a shard_map's devices as SPMD partitions (partition_id; collectives with a
    channel, across partitions); ours run as replicas of one program, so the same collectives
    go across replicas. (A channel left on collective_permute aborts the CPU plugin.)"""
    return _CHANNEL.sub("", line.replace("stablehlo.partition_id", "stablehlo.replica_id"))


def _device_program(module_text: str, name: str) -> str:
    """A shard_map lowering as one device's program: the body of jax's manual computation
    becomes public @main; the module's other functions stay; the mesh and jax's own global
    @main go."""
    lines = _module_body(module_text).splitlines()
    kept: list[str] = []
    main: list[str] = []
    in_main = False
    for line in lines:
        if line.startswith("  func.func public @main("):
            in_main = True
        if in_main:
            main.append(line)
            in_main = line != "  }"
        elif not line.startswith("  sdy.mesh "):
            kept.append(line)
    header = next((i for i, line in enumerate(main) if _MANUAL.search(line)), None)
    end = next((i for i, line in enumerate(main) if _RETURN.match(line)), None)
    if header is None or end is None:
        raise KernelError(f"torch_tpu.kernels: {name}: jax's shard_map lowering has no body")
    arguments = _MANUAL.search(main[header]).group(1)  # type: ignore[union-attr]
    values, types = _RETURN.match(main[end]).groups()  # type: ignore[union-attr]
    program = [f"  func.func public @main({arguments}) -> ({types}) {{"]
    program += [_as_replicas(line) for line in main[header + 1 : end]]
    program += [f"    return {values} : {types}", "  }"]
    return "\n".join(program + kept) + "\n"
