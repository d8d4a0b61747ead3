"""The training optimizer from ``config.train``: AdamW with gradient clipping, and its
learning-rate schedule (the one check of the schedule's name)."""

from __future__ import annotations

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
