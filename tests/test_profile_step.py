"""benchmarks/profile_step.py: its trace arithmetic on a jitted loop and on synthetic traces, and its mistakes."""

import jax
import jax.numpy as jnp
import pytest

from benchmarks import profile_step


def test_parse_variants_names_and_overrides():
    assert profile_step.parse_variants(['bf16 --config.model.dtype=bfloat16',
                                        'b64 --config.train.batch_size=64 "--config.train.lr=2e-3"']) == [
        ("bf16", ["--config.model.dtype=bfloat16"]),
        ("b64", ["--config.train.batch_size=64", "--config.train.lr=2e-3"])]


@pytest.mark.parametrize("spec, message", [
    ("--config.model.dtype=bfloat16", "give a name"),
    ("bf16", "give a name"),
    ("bf16 --config.model.dtype", "not an override"),
    ("bf16 dtype=bfloat16", "not an override"),
])
def test_a_wrong_variant_is_one_line_and_exit_2(capsys, spec, message):
    with pytest.raises(SystemExit) as exit_:
        profile_step.parse_variants([spec])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_variant_named_twice_is_refused(capsys):
    with pytest.raises(SystemExit):
        profile_step.parse_variants(["a --config.x=1", "a --config.x=2"])
    assert "named twice" in capsys.readouterr().err


def test_part_of_reads_the_module_path():
    assert profile_step.part_of("jit(step)/jvp(BuilderModel)/world_cnn/Conv_0/conv") == "world CNN"
    assert profile_step.part_of("jit(step)/transpose(jvp(BuilderModel))/action_decoder/while/body/dot") == "decoder"
    assert profile_step.part_of("jit(step)/BuilderModel/text_encoder/GRU/scan") == "text"
    assert profile_step.part_of("jit(step)/optax/scale_by_adam/mul") == "optimizer"
    assert profile_step.part_of("jit(step)/log_softmax") == "loss and rest"


def test_op_times_are_the_compiled_hlos_instructions_once_per_loop_iteration():
    def f(x, w):
        return jax.lax.fori_loop(0, 4, lambda i, y: jnp.tanh(y @ w), x).sum()

    x, w = jnp.ones((256, 256)), jnp.eye(256) * 0.5
    compiled = jax.jit(f).lower(x, w).compile()
    ops = profile_step.hlo_ops(compiled.as_text())
    assert ops and all(op["opcode"] not in profile_step.CONTAINERS for op in ops.values())
    timed = profile_step.op_times(profile_step.trace_events(lambda: compiled(x, w), calls=2), ops, calls=2)
    assert timed and {op["op"] for op in timed} <= set(ops)
    assert [op["ms_per_call"] for op in timed] == sorted((op["ms_per_call"] for op in timed), reverse=True)
    assert any(op["runs_per_call"] == 4 for op in timed)  # the loop body's ops, once per iteration
    summary = profile_step.summarize_ops(timed, step_ms=10.0, count=2)
    assert summary["ops_ms"] == pytest.approx(sum(op["ms_per_call"] for op in timed), abs=1e-3)
    assert summary["ops_per_step"] == sum(op["runs_per_call"] for op in timed)
    assert len(summary["top_ops"]) == min(2, len(timed))


def _synthetic_trace():
    """A GPU-like trace: a host process, a device process whose kernels name their HLO op."""
    return [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
        {"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
        {"ph": "X", "pid": 1, "name": "fusion.1", "dur": 900.0},  # the host's launch of it: not device time
        {"ph": "X", "pid": 2, "name": "loop_fusion_kernel", "dur": 300.0, "args": {"hlo_op": "fusion.1"}},
        {"ph": "X", "pid": 2, "name": "loop_fusion_kernel", "dur": 100.0, "args": {"hlo_op": "fusion.1"}},
        {"ph": "X", "pid": 2, "name": "gemm_kernel", "dur": 600.0, "args": {"hlo_op": "dot.2"}},
        {"ph": "X", "pid": 2, "name": "MemcpyH2D", "dur": 50.0},
    ]


def test_device_events_sum_the_device_processes_only():
    d = profile_step.device_events(_synthetic_trace(), calls=1, count=2)
    assert d["processes"] == ["/device:GPU:0"]
    assert d["ms_per_call"] == pytest.approx(1.05)
    assert d["top"] == [{"name": "gemm_kernel", "ms_per_call": 0.6}, {"name": "loop_fusion_kernel", "ms_per_call": 0.4}]


def test_op_times_name_a_kernel_by_its_hlo_op_and_summarize_by_part():
    ops = {"fusion.1": {"shape": "f32[8]", "opcode": "fusion", "source": "world_cnn/conv", "part": "world CNN"},
           "dot.2": {"shape": "f32[8,8]", "opcode": "dot", "source": "decoder/dot", "part": "decoder"}}
    events = [e for e in _synthetic_trace() if e.get("pid") == 2]  # the device's events only
    timed = profile_step.op_times(events, ops, calls=2)
    assert [(op["op"], op["ms_per_call"], op["runs_per_call"]) for op in timed] == [("dot.2", 0.3, 0), ("fusion.1", 0.2, 1)]
    summary = profile_step.summarize_ops(timed, step_ms=1.0, count=5)
    assert summary["busy"] == pytest.approx(0.5)
    assert summary["by_part"] == {"decoder": 0.3, "world CNN": 0.2}
    assert summary["by_opcode"] == {"dot": 0.3, "fusion": 0.2}


def test_wrong_flags_exit_2(capsys):
    for argv, word in ((["--steps", "0"], "--steps"), (["--ops", "-1"], "--ops"), (["--bogus"], "--bogus")):
        with pytest.raises(SystemExit) as exit_:
            profile_step.main(argv)
        assert exit_.value.code == 2
        assert word in capsys.readouterr().err
