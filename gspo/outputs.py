"""Writing output files without losing data.

Every file gspo writes goes to a temporary file beside its target and is moved into place only
once complete: a full disk, an error or an interrupt leaves the earlier file as it was, and a
target that is one of several hard links to the same data is replaced, not written through.
Without ``overwrite`` the last step links the temporary file to the target's name, which fails
if a file of that name exists, even one that appeared while gspo was working (two runs writing
the same path: one wins, the other reports it). Temporary files are named after the process
that made them (``.NAME.gspo-HOST-PID-XXXXXX.tmp``); a process killed while writing leaves one,
and the next write into that folder removes it once that process is gone.
:func:`check_outputs` refuses, before any work, an output that is an input or another output.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from gspo.errors import GspoError

__all__ = ["OutputError", "atomic_write", "replacing", "replacing_together", "remove_stale", "check_outputs"]

#: The name of a temporary file or folder gspo makes beside a target.
_TEMP_NAME = re.compile(r"^\..+\.gspo-(?P<host>[A-Za-z0-9]*)-(?P<pid>[0-9]{1,10})-[a-z0-9_]+\.tmp$")
#: os.link's errors on file systems without hard links (the claim-then-replace fallback is used).
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS, errno.EACCES}


class OutputError(GspoError):
    """An output path that cannot or must not be written."""


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:16]


def _temp_prefix(target: Path) -> str:
    return f".{target.name}.gspo-{_host()}-{os.getpid()}-"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # another user's process, or a number the system cannot hold
        return True
    return True


def _is_stale(name: str) -> bool:
    """Whether ``name`` is a temporary file of a gspo process on this machine that is gone."""
    m = _TEMP_NAME.match(name)
    return bool(m) and m["host"] == _host() and int(m["pid"]) > 0 and not _alive(int(m["pid"]))


def remove_stale(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporary files and folders gspo processes that are gone left in ``folder``.

    Only names gspo makes (see the module's docstring), of this machine, owned by this user,
    whose process no longer runs; returns what was removed.
    """
    removed = []
    try:
        with os.scandir(folder) as entries:
            stale = [e for e in entries if _is_stale(e.name) and e.stat(follow_symlinks=False).st_uid == os.getuid()]
    except OSError:
        return removed
    for e in stale:
        with contextlib.suppress(OSError):
            if e.is_dir(follow_symlinks=False):
                shutil.rmtree(e.path)
            else:
                os.unlink(e.path)
            removed.append(Path(e.path))
    return removed


def _new_file_mode(target: Path) -> int:
    """The mode the target has, or the one a plain ``open(..., "w")`` would give it."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def _exists_error(target: Path) -> OutputError:
    return OutputError(f"{target}: exists; not overwritten (use --force to overwrite it)")


def _claim_then_replace(tmp: Path, target: Path) -> None:
    """Where hard links are not supported: create the target exclusively, then replace it."""
    try:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        raise _exists_error(target) from None
    try:
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError):
            target.unlink()
        raise


def _into_place(tmp: Path, target: Path, overwrite: bool) -> None:
    """Move the complete file ``tmp`` to ``target``; without ``overwrite``, fail (atomically)
    if ``target`` exists."""
    if overwrite:
        os.replace(tmp, target)
        return
    try:
        os.link(tmp, target)
    except FileExistsError:
        raise _exists_error(target) from None
    except OSError as e:
        if e.errno not in _NO_HARD_LINKS:
            raise
        _claim_then_replace(tmp, target)
        return
    tmp.unlink()


def _refuse_existing(target: Path, overwrite: bool) -> None:
    if not overwrite and (target.exists() or target.is_symlink()):
        raise _exists_error(target)


@contextlib.contextmanager
def replacing(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success move it onto ``path``.

    Missing folders are created and stale temporary files of gone gspo processes removed. On any
    exception (or interrupt) the temporary file is removed and ``path`` is left untouched.

    Raises:
        OutputError: ``path`` exists and ``overwrite`` is false (checked again, atomically, at
            the end), or it cannot be written.
    """
    target = Path(path)
    _refuse_existing(target, overwrite)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(target.parent)
        fd, tmp_name = tempfile.mkstemp(prefix=_temp_prefix(target), suffix=".tmp", dir=target.parent)
    except OSError as e:
        raise OutputError(f"{target}: cannot write: {e.strerror or e}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        os.chmod(tmp, _new_file_mode(target))
        _into_place(tmp, target, overwrite)
    except OSError as e:
        raise OutputError(f"{target}: cannot write: {e.strerror or e}") from None
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()


def _identity(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_dev, st.st_ino


def _all_into_place(staged: Sequence[tuple[Path, Path]], overwrite: bool) -> None:
    """Move each staged file to its target in order; without ``overwrite``, a target that
    exists fails the step and takes back the files already moved."""
    done: list[tuple[Path, tuple[int, int]]] = []
    try:
        for tmp, target in staged:
            os.chmod(tmp, _new_file_mode(target))
            moved = _identity(tmp)
            _into_place(tmp, target, overwrite)
            done.append((target, moved))
    except OutputError:
        for target, moved in done:
            with contextlib.suppress(OSError):
                if _identity(target) == moved:
                    target.unlink()
        raise


@contextlib.contextmanager
def replacing_together(paths: Sequence[str | os.PathLike], overwrite: bool = False) -> Iterator[Path]:
    """Like :func:`replacing`, for files that belong together (a model and its weights file).

    Yields a temporary folder beside them (all ``paths`` must share a folder): write each file
    there under its target's name. On success they are moved into place in the order given;
    files not written are skipped. Without ``overwrite`` none is written when one exists.
    """
    targets = [Path(p) for p in paths]
    if len({t.parent.resolve() for t in targets}) != 1:
        raise ValueError("replacing_together needs files of one folder")
    for t in targets:
        _refuse_existing(t, overwrite)
    first = targets[0]
    try:
        first.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(first.parent)
        folder = Path(tempfile.mkdtemp(prefix=_temp_prefix(first), suffix=".tmp", dir=first.parent))
    except OSError as e:
        raise OutputError(f"{first}: cannot write: {e.strerror or e}") from None
    try:
        yield folder
        staged = [(folder / t.name, t) for t in targets if (folder / t.name).exists()]
        _all_into_place(staged, overwrite)
    except OSError as e:
        raise OutputError(f"{first}: cannot write: {e.strerror or e}") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def atomic_write(path: str | os.PathLike, data: bytes | str, overwrite: bool = False) -> Path:
    """Write ``data`` (``str`` as UTF-8) to ``path`` through a temporary file (see :func:`replacing`)."""
    raw = data.encode() if isinstance(data, str) else data
    with replacing(path, overwrite) as tmp:
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
    created or written. Stale temporary files of gone gspo processes beside them are removed.
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
        if (out.exists() or out.is_symlink()) and not force:
            raise OutputError(f"{out}: exists; use --force to overwrite it")
        _writable_folder(out)
        remove_stale(out.parent)
