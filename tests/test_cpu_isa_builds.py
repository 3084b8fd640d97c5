"""The fp32 CPU kernel's builds (x86-64-v2, -v3, -v4: custom_ops/cpu/kernels_v*.cc), each forced with
LSTM_ORT_CPU_ISA in a process of its own on one grid: the AVX-512 build adds the same products in the
same order per lane as the AVX2 build, so their outputs are equal bit for bit; every build agrees
with stock onnxruntime. A build this CPU lacks is refused with a message naming it."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

from lstm_ort.testing import child_python

# (direction, T, B, I, H, L, features): odd widths and row counts that reach every tile size (1 to 12
# rows, the lone-row product, several row tiles), several k-blocks (H 300 > 256), panel tails, and
# and the cell's paths (peepholes, clip, input_forget, lengths, other activations).
GRID = [
    ("forward", 7, 1, 28, 200, 1, ""),
    ("forward", 5, 2, 13, 40, 2, "states"),
    ("reverse", 9, 3, 161, 72, 1, "lens"),
    ("bidirectional", 6, 5, 7, 13, 2, "states,lens"),
    ("forward", 4, 8, 32, 256, 1, "states"),
    ("forward", 3, 13, 80, 300, 1, "peep,clip"),
    ("reverse", 4, 1, 24, 120, 1, "peep,clip,if,lens"),
    ("bidirectional", 2, 64, 19, 33, 1, "states"),
    ("forward", 1, 6, 257, 129, 3, "acts"),
    # few rows (1 to 6: products over panel pairs) at odd depths and odd panel counts (one panel
    # left after the pairs); a T=1 call of one row (the lone-row projection too)
    ("forward", 1, 1, 33, 45, 2, "states"),
    ("forward", 3, 1, 9, 37, 1, "states"),
    ("forward", 4, 2, 11, 21, 1, "states"),
    ("reverse", 3, 4, 5, 19, 1, "states,lens"),
    ("forward", 3, 6, 7, 27, 1, "states"),
    # calls of one step, whose step multiplies the input itself (LayerPlan::step_projects): row tiles
    # with h, from a zero h (no initial states: the input's product alone), and few rows
    ("forward", 1, 16, 32, 256, 1, "states"),
    ("bidirectional", 1, 9, 13, 40, 2, ""),
    ("reverse", 1, 3, 7, 24, 1, "states,lens"),
]

_CHILD = r"""
import sys, numpy as np
from lstm_ort.builders import LstmSpec, random_layers
from lstm_ort.testing import make_feeds, run_fused, run_stock, NON_DEFAULT_ACTS
grid = eval(sys.argv[1])
out = {}
for n, (direction, T, B, I, H, L, feats) in enumerate(grid):
    rng = np.random.default_rng(n)
    kw = dict(NON_DEFAULT_ACTS[2 if direction == "bidirectional" else 1]) if "acts" in feats else {}
    spec = LstmSpec(input_size=I, hidden_size=H, num_layers=L, direction=direction, peepholes="peep" in feats,
                    clip=0.9 if "clip" in feats else None, input_forget=int("if" in feats), **kw)
    layers = random_layers(spec, rng)
    model_kw = dict(seq_lens="lens" in feats, initial_states="states" in feats)
    feeds = make_feeds(spec, T, B, rng, **model_kw)
    fused = run_fused(spec, layers, feeds, **model_kw)
    stock = run_stock(spec, layers, feeds, **model_kw)
    for k, (f, s) in enumerate(zip(fused, stock)):
        out[f"{n}_{k}"], out[f"{n}_{k}_stock"] = f, s
np.savez(sys.argv[2], **out)
"""


def _run_build(isa: str, tmp_path) -> dict[str, np.ndarray] | None:
    """The grid's outputs with build `isa` forced; None where this CPU lacks it."""
    path = tmp_path / f"{isa}.npz"
    argv, env = child_python(_CHILD, repr(GRID), str(path), env={"LSTM_ORT_CPU_ISA": isa, "LSTM_ORT_CPU_KERNEL": "fused"})
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        assert f"LSTM_ORT_CPU_ISA={isa}: this CPU lacks that instruction set" in done.stdout + done.stderr, done.stderr
        return None
    with np.load(path) as z:
        return dict(z)


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, dict[str, np.ndarray] | None]:
    tmp = tmp_path_factory.mktemp("isa")
    return {isa: _run_build(isa, tmp) for isa in ("v2", "v3", "v4")}


@pytest.mark.parametrize("isa", ["v2", "v3", "v4"])
def test_each_build_agrees_with_stock(builds, isa):
    outs = builds[isa]
    if outs is None:
        pytest.skip(f"this CPU lacks x86-64-{isa}")
    for name, value in outs.items():
        if name.endswith("_stock"):
            continue
        np.testing.assert_allclose(value, outs[name + "_stock"], rtol=0, atol=2e-5, err_msg=f"{isa} case {name}")


def test_avx512_build_equals_avx2_bit_for_bit(builds):
    if builds["v4"] is None or builds["v3"] is None:
        pytest.skip("this CPU lacks AVX-512 (x86-64-v4)")
    for name, value in builds["v3"].items():
        if not name.endswith("_stock"):
            assert np.array_equal(builds["v4"][name], value), f"case {name}"


def test_an_unknown_build_is_refused(tmp_path):
    code = ("import numpy as np\nfrom lstm_ort.builders import LstmSpec, random_layers\n"
            "from lstm_ort.testing import make_feeds, run_fused\n"
            "spec = LstmSpec(input_size=3, hidden_size=4)\nrng = np.random.default_rng(0)\n"
            "run_fused(spec, random_layers(spec, rng), make_feeds(spec, 2, 1, rng))\n")
    argv, env = child_python(code, env={"LSTM_ORT_CPU_ISA": "v5"})
    done = subprocess.run(argv, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0
    assert "LSTM_ORT_CPU_ISA" in done.stderr and "v2, v3, v4 or auto" in done.stderr, done.stderr
