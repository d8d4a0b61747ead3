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


def learning_curve_figure(rows: list[dict]):
    """The learning curves of a run's metrics.jsonl rows: train and val loss against steps, and,
    when the run has any F1, a second panel of micro Overall F1: each source's decoded val F1 at
    its evals (`<source>_val_overall_micro_f1`, whatever the sources are named) and each test
    split's final evaluation (`<source>_test_overall_micro_f1`, a marker at its step). Every panel
    drawn has data: a run without F1 (val loss only, no final evaluation yet) gets the loss panel alone."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = [(r["step"], r["loss"]) for r in rows if r["kind"] == "train" and "loss" in r]
    val = [(r["step"], r["loss"]) for r in rows if r["kind"] == "val" and "loss" in r]
    f1 = {kind: sorted({k for r in rows if r["kind"] == kind for k in r if k.endswith("_overall_micro_f1")})
          for kind in ("val", "test")}
    panels = 2 if f1["val"] or f1["test"] else 1
    fig, axes = plt.subplots(1, panels, figsize=(5.5 * panels, 4), squeeze=False, sharex=True)  # F1 on the loss's steps
    loss = axes[0][0]
    if train:
        loss.plot(*zip(*train), label="train loss", alpha=0.7)
    if val:
        loss.plot(*zip(*val), "o-", label="val loss")
    loss.set_xlabel("step")
    loss.set_ylabel("cross entropy")
    if train or val:
        loss.legend()
    if panels == 2:
        scores = axes[0][1]
        for kind, style in (("val", "o-"), ("test", "*")):
            for key in f1[kind]:
                points = [(r["step"], r[key]) for r in rows if r["kind"] == kind and key in r]
                label = key.removesuffix("_overall_micro_f1").replace("_", " ")
                scores.plot(*zip(*points), style, markersize=12 if kind == "test" else 6,
                            label=label + (" (final evaluation)" if kind == "test" else ""))
        scores.set_xlabel("step")
        scores.set_ylabel("micro Overall (fairer) F1")
        scores.legend()
    fig.tight_layout()
    return fig


def plot_learning_curves(jsonl: epath.Path, out: epath.Path) -> None:
    """PNG of `learning_curve_figure` drawn from a run's metrics.jsonl."""
    import matplotlib.pyplot as plt

    rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    fig = learning_curve_figure(rows)
    with out.open("wb") as f:
        fig.savefig(f, format="png", dpi=100)
    plt.close(fig)
