"""Writing output files without losing data.

Every file gspo writes goes to a temporary file beside its target and is renamed into place
only once complete: a full disk, an error or an interrupt leaves the earlier file as it was, and
a target that is one of several hard links to the same data is replaced, not written through.
:func:`check_outputs` refuses, before any work, an output that is an input or another output.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path

from gspo.errors import GspoError

__all__ = ["OutputError", "atomic_write", "replacing", "check_outputs"]


class OutputError(GspoError):
    """An output path that cannot or must not be written."""


def _new_file_mode(target: Path) -> int:
    """The mode the target has, or the one a plain ``open(..., "w")`` would give it."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def replacing(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success rename it onto ``path``.

    Missing folders are created. On any exception (or interrupt) the temporary file is removed
    and ``path`` is left untouched.
    """
    target = Path(path)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    except OSError as e:
        raise OutputError(f"{target}: cannot write: {e.strerror or e}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, _new_file_mode(target))
        os.replace(tmp, target)
    except OSError as e:
        raise OutputError(f"{target}: cannot write: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def atomic_write(path: str | os.PathLike, data: bytes | str) -> Path:
    """Write ``data`` (``str`` as UTF-8) to ``path`` through a temporary file and a rename."""
    raw = data.encode() if isinstance(data, str) else data
    with replacing(path) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC)
        try:
            _write_all(fd, raw)
            os.fsync(fd)
        finally:
            os.close(fd)
    return Path(path)


def _same(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _writable_folder(path: Path) -> None:
    """Refuse a path whose folder is not a folder or cannot be created or written."""
    folder = path.parent.resolve()
    while not folder.exists():
        folder = folder.parent
    if not folder.is_dir():
        raise OutputError(f"{path}: {folder} is not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise OutputError(f"{path}: cannot write in {folder}")


def check_outputs(outputs: Mapping[str, str | os.PathLike | None], inputs=(), force: bool = False) -> None:
    """Refuse, before any work, outputs that would lose data or could not be written.

    ``outputs`` maps an option name (``-o``, ``--report``) to its path (``None``: not given);
    ``inputs`` are the files read. Refused: an output that is an input (also through a link) or
    another output, a folder, an existing file without ``force``, a path whose folder cannot be
    created or written.
    """
    given = [(name, Path(p)) for name, p in outputs.items() if p is not None]
    read = [Path(p) for p in inputs if p is not None]
    for k, (name, out) in enumerate(given):
        for i in read:
            if _same(out, i):
                raise OutputError(f"{out}: {name} is an input file; choose another path")
        for other_name, other in given[:k]:
            if _same(out, other):
                raise OutputError(f"{out}: {other_name} and {name} name the same file; choose two paths")
        if out.is_dir():
            raise OutputError(f"{out}: is a folder ({name} needs a file path)")
        if out.exists() and not force:
            raise OutputError(f"{out}: exists; use --force to overwrite it")
        _writable_folder(out)
