"""Issue 36: the one way every command writes its files (lstm_ort.runtime.output_files): never over
what it reads, with the umask's mode, whole or not at all, also on SIGINT and SIGTERM."""

import json
import os
import signal
import textwrap

import numpy as np
import onnx
import pytest

from lstm_ort.builders import LstmSpec, random_layers, stock_model
from lstm_ort.runtime.output_files import (
    OutputRefused,
    Staged,
    output_target,
    write_file,
)
from lstm_ort.testing import child_when_ready


def test_output_target_resolves_before_comparing(tmp_path):
    src = tmp_path / "in.npz"
    src.write_bytes(b"x")
    (tmp_path / "a" / "b").mkdir(parents=True)
    os.symlink(tmp_path / "a", tmp_path / "link")
    for spelling in (src, tmp_path / "a" / "b" / ".." / ".." / "in.npz", tmp_path / "link" / ".." / "in.npz"):
        with pytest.raises(OutputRefused, match="is the input"):
            output_target(str(spelling), [src])
    os.link(src, tmp_path / "hard.npz")
    with pytest.raises(OutputRefused, match="is the data"):
        output_target(str(tmp_path / "hard.npz"), [tmp_path / "other", (src, "the data")])
    with pytest.raises(OutputRefused, match="is a directory"):
        output_target(str(tmp_path / "a"), [src])
    (tmp_path / "out.onnx.data").mkdir()
    with pytest.raises(OutputRefused, match="the output's data file .* is a directory"):
        output_target(str(tmp_path / "out.onnx"), [src], companions=[".data"])
    assert output_target(str(tmp_path / "a" / "new.npz"), [src]) == tmp_path / "a" / "new.npz"


@pytest.mark.parametrize("error", [OSError, KeyboardInterrupt])
def test_staged_file_is_removed_on_any_failure(error, tmp_path):
    def write(path):
        path.write_bytes(b"\0" * 1000)
        raise error("stop")

    with pytest.raises(error):
        write_file(tmp_path / "o.npz", write)
    assert list(tmp_path.iterdir()) == []


def test_staged_commit_keeps_an_existing_mode_and_moves_companions(tmp_path):
    dst = tmp_path / "m.onnx"
    dst.write_text("old")
    os.chmod(dst, 0o640)
    with Staged(dst) as staged:
        staged.path.write_text("new")
        staged.beside("m.onnx.data").write_text("data")
        staged.commit()
    assert dst.read_text() == "new" and (tmp_path / "m.onnx.data").read_text() == "data"
    assert dst.stat().st_mode & 0o777 == 0o640 and sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx",
                                                                                                  "m.onnx.data"]


def test_tuning_cache_is_written_with_the_umask(tmp_path, monkeypatch):
    from lstm_ort.runtime.nodes import NodeShape
    from lstm_ort.runtime.tuned_cache import cache_file, record

    old = os.umask(0o022)
    try:
        path = record("gpu", NodeShape(1, 1, 4, 8, "float32"), 10, 2, "persistent", {"persistent": 1.0})
    finally:
        os.umask(old)
    assert path == cache_file() and path.stat().st_mode & 0o777 == 0o644
    assert json.loads(path.read_text())["gpu"]
    monkeypatch.setattr(json, "dumps", lambda *a, **k: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        record("gpu", NodeShape(1, 1, 4, 8, "float32"), 20, 2, "persistent", {"persistent": 1.0})
    assert [p.name for p in path.parent.iterdir()] == [path.name]


_SLOW_OPTIMIZE = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import lstm_ort.cli as cli
    import lstm_ort.verify as verify
    ready, phase = Path(sys.argv[1]), sys.argv[2]
    if phase == "write":
        def slow_write(model, ir_version, path, data_name=None):
            with open(path, "wb") as f:
                f.write(b"\\0" * (1 << 20))
                f.flush()
                ready.write_text(phase)
                time.sleep(60)
        import lstm_ort.rewriter.model_writer as model_writer
        model_writer.write = slow_write
    else:
        def slow_parity(*a, **k):
            ready.write_text(phase)
            time.sleep(60)
        verify.parity = slow_parity
    sys.exit(cli.main(sys.argv[3:]))
""")


@pytest.mark.parametrize("signum,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("phase", ["write", "check"])
def test_optimize_signal_leaves_nothing(signum, code, phase, tmp_path):
    spec = LstmSpec(4, 8)
    src = tmp_path / "m.onnx"
    onnx.save(stock_model(spec, random_layers(spec, np.random.default_rng(0))), str(src))
    out, ready = tmp_path / "out", tmp_path / "ready"
    out.mkdir()
    proc = child_when_ready(_SLOW_OPTIMIZE, str(ready), phase, "optimize", str(src), "-o", str(out / "o.onnx"), "--check",
                            ready=ready, cwd=tmp_path)
    assert list(out.iterdir())  # the staged model is there, in its private folder
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and "Traceback" not in err, err
    assert [line for line in err.splitlines() if line.startswith("lstm-ort:")][-1].startswith(
        "lstm-ort: interrupted" if signum == signal.SIGINT else "lstm-ort: terminated")
    assert list(out.iterdir()) == []
