"""The text encoder's GRU over a whole sequence, with a hand-written backward pass.

`nn.RNN(nn.GRUCell)` differentiated by JAX runs the weight gradients inside the reverse loop: per
token, six small matmuls accumulate into the kernels. `gru_states` keeps `nn.GRUCell`'s forward
rule and parameters (`GRUWeights`: same names, shapes and initializers, so parameter trees,
initial values and checkpoints are unchanged) and gives it a custom VJP: the reverse loop carries
only the state's gradient (three [B, H] x [H, H] matmuls per token) and stacks the gates'
gradients, and the kernel and input gradients are a few large matmuls after it. The text GRU's
forward and backward at batch 32 x 256 tokens take ~0.77x the time (`benchmarks/bench_gru.py`).
The arithmetic is nn.GRUCell's; `tests/test_gru.py` checks states and gradients against it.
`unroll` (both loops) is `jax.lax.scan`'s: that many steps per loop iteration, the same function;
the compute dtype is the inputs' and weights' (the caller casts them; `tests/test_precision.py`).
"""

from __future__ import annotations

import functools
from typing import Callable

import flax.linen as nn
import jax
import jax.numpy as jnp

INPUT_GATES = ("ir", "iz", "in")  # nn.GRUCell's submodule names: input side (with biases)
STATE_GATES = ("hr", "hz", "hn")  # state side (only "hn" has a bias)


class _DenseParams(nn.Module):
    """A `nn.Dense` layer's parameters under its names (kernel [in, out], then bias), in its order."""

    features: int
    use_bias: bool
    kernel_init: Callable

    @nn.compact
    def __call__(self, in_features: int) -> dict:
        params = {"kernel": self.param("kernel", self.kernel_init, (in_features, self.features), jnp.float32)}
        if self.use_bias:
            params["bias"] = self.param("bias", nn.initializers.zeros_init(), (self.features,), jnp.float32)
        return params


class GRUWeights(nn.Module):
    """`nn.GRUCell(features)`'s parameters as {gate name: {"kernel", ["bias"]}}."""

    features: int

    @nn.compact
    def __call__(self, in_features: int) -> dict:
        weights = {n: _DenseParams(self.features, True, nn.initializers.lecun_normal(), name=n)(in_features)
                   for n in INPUT_GATES}
        for n in STATE_GATES:
            weights[n] = _DenseParams(self.features, n == "hn", nn.initializers.orthogonal(), name=n)(self.features)
        return weights


def _forward(w: dict, xs: jax.Array, unroll: int = 1):
    """nn.GRUCell's rule over time-major inputs [L, B, D] from a zero state; per step the state
    after it and what the backward pass reads (state before, gates r and z, candidate n, the
    state side of the candidate)."""

    def step(h, x):
        r = jax.nn.sigmoid(x @ w["ir"]["kernel"] + w["ir"]["bias"] + h @ w["hr"]["kernel"])
        z = jax.nn.sigmoid(x @ w["iz"]["kernel"] + w["iz"]["bias"] + h @ w["hz"]["kernel"])
        state_n = h @ w["hn"]["kernel"] + w["hn"]["bias"]
        n = jnp.tanh(x @ w["in"]["kernel"] + w["in"]["bias"] + r * state_n)
        new = (1.0 - z) * n + z * h
        return new, (new, h, r, z, n, state_n)

    start = jnp.zeros(xs.shape[1:2] + w["hr"]["kernel"].shape[:1], xs.dtype)
    return jax.lax.scan(step, start, xs, unroll=unroll)[1]


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _states_time_major(unroll: int, w: dict, xs: jax.Array) -> jax.Array:
    return _forward(w, xs, unroll)[0]


def _states_fwd(unroll, w, xs):
    states, *saved = _forward(w, xs, unroll)
    return states, (w, xs, *saved)


def _states_bwd(unroll, saved, d_states):
    w, xs, before, r, z, n, state_n = saved

    def step(d_next, per_step):
        d_out, h, r_t, z_t, n_t, state_n_t = per_step
        d_h = d_next + d_out
        d_n = d_h * (1.0 - z_t) * (1.0 - n_t * n_t)  # through tanh: the candidate's pre-activation
        d_state_n = d_n * r_t
        d_r = d_n * state_n_t * r_t * (1.0 - r_t)  # pre-activations of the gates
        d_z = d_h * (h - n_t) * z_t * (1.0 - z_t)
        d_before = (d_h * z_t + d_r @ w["hr"]["kernel"].T + d_z @ w["hz"]["kernel"].T
                    + d_state_n @ w["hn"]["kernel"].T)
        return d_before, (d_r, d_z, d_n, d_state_n)

    _, (d_r, d_z, d_n, d_state_n) = jax.lax.scan(
        step, jnp.zeros_like(d_states[0]), (d_states, before, r, z, n, state_n), reverse=True, unroll=unroll)
    rows = lambda a: a.reshape(-1, a.shape[-1])  # noqa: E731  [L, B, F] -> [L*B, F]
    x_rows, h_rows = rows(xs), rows(before)
    grads = {}
    for name, d in zip(INPUT_GATES, (d_r, d_z, d_n)):
        grads[name] = {"kernel": x_rows.T @ rows(d), "bias": d.sum((0, 1))}
    for name, d in zip(STATE_GATES, (d_r, d_z, d_state_n)):
        grads[name] = {"kernel": h_rows.T @ rows(d)}
    grads["hn"]["bias"] = d_state_n.sum((0, 1))
    d_xs = sum(d @ w[name]["kernel"].T for name, d in zip(INPUT_GATES, (d_r, d_z, d_n)))
    return grads, d_xs


_states_time_major.defvjp(_states_fwd, _states_bwd)


def gru_states(weights: dict, inputs: jax.Array, unroll: int = 1) -> jax.Array:
    """The state after each step [B, L, H] of nn.GRUCell (`weights`: `GRUWeights`) run over
    inputs [B, L, D] from a zero state; `unroll` steps per iteration of its loops."""
    return jnp.swapaxes(_states_time_major(int(unroll), weights, jnp.swapaxes(inputs, 0, 1)), 0, 1)
