"""RL weight sync for vLLM on ``tpu``: vLLM's weight-transfer API with a ``tpu`` backend.

vLLM 0.32 moves a trainer's weights into a running engine through pluggable weight-transfer
engines (``LLM(weight_transfer_config={"backend": ...})``, then ``init_weight_transfer_engine``,
``start_weight_update``, ``update_weights``, ``finish_weight_update`` on the engine, driven from
the trainer by a ``TrainerWeightTransferEngine``). Its built-in backends move bytes with NCCL or
CUDA IPC; this module registers ``tpu``, whose update payload carries the weights themselves:

* in the engine's process (a colocated trainer, the in-process engine core), the trainer's
  tensors by reference: a push is one device-to-device copy per parameter, nothing uploaded;
* across processes (the engine core in its own process, a Ray actor), each tensor's bytes,
  which vLLM's RPC (msgpack) and Ray carry as they are; the worker uploads them.

The worker hands the (Hugging Face-named) tensors to the model's own ``load_weights``, which
splits and fuses them into vLLM's parameters (``qkv_proj``, ``gate_up_proj``) in place: the
parameters keep their storage, the compiled step executables take them as inputs, so the next
step runs the new weights without a compile. ``LLMWeightSyncClient`` drives an ``LLM`` in this
process and resets its prefix cache after each push (cached keys and values came from the old
weights).

Trainer side::

    from vllm.distributed.weight_transfer.base import ModuleSource
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
    from torch_tpu.vllm.weight_sync import LLMWeightSyncClient, TpuTrainerInitInfo

    sender = WeightTransferTrainerFactory.trainer_init(
        TpuTrainerInitInfo(rank=0), client=LLMWeightSyncClient(llm), source=ModuleSource(policy)
    )
    sender.send_weights()  # after every optimizer step
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Self

import torch
from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    VLLMWeightSyncClient,
    WeightSource,
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)

BACKEND = "tpu"
# Tensors a single update_weights call carries, by bytes: bounds the host copies a push across
# processes holds at once.
DEFAULT_CHUNK_BYTES = 64 << 20


def _dtype(name: str) -> torch.dtype:
    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise ValueError(f"weight update: {name!r} is not a torch dtype")
    return dtype


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass
class TpuWeightTransferInitInfo(WeightTransferInitInfo):
    """Worker-side init info: nothing to rendezvous, the payload carries the weights."""


@dataclass
class TpuTrainerInitInfo(TrainerInitInfo):
    """Trainer-side init info. ``host_bytes``: send each tensor's bytes (the engine is in
    another process) rather than the tensor (the engine is in this one). ``chunk_bytes``: the
    most bytes one ``update_weights`` call carries (one tensor larger than it goes alone)."""

    backend: ClassVar[str] = BACKEND
    host_bytes: bool = False
    chunk_bytes: int = DEFAULT_CHUNK_BYTES


@dataclass
class TpuWeightTransferUpdateInfo(WeightTransferUpdateInfo):
    """One chunk of a push: parameter names (the checkpoint's, as ``load_weights`` takes them),
    dtypes and shapes, and either ``tensors`` (same process) or ``data`` (their bytes)."""

    names: list[str]
    dtype_names: list[str]
    shapes: list[list[int]]
    tensors: list[torch.Tensor] | None = None
    data: list[bytes] | None = None
    sizes: list[int] = field(init=False, default_factory=list)

    def __post_init__(self) -> None:
        count = len(self.names)
        for label, values in (("dtype_names", self.dtype_names), ("shapes", self.shapes)):
            if len(values) != count:
                raise ValueError(
                    f"weight update: {len(values)} {label} for {count} names; one each"
                )
        if (self.tensors is None) == (self.data is None):
            raise ValueError("weight update: give either `tensors` or `data`, exactly one")
        carried = self.tensors if self.tensors is not None else self.data
        assert carried is not None
        if len(carried) != count:
            raise ValueError(f"weight update: {len(carried)} tensors for {count} names")
        for i, (name, dtype_name, shape) in enumerate(
            zip(self.names, self.dtype_names, self.shapes, strict=True)
        ):
            dtype = _dtype(dtype_name)
            if self.tensors is not None:
                tensor = self.tensors[i]
                if tensor.dtype != dtype or list(tensor.shape) != list(shape):
                    raise ValueError(
                        f"weight update: {name} is {_dtype_name(tensor.dtype)} "
                        f"{list(tensor.shape)}, declared {dtype_name} {list(shape)}"
                    )
                self.sizes.append(tensor.numel() * tensor.element_size())
            else:
                assert self.data is not None
                expected = dtype.itemsize * _numel(shape)
                if len(self.data[i]) != expected:
                    raise ValueError(
                        f"weight update: {name} carries {len(self.data[i])} bytes; "
                        f"{dtype_name} {list(shape)} is {expected}"
                    )
                self.sizes.append(expected)

    def payload(self) -> dict[str, Any]:
        """The dict ``update_weights`` takes (dataclasses.asdict would deep-copy the tensors)."""
        carried = {"tensors": self.tensors} if self.tensors is not None else {"data": self.data}
        return {
            "names": self.names,
            "dtype_names": self.dtype_names,
            "shapes": self.shapes,
            **carried,
        }

    def weights(self) -> Iterator[tuple[str, torch.Tensor]]:
        """(name, tensor) pairs for ``load_weights``; bytes become host tensors, which the
        model's weight loaders upload as they copy them into its parameters."""
        for i, (name, dtype_name, shape) in enumerate(
            zip(self.names, self.dtype_names, self.shapes, strict=True)
        ):
            if self.tensors is not None:
                yield name, self.tensors[i].detach()
                continue
            assert self.data is not None
            raw = torch.frombuffer(bytearray(self.data[i]), dtype=torch.uint8)
            yield name, raw.view(_dtype(dtype_name)).reshape(shape)


def _numel(shape: list[int]) -> int:
    count = 1
    for size in shape:
        count *= int(size)
    return count


@dataclass
class PushStats:
    """What the worker received since the engine started: pushes (finished updates), tensors,
    bytes, and the seconds its update calls took (loading and the device's completion)."""

    pushes: int = 0
    tensors: int = 0
    bytes: int = 0
    seconds: float = 0.0


class TpuWeightTransferEngine(
    WeightTransferEngine[TpuWeightTransferInitInfo, TpuWeightTransferUpdateInfo]
):
    """The worker's side of the ``tpu`` backend: loads each chunk into the running model."""

    init_info_cls = TpuWeightTransferInitInfo
    update_info_cls = TpuWeightTransferUpdateInfo

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.stats = PushStats()
        # Per target model (the served one, or a speculative draft the session retargets to).
        self._expected: dict[int, set[str]] = {}

    def init_transfer_engine(self, init_info: TpuWeightTransferInitInfo) -> None:
        """No rendezvous: each update carries its weights."""

    def start_weight_update(self) -> None:
        """Weights load in place into the live parameters: nothing to prepare."""

    def update_weights(self, update_info: dict[str, Any]) -> None:
        start = time.perf_counter()
        info = self.parse_update_info(update_info)
        self.receive_weights(info)
        # Deferred copies run now and the device finishes them: the next step reads them.
        torch.tpu.synchronize(self.device)
        self.stats.tensors += len(info.names)
        self.stats.bytes += sum(info.sizes)
        self.stats.seconds += time.perf_counter() - start

    def receive_weights(self, update_info: TpuWeightTransferUpdateInfo) -> None:
        from vllm.model_executor.model_loader.mtp_validation import (
            disable_mtp_completeness_check,
        )

        unknown = [n for n in update_info.names if not self._accepts(n)]
        if unknown:
            raise ValueError(
                f"weight update: the served model has no parameter for {unknown[:5]} "
                f"(names are the checkpoint's, e.g. model.layers.0.self_attn.q_proj.weight)"
            )
        loading: list[tuple[str, torch.Tensor]] = []

        def tracked() -> Iterator[tuple[str, torch.Tensor]]:
            for name, tensor in update_info.weights():
                loading[:] = [(name, tensor)]
                yield name, tensor

        try:
            with disable_mtp_completeness_check():
                self.model.load_weights(tracked())
        except (AssertionError, RuntimeError) as error:
            # vLLM's weight loaders assert shapes or fail to narrow a fused parameter to a
            # shard's rows: say which tensor, and what it was.
            name, tensor = loading[0] if loading else ("?", torch.empty(0))
            raise ValueError(
                f"weight update: the served model refused {name} "
                f"({_dtype_name(tensor.dtype)} {list(tensor.shape)}): {error or 'shape mismatch'}"
            ) from error

    def finish_weight_update(self) -> None:
        self.stats.pushes += 1

    def shutdown(self) -> None:
        """Nothing held between pushes."""

    def _accepts(self, name: str) -> bool:
        """Whether a checkpoint name maps to one of the model's parameters: its own name, or
        one of the shards fused into qkv_proj / gate_up_proj."""
        expected = self._expected.get(id(self.model))
        if expected is None:
            expected = {n for n, _ in self.model.named_parameters()}
            expected |= {n for n, _ in self.model.named_buffers()}
            self._expected[id(self.model)] = expected
        mapper = getattr(self.model, "hf_to_vllm_mapper", None)
        if mapper is not None:
            name = mapper._map_name(name) or name
        if name in expected:
            return True
        packed = getattr(self.model, "packed_modules_mapping", {})
        for fused, shards in packed.items():
            for shard in shards:
                if f".{shard}." in name and name.replace(shard, fused) in expected:
                    return True
        return False


class TpuTrainerWeightTransferEngine(TrainerWeightTransferEngine[TpuTrainerInitInfo]):
    """The trainer's side: every rank iterates the source (FSDP2's DTensors gather there);
    the sender (rank 0) sends chunks of at most ``chunk_bytes`` through the client."""

    init_info_cls = TpuTrainerInitInfo

    def __init__(
        self,
        *,
        client: VLLMWeightSyncClient,
        source: WeightSource,
        is_sender: bool = True,
        host_bytes: bool = False,
        chunk_bytes: int = DEFAULT_CHUNK_BYTES,
    ) -> None:
        super().__init__(client=client, source=source, is_sender=is_sender)
        if chunk_bytes <= 0:
            raise ValueError(f"chunk_bytes must be positive, not {chunk_bytes}")
        self.host_bytes = host_bytes
        self.chunk_bytes = chunk_bytes
        self.sent = PushStats()

    @classmethod
    def trainer_init(
        cls,
        init_info: TpuTrainerInitInfo,
        *,
        client: VLLMWeightSyncClient,
        source: WeightSource | None = None,
    ) -> Self:
        if source is None:
            raise ValueError("the tpu weight transfer sends a WeightSource: give `source`")
        engine = cls(
            client=client,
            source=source,
            is_sender=init_info.is_sender,
            host_bytes=init_info.host_bytes,
            chunk_bytes=init_info.chunk_bytes,
        )
        if engine.is_sender:
            engine.client.init_weight_transfer_engine({})
        return engine

    def send_weights(self, weight_version: str | None = None) -> None:
        assert self.source is not None
        start = time.perf_counter()
        if self.is_sender:
            self.client.start_weight_update()
        for chunk in self._chunks(iter(self.source)):
            if self.is_sender:
                self.client.update_weights(chunk.payload())
                self.sent.tensors += len(chunk.names)
                self.sent.bytes += sum(chunk.sizes)
        if self.is_sender:
            self.client.finish_weight_update(weight_version)
            self.sent.pushes += 1
        self.sent.seconds += time.perf_counter() - start

    def _chunks(
        self, weights: Iterator[tuple[str, torch.Tensor]]
    ) -> Iterator[TpuWeightTransferUpdateInfo]:
        pending: list[tuple[str, torch.Tensor]] = []
        held = 0
        for name, tensor in weights:
            tensor = tensor.detach()
            size = tensor.numel() * tensor.element_size()
            if pending and held + size > self.chunk_bytes:
                yield self._info(pending)
                pending, held = [], 0
            pending.append((name, tensor))
            held += size
        if pending:
            yield self._info(pending)

    def _info(self, weights: list[tuple[str, torch.Tensor]]) -> TpuWeightTransferUpdateInfo:
        names = [n for n, _ in weights]
        dtypes = [_dtype_name(t.dtype) for _, t in weights]
        shapes = [list(t.shape) for _, t in weights]
        if not self.host_bytes:
            tensors = [t for _, t in weights]
            return TpuWeightTransferUpdateInfo(names, dtypes, shapes, tensors=tensors)
        # One download per tensor; bytes of any dtype (bfloat16 included) through uint8.
        data = [
            t.cpu().contiguous().view(-1).view(torch.uint8).numpy().tobytes() for _, t in weights
        ]
        return TpuWeightTransferUpdateInfo(names, dtypes, shapes, data=data)


class LLMWeightSyncClient:
    """vLLM's weight-sync control plane (``VLLMWeightSyncClient``) over an ``LLM`` object:
    its own RL methods, then a prefix-cache reset so no cached key or value of the old weights
    is read again."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self) -> None:
        self.llm.start_weight_update()

    def update_weights(self, update_info: dict[str, Any] | list[dict[str, Any]]) -> None:
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.finish_weight_update(weight_version)
        self.llm.reset_prefix_cache()


def push_stats(llm: Any) -> PushStats:
    """The engine worker's received-push counters (``PushStats``), read through collective_rpc."""
    results = llm.collective_rpc(_worker_push_stats)
    return PushStats(**results[0])


def _worker_push_stats(worker: Any) -> dict[str, Any]:
    engine = getattr(worker, "weight_transfer_engine", None)
    if not isinstance(engine, TpuWeightTransferEngine):
        raise RuntimeError(
            "the engine has no tpu weight transfer: start it with "
            "weight_transfer_config={'backend': 'tpu'}"
        )
    return asdict(engine.stats)


def register() -> None:
    """Registers the ``tpu`` backend with vLLM's worker and trainer factories (idempotent):
    vLLM's ``vllm.general_plugins`` entry point calls it in every vLLM process."""
    from vllm.distributed.weight_transfer.factory import (
        WeightTransferEngineFactory,
        WeightTransferTrainerFactory,
    )

    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, TpuWeightTransferEngine)
    if BACKEND not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(BACKEND, TpuTrainerWeightTransferEngine)


register()
