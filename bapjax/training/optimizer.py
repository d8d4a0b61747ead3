"""The training optimizer from ``config.train``: AdamW with gradient clipping, its learning-rate
schedule (the one check of the schedule's name), and the optional exponential moving average of
the weights that evaluation uses (``train.ema_decay``)."""

from __future__ import annotations

import jax.numpy as jnp
import optax

SCHEDULES = ("constant", "cosine")


def learning_rate_schedule(train_config, total_steps: int | None = None):
    """config.train.schedule: "constant" or "cosine" (to final_lr_fraction x lr at total_steps),
    both after `warmup_steps` of linear warmup from 0."""
    lr = float(train_config.learning_rate)
    warmup = int(train_config.warmup_steps)
    kind = train_config.schedule
    if kind not in SCHEDULES:
        raise ValueError(f"config.train.schedule must be {' or '.join(map(repr, SCHEDULES))}, got {kind!r}")
    if kind == "cosine":
        if not total_steps:
            raise ValueError("config.train.schedule='cosine' needs the total number of steps")
        return optax.warmup_cosine_decay_schedule(
            0.0, lr, warmup, max(int(total_steps), warmup + 1),
            end_value=lr * float(train_config.final_lr_fraction))
    return optax.warmup_constant_schedule(0.0, lr, warmup) if warmup else lr


def make_optimizer(train_config, total_steps: int | None = None) -> optax.GradientTransformation:
    return optax.chain(
        optax.clip_by_global_norm(float(train_config.grad_clip)),
        optax.adamw(learning_rate_schedule(train_config, total_steps),
                    weight_decay=float(train_config.weight_decay)),
    )


EMA_WARMUP = 10.0  # the EMA's decay at update t is at most (1 + t) / (EMA_WARMUP + t): early on, the average follows the weights


def ema_decay_at(step, decay: float):
    """The decay of the weights' moving average at update `step` (0 for the first update):
    `decay`, lowered early (as TF's ExponentialMovingAverage with num_updates) so the average
    does not keep the initialization for ~1 / (1 - decay) steps."""
    return jnp.minimum(decay, (1.0 + step) / (EMA_WARMUP + step))


def update_ema(ema_params, params, step, decay: float):
    """The moving average after update `step` produced `params`: d * ema + (1 - d) * params with
    d = `ema_decay_at(step, decay)` (optax.incremental_update)."""
    return optax.incremental_update(params, ema_params, 1.0 - ema_decay_at(step, decay))
