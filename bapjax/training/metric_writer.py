"""A training run's metrics: TensorBoard events and metrics.jsonl in the workdir, and the
learning-curve PNG drawn from that JSONL (matplotlib is imported only to draw it)."""

from __future__ import annotations

import json
import time

import numpy as np
from etils import epath
from tensorboardX import SummaryWriter


class MetricWriter:
    """TensorBoard events + metrics.jsonl in the workdir (host 0 only)."""

    def __init__(self, workdir: epath.Path, enabled: bool):
        self.enabled = enabled
        self.jsonl = workdir / "metrics.jsonl"
        self.tb = None
        if enabled:
            workdir.mkdir(parents=True, exist_ok=True)
            self.tb = SummaryWriter(str(workdir / "tensorboard"))

    def write(self, step: int, kind: str, values: dict) -> None:
        if not self.enabled:
            return
        flat = {k: float(v) for k, v in values.items() if isinstance(v, (int, float, np.floating, np.integer))}
        with self.jsonl.open("a") as f:
            f.write(json.dumps({"step": step, "kind": kind, **flat, "time": time.time()}) + "\n")
        if self.tb is not None:
            for key, value in flat.items():
                self.tb.add_scalar(f"{kind}/{key}", value, step)
            self.tb.flush()

    def close(self):
        if self.tb is not None:
            self.tb.close()


# the headline F1s of an evaluator report: `report_scalars` writes each as "<prefix>_<name>_f1"
REPORT_F1 = {"overall_micro": lambda r: r["micro"]["Overall"]["overall"],
             "overall_macro": lambda r: r["macro"]["Overall"]["overall"],
             "strict_micro": lambda r: r["strict_micro"]}


def report_scalars(prefix: str, report: dict) -> dict[str, float]:
    """A few headline numbers of an evaluator report, for logs, curves and `train.select_by`."""
    out = {}
    try:
        for name, value in REPORT_F1.items():
            out[f"{prefix}_{name}_f1"] = float(value(report))
    except (KeyError, TypeError):
        pass
    return out


def plot_learning_curves(jsonl: epath.Path, out: epath.Path) -> None:
    """PNG of train/val loss and val micro Overall F1 against steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    train = [(r["step"], r["loss"]) for r in rows if r["kind"] == "train" and "loss" in r]
    val = [(r["step"], r["loss"]) for r in rows if r["kind"] == "val" and "loss" in r]
    f1_keys = sorted({k for r in rows if r["kind"] == "val" for k in r if k.endswith("overall_micro_f1")})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    if train:
        axes[0].plot(*zip(*train), label="train loss", alpha=0.7)
    if val:
        axes[0].plot(*zip(*val), "o-", label="val loss")
    axes[0].set_xlabel("step")
    axes[0].set_ylabel("cross entropy")
    axes[0].legend()
    for key in f1_keys:
        pts = [(r["step"], r[key]) for r in rows if r["kind"] == "val" and key in r]
        axes[1].plot(*zip(*pts), "o-", label=key)
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("micro Overall (fairer) F1")
    if f1_keys:
        axes[1].legend()
    fig.tight_layout()
    with out.open("wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
