"""The once builder (the CPU models "once" and "frame"): the world CNN encodes each item's start
world once, FiLM-conditioned (with `world.film`) on the text summary, and each decoder step adds
to those features the sparse convolution of what its actions changed since
(`bapjax.models.world_changes`), so a step costs no CNN. The packed steps' change features and
heads run in rematerialized chunks of `world.step_chunk`.
"""

from __future__ import annotations

import jax

from bapjax.models import parts, world_changes
from bapjax.models.common import BuilderModel


class OnceBuilder(BuilderModel):
    """`BuilderModel` whose world part (`parts.OnceWorld`) encodes the start world once and the
    changes since per step."""

    world: parts.OnceWorld = parts.OnceWorld()

    world_encoding = "once"

    def setup(self):
        super().setup()
        self.change_conv = world_changes.ChangeConv(self.world.features, self.world.change_kernel,
                                                    dtype=self.compute_dtype, name="world_changes")

    @property
    def packed_chunk(self) -> int:
        return self.world.step_chunk

    def encode_starts(self, start: dict, summary):
        """Features [N, 11, 9, 11, F] of N items' start worlds, FiLM-conditioned (with `world.film`)
        on their text summaries [N, D]; in chunks of `world.encode_chunk`."""
        return self.encode_worlds(start, summary)

    def start_features(self, start: dict, summary):
        return self.encode_starts(start, summary)

    def changed_world_logits(self, encoded, start: dict, world: dict, dec_out, max_changed: int):
        """[N, 7624] logits of N world states from their items' start-world encodings
        [N, 11, 9, 11, F] plus the change features of `world` against `start` (at most
        `max_changed` changed cells per row: the item's actions so far)."""
        def run(module, e, s, w, d):
            changes = world_changes.change_channels(w, s, module.world.recent_decay)
            return module.action_logits(e + module.change_conv(changes, max_changed), d)

        return self.in_chunks(run, (encoded, start, world, dec_out), self.world.step_chunk)

    def decoding_starts(self, start: dict, summary):
        return self.encode_starts(start, summary)  # every item's start world once, before the loop

    def step_logits(self, starts_encoded, start: dict, world: dict, dec_out, max_changed: int):
        return self.changed_world_logits(starts_encoded, start, world, dec_out, max_changed)

    def packed_logits(self, start, packed, summary, dec_out, steps):
        """The CNN runs on the B start worlds, not the K packed ones."""
        b, t = packed["item"], packed["step"]
        encoded = self.encode_starts(start, summary)
        logits = self.changed_world_logits(encoded[b], jax.tree_util.tree_map(lambda x: x[b], start),
                                           packed["worlds"], dec_out[b, t], max_changed=steps)
        return logits, encoded
