"""Many concurrent streams of a stateful model: `lstm-ort streams-bench` on corpus models by name.
The StreamBatcher against one `run` per stream per step (stock onnxruntime on the original model,
lstm_ort's session on the optimized one), the same client threads for each, in one process,
interleaved and repeated (medians); every option after the corpus name is streams-bench's.

  # CPU: closed loop (a thread-per-connection server, K steps in flight at most)
  python tools/bench_streams.py --corpus g2p --pattern closed --clients 8 --streams 96 --repeats 3
  # open loop: 256 silero-vad streams, a chunk each every 32 ms at random phases
  python tools/bench_streams.py --corpus silero --pattern open --period-ms 32 --streams 256 --clients 2
  # a torch export: conv front end + 2-layer LSTM with (h, c) carried (needs torch)
  python tools/bench_streams.py --corpus torch --pattern closed --clients 32 --streams 96
  # latency against streams, as a plot
  python tools/bench_streams.py --corpus silero --pattern open --ladder 16,64,256,1024 --plot silero.png
  # GPU (H100): real time at scale, the batcher alone
  python tools/bench_streams.py --corpus silero --providers cuda,cpu --pattern open --period-ms 32 \\
      --ladder 1,64,256,1024,4096,10000 --clients 16 --seconds 10 --systems batcher --json silero_gpu.json
  # any model: the command itself
  lstm-ort streams-bench model.onnx --carry stateN=state --chunk input=1,576 --value sr=16000

--corpus names: silero (silero-vad 16k, 576-sample chunks), g2p (the g2p-id decoder, one frame),
torch (models/torch_streams.py: 4 frames of 40 features). The original export is written to a
temporary folder and streams-bench optimizes it.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "models"))

CORPUS = {  # name -> (how to build the original export and its carry, one stream's chunk, fixed values)
    "silero": ("silero_vad 16k", {"input": [1, 576]}, {"sr": [16000]}),
    "g2p": ("g2p_id decoder (tf2onnx)", {"input_2": [1, 1, 32]}, {}),
    "torch": ("torch_streams.conv_lstm", None, {}),
}


def corpus_original(name: str) -> tuple[onnx.ModelProto, dict[str, str], dict[str, list[int]]]:
    """The original export of a corpus name, its carry and its chunk shapes."""
    source, chunk, _ = CORPUS[name]
    if name == "torch":
        import torch_streams

        return torch_streams.conv_lstm(), dict(torch_streams.CARRY), dict(torch_streams.CHUNK)
    import corpus

    entry = next(e for e in corpus.ENTRIES if e.name == source)
    return entry.build(), dict(entry.carry), chunk


def streams_bench_argv(name: str, directory: Path) -> list[str]:
    """`lstm-ort streams-bench` arguments for a corpus model (written to ``directory``)."""
    model, carry, chunks = corpus_original(name)
    path = directory / f"{name}.onnx"
    onnx.save(model, path)
    argv = ["streams-bench", str(path)]
    for out, inp in carry.items():
        argv += ["--carry", f"{out}={inp}"]
    for inp, shape in chunks.items():
        argv += ["--chunk", f"{inp}={','.join(map(str, shape))}"]
    for inp, value in CORPUS[name][2].items():
        argv += ["--value", f"{inp}={','.join(map(str, value))}"]
    return argv


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--corpus", choices=sorted(CORPUS), required=True)
    p.add_argument("--no-baseline", action="store_true", help="the batcher alone (streams-bench --systems batcher)")
    args, rest = p.parse_known_args(argv)
    if args.no_baseline:
        rest += ["--systems", "batcher"]
    from lstm_ort.cli import main as lstm_ort_main

    with tempfile.TemporaryDirectory() as tmp:
        return lstm_ort_main(streams_bench_argv(args.corpus, Path(tmp)) + rest)


if __name__ == "__main__":
    sys.exit(main())
