"""How every `lstm-ort` command writes its files (optimize's model, batch's outputs, tune's cache,
streams-bench's JSON): never over what it reads, never half a file, nothing left behind.

    dst = output_target(args.output, [input, *its_data_files])   # OutputRefused: a usage error
    write_file(dst, lambda path: np.savez(path, **arrays))       # or: with Staged(dst) as s: ...

- ``output_target`` resolves the path (symbolic links and ``..``) and refuses an empty name, "-",
  an existing path that is not a regular file, and any file the command reads.
- ``Staged`` writes into a private folder beside the destination (same file system, so the final
  rename is atomic), named ``.NAME.XXXX.tmp``; ``commit()`` renames the file(s) into place. Files are
  created as any tool creates them, so their mode follows the umask (0644 under umask 022); a
  destination that exists keeps its mode. Leaving the ``with`` block without ``commit()`` (an
  error, SIGINT's KeyboardInterrupt, SIGTERM under ``run_command``) removes the folder.
- ``run_command`` runs a command's body with SIGTERM raised as ``Terminated`` (so every cleanup
  runs), and turns SIGINT and SIGTERM into one line on stderr and exit 130 / 143, no traceback.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, as shells report a command ended by Ctrl-C
EXIT_TERMINATED = 128 + signal.SIGTERM  # 143


class OutputRefused(ValueError):
    """The path given for an output cannot be written: the message says why (a usage error)."""


class Terminated(BaseException):
    """SIGTERM arrived (raised by run_command's handler): like KeyboardInterrupt, cleanups run."""


def output_target(output: str | os.PathLike, inputs: Sequence[str | os.PathLike | tuple[str | os.PathLike, str]], *,
                  option: str = "-o", companions: Sequence[str] = ()) -> Path:
    """The file `output` names, resolved, or OutputRefused: empty or "-", an existing path that is
    not a regular file (a directory, a device), or one of `inputs` (the files the command reads,
    each a path or (path, what it is in words), compared after resolving links and ``..``, and by
    inode). `companions`: suffixes of files written beside the output (a large model's ".data"),
    held to the same rules."""
    output = os.fspath(output)
    if output in ("", "-"):
        raise OutputRefused(f"{option} needs the path of a file to write (standard output is not supported)")
    target = Path(os.path.realpath(output))
    for path, what in ((target, option), *((target.parent / (target.name + s), "the output's data file")
                                           for s in companions)):
        if os.path.lexists(path):
            try:
                mode = os.stat(path).st_mode
            except OSError:
                mode = None
            if mode is not None and not stat.S_ISREG(mode):
                kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file"
                raise OutputRefused(f"{what} {path} is {kind}; refusing to replace it")
        for k, source in enumerate(inputs):
            source, named = source if isinstance(source, tuple) else (
                source, "the input" if k == 0 else f"a file the command reads ({Path(source).name})")
            if same_file(path, source):
                raise OutputRefused(f"{what} {output if what == option else path} is {named}; choose another path")
    return target


def same_file(a: str | os.PathLike, b: str | os.PathLike) -> bool:
    if os.path.realpath(a) == os.path.realpath(b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


class Staged:
    """Files written beside `dst` in a private folder, renamed into place by ``commit()``; the
    folder is removed on ``discard()``, after ``commit()``, and when a ``with`` block is left
    without a commit. ``path``: where to write `dst`'s content; ``beside(name)``: where to write
    a companion file that ``commit()`` moves next to `dst` (first, so `dst` never points at a
    missing one)."""

    def __init__(self, dst: str | os.PathLike) -> None:
        self.dst = Path(dst)
        self.dst.parent.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix=f".{self.dst.name}.", suffix=".tmp", dir=self.dst.parent))
        self.path = self.dir / self.dst.name
        self._companions: list[str] = []

    def beside(self, name: str) -> Path:
        self._companions.append(name)
        return self.dir / name

    def commit(self) -> None:
        try:
            if self.dst.exists():
                os.chmod(self.path, stat.S_IMODE(self.dst.stat().st_mode))
            for name in self._companions:
                if (self.dir / name).exists():
                    os.replace(self.dir / name, self.dst.parent / name)
            os.replace(self.path, self.dst)
        finally:
            self.discard()

    def discard(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Staged:
        return self

    def __exit__(self, *exc) -> None:
        self.discard()  # after commit() the folder is gone already


def write_file(dst: str | os.PathLike, write: Callable[[Path], None]) -> Path:
    """`write(path)` writes the content; it lands at `dst` whole, or not at all."""
    with Staged(dst) as staged:
        write(staged.path)
        staged.commit()
    return Path(dst)


@contextlib.contextmanager
def sigterm_raises():
    """While inside, SIGTERM raises Terminated in the main thread (elsewhere: unchanged)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def terminated(signum, frame):
        raise Terminated()

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def run_command(body: Callable[[], int], prog: str = "lstm-ort") -> int:
    """body()'s exit code; on SIGINT or SIGTERM (after every cleanup has run) one line on stderr
    and 130 or 143."""
    try:
        with sigterm_raises():
            return body()
    except KeyboardInterrupt:
        print(f"{prog}: interrupted (SIGINT); partial outputs removed", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Terminated:
        print(f"{prog}: terminated (SIGTERM); partial outputs removed", file=sys.stderr)
        return EXIT_TERMINATED
