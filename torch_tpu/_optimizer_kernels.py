"""Kernels torch.optim and torch.amp call by name: ``torch._fused_adam_`` / ``_fused_adamw_``
(``Adam(fused=True)``, and the ``adamw_torch_fused`` optimizer transformers' Trainer picks by
default) and GradScaler's ``_amp_foreach_non_finite_check_and_unscale_`` / ``_amp_update_scale_``.

The update is written with ordinary tensor ops, so it runs on device, recorded into one
executable (in Strict and DeferAndFuse modes). The arithmetic follows ATen's CPU fused kernel,
including its two AMP details: with ``grad_scale`` the grads are unscaled in place, and with
``found_inf`` set nothing at all is written (here as a select on device, so the step never
waits for the host).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from . import _C

_library = torch.library.Library("aten", "IMPL")


def _adam_step(
    params: list[Tensor],
    grads: list[Tensor],
    exp_avgs: list[Tensor],
    exp_avg_sqs: list[Tensor],
    max_exp_avg_sqs: list[Tensor],
    state_steps: list[Tensor],
    *,
    lr: float | Tensor,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
    amsgrad: bool,
    maximize: bool,
    grad_scale: Tensor | None = None,
    found_inf: Tensor | None = None,
    decoupled: bool,
) -> None:
    keep = None if found_inf is None else found_inf.reshape(()) == 0
    for i, (param, grad, exp_avg, exp_avg_sq, step) in enumerate(
        zip(params, grads, exp_avgs, exp_avg_sqs, state_steps, strict=True)
    ):
        # (value, target) pairs written at the end, together, so a skipped step writes nothing.
        writes: list[tuple[Tensor, Tensor]] = []
        if grad_scale is not None:
            grad = grad / grad_scale.reshape(())
            writes.append((grad, grads[i]))
        if maximize:
            grad = -grad
        new_param = param
        if weight_decay != 0:
            if decoupled:
                new_param = param * (1 - lr * weight_decay)
            else:
                grad = grad + weight_decay * param
        new_exp_avg = torch.lerp(exp_avg, grad, 1 - beta1)
        new_exp_avg_sq = exp_avg_sq * beta2 + (1 - beta2) * grad * grad
        bias_correction1 = 1 - torch.pow(beta1, step)
        bias_correction2_sqrt = torch.sqrt(1 - torch.pow(beta2, step))
        second_moment = new_exp_avg_sq
        if amsgrad:
            second_moment = torch.maximum(max_exp_avg_sqs[i], new_exp_avg_sq)
            writes.append((second_moment, max_exp_avg_sqs[i]))
        denom = torch.sqrt(second_moment) / bias_correction2_sqrt + eps
        new_param = new_param - (lr / bias_correction1) * new_exp_avg / denom
        writes += [(new_param, param), (new_exp_avg, exp_avg), (new_exp_avg_sq, exp_avg_sq)]
        for value, target in writes:
            target.copy_(value if keep is None else torch.where(keep, value, target))


# The fused kernels' schema: six tensor lists, then keyword options.
_LISTS = ("params", "grads", "exp_avgs", "exp_avg_sqs", "max_exp_avg_sqs", "state_steps")
_OPTIONS = ("lr", "beta1", "beta2", "weight_decay", "eps", "amsgrad", "maximize")
_OPTIONAL_TENSORS = ("grad_scale", "found_inf")


def _in_one_executable(step: Callable[..., None]) -> Callable[..., None]:
    """The step's ops (about fifteen per parameter) run as one executable, the same every
    step: the first call with a signature (tensor layouts and option values) records them, later
    ones replay it as a compiled graph does, without dispatching the ops again, and join the
    pending graph of the compiled step around them (see ``_C._GraphReplay``). In Strict mode
    they would otherwise run one by one, and DeferAndFuse would cut its graph where the
    per-parameter sequence repeats. Debug runs them one by one, on purpose."""

    def flat_step(*flat: Any) -> tuple[()]:
        lengths, rest = flat[: len(_LISTS)], list(flat[len(_LISTS) :])
        lists = []
        for length in lengths:
            lists.append(rest[:length])
            rest = rest[length:]
        step(*lists, **dict(zip(_OPTIONS + _OPTIONAL_TENSORS, rest, strict=True)))
        return ()

    replay = _C._GraphReplay(flat_step)
    # A float learning rate would be part of the replay's signature: a scheduler that changes it
    # every step would record every step. It is passed as a device scalar instead, uploaded
    # once per new value.
    lr_on_device: dict[tuple[float, torch.device], Tensor] = {}

    def kernel(*lists: list[Tensor], **options: Any) -> None:
        if _C._get_eager_mode() == "debug":
            step(*lists, **options)
            return
        lr = options.get("lr")
        if isinstance(lr, float) and lists[0]:
            key = (lr, lists[0][0].device)
            if key not in lr_on_device:
                lr_on_device.clear()
                lr_on_device[key] = torch.tensor(lr, dtype=torch.float32, device=key[1])
            options = {**options, "lr": lr_on_device[key]}
        flat: list[Any] = [len(tensors) for tensors in lists]
        for tensors in lists:
            flat += tensors
        flat += [options[name] for name in _OPTIONS]
        flat += [options.get(name) for name in _OPTIONAL_TENSORS]
        replay(*flat)

    return kernel


def _register(name: str, decoupled: bool) -> None:
    kernel = _in_one_executable(functools.partial(_adam_step, decoupled=decoupled))
    _library.impl(name, kernel, "PrivateUse1")
    _library.impl(name + ".tensor_lr", kernel, "PrivateUse1")


def _unscale_and_check(grads: list[Tensor], found_inf: Tensor, inv_scale: Tensor) -> None:
    """grads *= inv_scale; found_inf becomes 1 if any grad holds an inf or NaN."""
    for grad in grads:
        found_inf.copy_(torch.maximum(found_inf, (~torch.isfinite(grad)).any().to(found_inf)))
        grad.mul_(inv_scale.reshape(()))


def _update_scale(
    scale: Tensor,
    growth_tracker: Tensor,
    found_inf: Tensor,
    growth_factor: float,
    backoff_factor: float,
    growth_interval: int,
) -> Tensor:
    """Backs the scale off after an overflow; grows it after `growth_interval` clean steps."""
    overflow = found_inf.reshape(()) > 0
    clean_steps = torch.where(overflow, 0, growth_tracker + 1)
    grow = clean_steps == growth_interval
    scale.copy_(
        torch.where(
            overflow, scale * backoff_factor, torch.where(grow, scale * growth_factor, scale)
        )
    )
    growth_tracker.copy_(torch.where(grow, 0, clean_steps))
    return scale


def register() -> None:
    _register("_fused_adam_", decoupled=False)
    _register("_fused_adamw_", decoupled=True)
    _library.impl("_amp_foreach_non_finite_check_and_unscale_", _unscale_and_check, "PrivateUse1")
    _library.impl("_amp_update_scale_", _update_scale, "PrivateUse1")
