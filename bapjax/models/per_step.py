"""The per-step builder (the paper's M and M', the CPU models "cpu" and "film"): the world CNN
encodes the world before every decoder step.

Teacher forcing encodes the world after the gold actions < t for decoder step t
(`world_input.worlds_before_each_step`) for the packed (item, step) pairs only; they run through
the CNN and the heads in rematerialized chunks of `world.encode_chunk` (on CPU this keeps the
im2col buffers small and reused instead of gigabytes allocated per step). With `world.film`, the
CNN's condition is the step's decoder output, so what it computes at each cell depends on the
instruction and the actions so far.
"""

from __future__ import annotations

import jax.numpy as jnp

from bapjax.models import parts
from bapjax.models.common import BuilderModel


class PerStepBuilder(BuilderModel):
    """`BuilderModel` whose world part (`parts.WorldCNN`) re-encodes every step's world."""

    world: parts.WorldCNN = parts.WorldCNN()

    world_encoding = "per_step"

    @property
    def packed_chunk(self) -> int:
        return self.world.encode_chunk

    def world_logits(self, world: dict, dec_out):
        """[N, 7624] logits for N world states and decoder outputs [N, H] (the CNN's condition);
        the N rows go through the CNN and the heads in chunks of `world.encode_chunk`."""
        def run(module, w, d):
            return module.action_logits(module.encode_world(w, d), d)

        return self.in_chunks(run, (world, dec_out))

    def decoding_starts(self, start: dict, summary):
        return None  # the CNN encodes every step's world

    def step_logits(self, starts_encoded, start: dict, world: dict, dec_out, max_changed: int):
        return self.world_logits(world, dec_out)

    def start_features(self, start: dict, summary):
        """The start worlds encoded with FiLM (`world.film`) on a zero decoder state, the
        condition this CNN has before any step."""
        condition = jnp.zeros((summary.shape[0], self.decoder.hidden), summary.dtype) if self.world.film else summary
        return self.encode_worlds(start, condition)

    def packed_logits(self, start, packed, summary, dec_out, steps):
        return self.world_logits(packed["worlds"], dec_out[packed["item"], packed["step"]]), None
