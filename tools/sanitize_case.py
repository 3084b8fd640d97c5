"""A small FusedLSTM run on the CUDA EP for compute-sanitizer: every strategy (the cluster kernel at
several cluster sizes), a bidirectional and a 3-layer forward stack (the wavefront), ragged
lengths, initial states, peepholes, float32 and float16, one-step calls; and the same stacks with
factored weights (the low-rank path), against our CPU kernel. `--one-step`: the one-step calls alone
(what memcheck gets through within a device call's time limit)."""

import itertools
import os
import sys

import numpy as np

from lstm_ort.builders import LstmSpec, fused_model, random_layers
from lstm_ort.testing import (CPU, CUDA, factored_layers, make_feeds, max_abs, run, run_fused, run_stock,
                              weights_as_graph_input)


def main(argv: list[str]) -> int:
    one_step_only = "--one-step" in argv
    rng = np.random.default_rng(0)
    worst = 0.0

    def run_case(strategy, spec, dtype, T, zero_lengths=False, B=5) -> float:
        """One call on CUDA with ragged lengths and initial states: its error against stock (fp32),
        else 0."""
        layers = random_layers(spec, rng)
        feeds = make_feeds(spec, T, B, rng, dtype, seq_lens=True, initial_states=True)
        if zero_lengths:
            feeds["sequence_lens"][1::2] = 0
        got = run_fused(spec, layers, feeds, dtype, providers=CUDA, strategy=strategy, seq_lens=True,
                        initial_states=True)
        if dtype != np.float32:
            return 0.0
        return max_abs(got, run_stock(spec, layers, feeds, seq_lens=True, initial_states=True))

    specs = [LstmSpec(input_size=12, hidden_size=40, num_layers=2, direction="bidirectional", peepholes=True),
             LstmSpec(input_size=12, hidden_size=40, num_layers=3, direction="forward", peepholes=True)]
    # The cluster kernel with the planner's cluster size and slices, then forced to a single block
    # and to 2 and 16 blocks, and to 4 and 8 slices per column.
    runs = [(s, None, None) for s in ("tiled", "splitk", "persistent", "wavefront", "cluster")]
    runs += [("cluster", c, s) for c, s in (("1", None), ("2", None), ("16", None), ("1", "4"), ("16", "8"))]
    for strategy, cluster, slices in [] if one_step_only else runs:
        for knob, value in (("LSTM_ORT_CLUSTER_SIZE", cluster), ("LSTM_ORT_CLUSTER_SLICES", slices)):
            if value:
                os.environ[knob] = value
            else:
                os.environ.pop(knob, None)
        for spec, dtype in itertools.product(specs, (np.float32, np.float16)):
            worst = max(worst, run_case(strategy, spec, dtype, 6))
    os.environ.pop("LSTM_ORT_CLUSTER_SIZE", None)
    os.environ.pop("LSTM_ORT_CLUSTER_SLICES", None)
    # One step: split-K multiplies the input in its step, the FMA steps write the final states;
    # lengths of 0 and 1.
    for strategy, spec, dtype in itertools.product(("auto", "splitk", "tiled"), specs, (np.float32, np.float16)):
        worst = max(worst, run_case(strategy, spec, dtype, 1, zero_lengths=True))
    # v1's cuBLAS step at one step, forced: its cell writes the final states, after the streaming
    # product (5 rows) and after cuBLAS's GEMM (17 rows).
    os.environ["LSTM_ORT_GEMM_STEP"] = "1"
    for spec, B in itertools.product(specs, (5, 17)):
        worst = max(worst, run_case("auto", spec, np.float32, 1, zero_lengths=True, B=B))
    os.environ.pop("LSTM_ORT_GEMM_STEP")
    if one_step_only:
        print(f"sanitize case (one-step calls) done, max-abs vs stock {worst:.2e}")
        return 0 if worst <= 2e-5 else 1
    # The tensor-core kernel in every operand type: batches that take it (16 rows for the half
    # types, 256 for tf32), a wavefront stack and a bidirectional layer, ragged lengths.
    worst_mma = {}
    for precision, B in (("fp16", 20), ("bf16", 20), ("tf32", 256), ("auto", 256)):
        for spec in specs:
            layers = random_layers(spec, rng)
            feeds = make_feeds(spec, 5, B, rng, seq_lens=True, initial_states=True)
            got = run_fused(spec, layers, feeds, providers=CUDA, precision=precision, seq_lens=True,
                            initial_states=True)
            err = max_abs(got, run_stock(spec, layers, feeds, seq_lens=True, initial_states=True))
            worst_mma[precision] = max(worst_mma.get(precision, 0.0), err)
    # The tensor-core step (custom_ops/cuda/mma_step/), forced through its developer knob in every
    # operand type (3xTF32 in fp32, the scaled fp16 copy in tf32, fp16, bf16): a 3-layer wavefront
    # and a bidirectional layer, ragged lengths, initial states, float32 and float16 models; its
    # launches overlapped (programmatic dependent launch) and not.
    step_specs = [LstmSpec(input_size=12, hidden_size=64, num_layers=3, direction="forward", peepholes=True),
                  LstmSpec(input_size=12, hidden_size=64, num_layers=1, direction="bidirectional")]
    os.environ["LSTM_ORT_MMA_STEP"] = "1"
    for pdl, precision, dtype in itertools.product(("0", "1"), ("fp32", "tf32", "fp16", "bf16"),
                                                   (np.float32, np.float16)):
        if dtype == np.float16 and precision in ("fp32", "tf32"):
            continue  # fp16 models take fp16 operands there: the fp16 case
        os.environ["LSTM_ORT_MMA_STEP_PDL"] = pdl
        for spec in step_specs:
            layers = random_layers(spec, rng)
            feeds = make_feeds(spec, 9, 20, rng, dtype, seq_lens=True, initial_states=True)
            got = run_fused(spec, layers, feeds, dtype, providers=CUDA, precision=precision, seq_lens=True,
                            initial_states=True)
            if dtype == np.float32:
                err = max_abs(got, run_stock(spec, layers, feeds, seq_lens=True, initial_states=True))
                if precision == "fp32":
                    worst = max(worst, err)
                else:
                    key = f"tensor-core step {precision}"
                    worst_mma[key] = max(worst_mma.get(key, 0.0), err)
    del os.environ["LSTM_ORT_MMA_STEP"], os.environ["LSTM_ORT_MMA_STEP_PDL"]
    # v1's cuBLAS step (v1/gemm_step.cu): forced on every fp32 layer through its developer knob, in
    # fp32 and in tf32 (the mode that picks it on its own at large shapes). B=6 takes the
    # weight-streaming product (v1/step_stream.cuh), B=20 cuBLAS; without initial states the first
    # step skips the product; without sequence_lens the lengths are filled on the device. From
    # T=8 the reduced modes read 16-bit copies of the weights (v1/half_weights.cuh): streamed at
    # B=1 and 6, cuBLAS's 16-bit GEMM at B=20.
    os.environ["LSTM_ORT_GEMM_STEP"] = "1"
    for precision, lens, states, B, T in (("fp32", True, True, 6, 5), ("fp32", False, False, 6, 5),
                                          ("fp32", True, False, 20, 5), ("tf32", True, True, 6, 5),
                                          ("tf32", True, True, 1, 9), ("fp16", False, False, 6, 9),
                                          ("tf32", True, False, 20, 9), ("bf16", True, True, 20, 9)):
        for spec in specs:
            layers = random_layers(spec, rng)
            feeds = make_feeds(spec, T, B, rng, seq_lens=lens, initial_states=states)
            got = run_fused(spec, layers, feeds, providers=CUDA, precision=precision, seq_lens=lens,
                            initial_states=states)
            err = max_abs(got, run_stock(spec, layers, feeds, seq_lens=lens, initial_states=states))
            if precision == "fp32":
                worst = max(worst, err)
            else:
                key = f"cuBLAS step {precision}"
                worst_mma[key] = max(worst_mma.get(key, 0.0), err)
    del os.environ["LSTM_ORT_GEMM_STEP"]
    # fp32 input projections on 3xTF32 (gemm/input_projection.cu): T*B = 1024 rows, W kept across
    # calls (gemm/kept_split.h; the first call splits it), then W fed at run time (split per call).
    from lstm_ort.runtime.session import InferenceSession
    for spec in specs:
        layers = random_layers(spec, rng)
        feeds = make_feeds(spec, 64, 16, rng, seq_lens=True, initial_states=True)
        expect = run_stock(spec, layers, feeds, seq_lens=True, initial_states=True)
        model = fused_model(spec, layers, seq_lens=True, initial_states=True)
        sess = InferenceSession(model.SerializeToString(), providers=CUDA)
        for _ in range(2):
            worst = max(worst, max_abs(sess.run(None, feeds), expect))
        model, weights = weights_as_graph_input(model)
        sess = InferenceSession(model.SerializeToString(), providers=CUDA)
        worst = max(worst, max_abs(sess.run(None, {**feeds, **weights}), expect))
    # The kept halves as calls ask for them: auto runs tf32 at 512 rows of a 1024-wide input (the
    # transposed hi half only), then fp32 at 1024 rows (3xTF32: lo made then).
    spec = LstmSpec(input_size=1024, hidden_size=40, num_layers=2, direction="bidirectional")
    layers = random_layers(spec, rng)
    sess = InferenceSession(fused_model(spec, layers).SerializeToString(), providers=CUDA, precision="auto")
    for T, B, mode in ((2, 256, "tf32"), (64, 16, "fp32"), (2, 256, "tf32")):
        feeds = make_feeds(spec, T, B, rng)
        err = max_abs(sess.run(None, feeds), run_stock(spec, layers, feeds))
        if mode == "fp32":
            worst = max(worst, err)
        else:
            worst_mma["kept tf32 half"] = max(worst_mma.get("kept tf32 half", 0.0), err)
    # Factored weights (the low-rank path), against our CPU kernel: the persistent recurrence, then
    # the per-step one through its knob.
    for stepwise, spec, dtype in itertools.product((False, True), specs, (np.float32, np.float16)):
        if stepwise:
            os.environ["LSTM_ORT_LOW_RANK_STEPWISE"] = "1"
        model = fused_model(spec, factored_layers(random_layers(spec, rng), 5, 7), dtype, seq_lens=True,
                            initial_states=True)
        feeds = make_feeds(spec, 6, 5, rng, dtype, seq_lens=True, initial_states=True)
        got = run(model, feeds, providers=CUDA)
        if dtype == np.float32:
            worst = max(worst, max_abs(got, run(model, feeds, providers=CPU)))
    os.environ.pop("LSTM_ORT_LOW_RANK_STEPWISE", None)
    print(f"sanitize case done, max-abs vs stock (factored: vs our CPU kernel) {worst:.2e}; tensor cores "
          + ", ".join(f"{k} {v:.1e}" for k, v in worst_mma.items()))
    return 0 if worst <= 2e-5 and all(v <= 5e-2 for v in worst_mma.values()) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
