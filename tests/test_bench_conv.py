"""benchmarks/bench_conv.py: every convolution it times is the world CNN's convolution."""

import flax.linen as nn
import jax
import numpy as np
import pytest

from benchmarks import bench_conv


@pytest.mark.parametrize("name", sorted(bench_conv.CONV_IMPLS))
def test_each_convolution_equals_flax_conv(name):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, 11, 9, 11, 5)).astype(np.float32)
    kernel = rng.normal(size=(3, 3, 3, 5, 4)).astype(np.float32)
    want = nn.Conv(4, (3, 3, 3), padding="SAME", use_bias=False).apply({"params": {"kernel": kernel}}, x)
    np.testing.assert_allclose(bench_conv.CONV_IMPLS[name](x, kernel), want, atol=2e-5)


def test_chunked_loss_and_gradients_do_not_depend_on_the_chunk():
    rng = np.random.default_rng(1)
    x = rng.normal(size=(4, 11, 9, 11, 3)).astype(np.float32)
    kernels = [rng.normal(size=(3, 3, 3, 3, 4)).astype(np.float32) * 0.2,
               rng.normal(size=(3, 3, 3, 4, 4)).astype(np.float32) * 0.2]
    whole = bench_conv.cnn_loss(bench_conv.CONV_IMPLS["im2col"], 0)(kernels, x)
    chunked = bench_conv.cnn_loss(bench_conv.conv3d_shift_in, 2)(kernels, x)
    for got, want in zip(jax.tree.leaves(chunked), jax.tree.leaves(whole)):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
