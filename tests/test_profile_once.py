"""benchmarks/profile_once.py --ops: a compiled function's longest XLA ops, named from its HLO."""

import jax
import jax.numpy as jnp

from benchmarks import profile_once, profile_step


def test_top_ops_are_the_compiled_hlos_instructions_longest_first_without_loops():
    def f(x, w):
        return jax.lax.fori_loop(0, 4, lambda i, y: jnp.tanh(y @ w), x).sum()

    x, w = jnp.ones((256, 256)), jnp.eye(256) * 0.5
    compiled = jax.jit(f).lower(x, w).compile()
    ops = profile_once.top_ops(compiled, (x, w), count=5, calls=2)
    hlo = compiled.as_text()
    assert ops
    assert all(f"{op['op']} = " in hlo and op["opcode"] not in profile_step.CONTAINERS for op in ops)
    assert [op["ms_per_call"] for op in ops] == sorted((op["ms_per_call"] for op in ops), reverse=True)
    assert any(op["runs_per_call"] == 4 for op in ops)  # the loop body's ops, once per iteration
