"""Writing output files without losing data.

Every file gspo writes goes to a temporary file beside its target and is moved into place only
once complete: a full disk, an error or an interrupt leaves the earlier file as it was, and a
target that is one of several hard links to the same data is replaced, not written through.
Without ``overwrite`` the last step links the temporary file to the target's name, which fails
if a file of that name exists, even one that appeared while gspo was working (two runs writing
the same path: one wins, the other reports it). Only regular files are written: a target that
is (through links or not) a device, FIFO or socket is refused, also with ``overwrite``.

Temporary files are named after the process that made them
(``.NAME.gspo-HOST-PID-TOKEN.tmp``, NAME shortened so that any legal target name fits): HOST
identifies the machine and its process-id namespace (a hash of the host name, the kernel's boot
id and the pid namespace, so that two machines or containers sharing a folder never take each
other's names), TOKEN is random. The name is chosen before the file is made and removed on the
way out whatever happens, an interrupt as it is made included; a process killed while writing
leaves one, and the next write into that folder removes it once it is provably dead: made on
this machine (the same HOST) by a process that no longer runs.

:func:`check_outputs` refuses, before any work, an output that is an input, an input model's
external data, another output, not a regular file, or a name the file system cannot hold.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import os
import re
import secrets
import shutil
import socket
import stat
import uuid
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from pathlib import Path

from gspo.errors import GspoError

__all__ = ["OutputError", "atomic_write", "replacing", "replacing_together", "remove_stale", "check_outputs"]

#: The name of a temporary file or folder gspo makes beside a target.
_TEMP_NAME = re.compile(r"^\..+\.gspo-(?P<host>[A-Za-z0-9]*)-(?P<pid>[0-9]{1,10})-[a-z0-9_]+\.tmp$", re.S)
#: os.link's errors on file systems without hard links (the claim-then-replace fallback is used).
_NO_HARD_LINKS = {errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EMLINK, errno.ENOSYS, errno.EACCES}
#: Where Linux says which boot and which pid namespace a process runs in.
_BOOT_ID, _PID_NAMESPACE = "/proc/sys/kernel/random/boot_id", "/proc/self/ns/pid"
#: What a temporary name adds to the target's: ".", ".gspo-", 16 digits, "-", a pid, "-", 12 digits, ".tmp".
_TEMP_EXTRA = 1 + 6 + 16 + 1 + 10 + 1 + 12 + 4


class OutputError(GspoError):
    """An output path that cannot or must not be written."""


def _host() -> str:
    """This machine's identity in temporary names (16 hex digits): see :func:`_host_of`."""
    return _host_of(socket.gethostname())


@functools.lru_cache(maxsize=8)
def _host_of(hostname: str) -> str:
    """A hash of the whole host name, the kernel's boot id and the pid namespace: the scope in
    which a pid names one process (elsewhere, the host name and a hardware address)."""
    parts = [hostname]
    with contextlib.suppress(OSError):
        parts.append(Path(_BOOT_ID).read_text().strip())
    with contextlib.suppress(OSError):
        parts.append(os.readlink(_PID_NAMESPACE))
    if len(parts) == 1:
        parts.append(str(uuid.getnode()))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _name_max(folder: Path) -> int:
    """The longest file name (in bytes) the file system of ``folder`` (or its nearest existing
    ancestor) takes."""
    for f in (folder, *folder.parents):
        with contextlib.suppress(OSError, ValueError):
            if f.is_dir():
                return os.pathconf(f, "PC_NAME_MAX")
    return 255


def _temp_prefix(target: Path) -> str:
    """``.NAME.gspo-HOST-PID-``, NAME cut so that the whole temporary name fits the file system."""
    room = max(_name_max(target.parent) - _TEMP_EXTRA, 1)
    name = os.fsencode(target.name)[:room].decode(errors="ignore") or "x"
    return f".{name}.gspo-{_host()}-{os.getpid()}-"


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
    if ``target`` exists; with it, fail if ``target`` became a device, FIFO or socket meanwhile."""
    if overwrite:
        _refuse_special(target)
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


def _special(path: str | os.PathLike) -> str | None:
    """What ``path`` is (through links) when it exists and is neither a regular file nor a folder."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    kinds = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO"),
             (stat.S_ISSOCK, "a socket"))
    return next((kind for test, kind in kinds if test(mode)), "a special file")


def _refuse_special(path: str | os.PathLike, label: str = "") -> None:
    kind = _special(path)
    if kind:
        how = " (through a link)" if os.path.islink(path) else ""
        raise OutputError(f"{path}: {label}is {kind}{how}, not a regular file; gspo writes only regular files "
                          "(refused also with --force)")


def _names_a_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` as given ends in a separator, ``/.`` or ``/..`` (which Path drops)."""
    raw = os.fspath(path)
    seps = tuple(s for s in (os.sep, os.altsep) if s)
    return bool(raw) and (raw.endswith(seps) or os.path.basename(raw) in (".", ".."))


def _folder_error(path: str | os.PathLike, option: str = "the output") -> OutputError:
    return OutputError(f"{os.fspath(path)}: ends in '/' (or '/.', '/..'), which names a folder; "
                       f"{option} needs a file path")


def _refuse_existing(path: str | os.PathLike, overwrite: bool) -> None:
    if _names_a_folder(path):
        raise _folder_error(path)
    _refuse_special(path)
    target = Path(path)
    if not overwrite and (target.exists() or target.is_symlink()):
        raise _exists_error(target)


def _cannot_write(target: Path, e: OSError) -> OutputError:
    return OutputError(f"{target}: cannot write: {e.strerror or e}")


def _remove(path: Path) -> None:
    with contextlib.suppress(OSError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)


def _make_file(path: Path) -> None:
    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))


def _make_folder(path: Path) -> None:
    os.mkdir(path, 0o700)


@contextlib.contextmanager
def _temporary(target: Path, make) -> Iterator[Path]:
    """A new temporary file or folder beside ``target`` (made by ``make``), removed on the way
    out whatever happens: its name is chosen before it is made, inside the ``try`` that removes
    it, so that an interrupt (SIGTERM) as it is made leaves nothing behind."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(target.parent)
    except OSError as e:
        raise _cannot_write(target, e) from None
    made: list[Path] = []
    try:
        while True:
            made.append(target.parent / f"{_temp_prefix(target)}{secrets.token_hex(6)}.tmp")
            try:
                make(made[-1])
                break
            except FileExistsError:  # another of this process's names (a 48-bit coincidence)
                made.pop()
            except OSError as e:
                raise _cannot_write(target, e) from None
        yield made[-1]
    finally:
        for path in made:
            _remove(path)


@contextlib.contextmanager
def replacing(path: str | os.PathLike, overwrite: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success move it onto ``path``.

    Missing folders are created and stale temporary files of gone gspo processes removed. On any
    exception (or interrupt) the temporary file is removed and ``path`` is left untouched.

    Raises:
        OutputError: ``path`` exists and ``overwrite`` is false (checked again, atomically, at
            the end), it is (or becomes) a device, FIFO or socket, or it cannot be written.
    """
    _refuse_existing(path, overwrite)
    target = Path(path)
    with _temporary(target, _make_file) as tmp:
        try:
            yield tmp
            os.chmod(tmp, _new_file_mode(target))
            _into_place(tmp, target, overwrite)
        except OSError as e:
            raise _cannot_write(target, e) from None


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
    for p in paths:
        _refuse_existing(p, overwrite)
    first = targets[0]
    with _temporary(first, _make_folder) as folder:
        try:
            yield folder
            staged = [(folder / t.name, t) for t in targets if (folder / t.name).exists()]
            _all_into_place(staged, overwrite)
        except OSError as e:
            raise _cannot_write(first, e) from None


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
    except (OSError, ValueError):
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


def external_data_files(model: str | os.PathLike) -> list[Path]:
    """The files holding the external data (weights) of the ONNX model at ``model``, as its
    tensors name them (none when it keeps none, or is no regular file or no readable model)."""
    path = Path(model)
    if _special(path) or not path.is_file():
        return []
    # imported here: importing gspo.ir loads gspo.ir.onnx_io, which writes through this module
    from gspo.ir.external import external_locations, read_header

    proto = read_header(path)  # None: not a model (loading it says so, in its own words)
    return [] if proto is None else [path.parent / loc for loc in external_locations(proto)]


def _read_files(inputs: Iterable, models: Iterable, wanted: bool) -> list[tuple[Path, str]]:
    """What the command reads, each with how a message names it: the inputs, and (when
    ``wanted``: an output exists) the external data of each model (an input ending in .onnx
    counts as one)."""
    read = [(Path(p), "an input file") for p in inputs if p is not None]
    if not wanted:
        return read
    given = [Path(m) for m in models if m is not None]
    seen = {m.resolve() for m in given}
    given += [p for p, _ in read if p.suffix.lower() == ".onnx" and p.resolve() not in seen]
    return read + [(data, f"the external data of {m}") for m in given for data in external_data_files(m)]


def _planned(outputs: Mapping, model_outputs: Collection[str]) -> list[tuple[str, Path, bool]]:
    """Each output to write as (its option, its path, whether it is written for certain): a
    model's output adds its weights file ``OUT.data`` (written when the weights pass ~1.8 GB)."""
    planned = []
    for name, p in outputs.items():
        if p is None:
            continue
        if _names_a_folder(p):
            raise _folder_error(p, name)
        planned.append((name, Path(p), True))
        if name in model_outputs:
            planned.append((f"{name}'s weights file", Path(p).with_name(Path(p).name + ".data"), False))
    return planned


def _fits(out: Path, certain: bool) -> bool:
    """Whether the file system can hold the name ``out``; refused when it is written for certain."""
    longest = _name_max(out.parent)
    size = len(os.fsencode(out.name))
    if size > longest and certain:
        raise OutputError(f"{out}: file name too long ({size} bytes; this file system takes at most {longest})")
    path_max = 4096
    with contextlib.suppress(OSError, ValueError, AttributeError):
        path_max = os.pathconf("/", "PC_PATH_MAX")
    length = len(os.fsencode(os.path.abspath(out)))
    if length >= path_max and certain:
        raise OutputError(f"{out}: path too long ({length} bytes; at most {path_max - 1} here)")
    return size <= longest and length < path_max


def _check_one(name: str, out: Path, certain: bool, read, force: bool) -> None:
    """Refuse the output ``out`` (option ``name``) as :func:`check_outputs` says."""
    for i, what in read:
        if _same(out, i):
            raise OutputError(f"{out}: {name} is {what}; choose another path")
    _refuse_special(out, f"{name} " if not certain else "")
    if out.is_dir():
        raise OutputError(f"{out}: is a folder ({name} needs a file path)")
    if (out.exists() or out.is_symlink()) and not force:
        if certain:
            raise OutputError(f"{out}: exists; use --force to overwrite it")
        raise OutputError(f"{out}: exists (gspo writes {name} there when the weights pass 1.8 GB); "
                          "use --force to overwrite it")
    _writable_folder(out)


def check_outputs(outputs: Mapping[str, str | os.PathLike | None], inputs=(), force: bool = False, *,
                  models: Iterable = (), model_outputs: Collection[str] = ()) -> None:
    """Refuse, before any work, outputs that would lose data or could not be written.

    ``outputs`` maps an option name (``-o``, ``--report``) to its path (``None``: not given);
    ``inputs`` are the files read, ``models`` the ONNX models among them (an input ending in
    ``.onnx`` counts as one too): their external-data files are inputs as well. The outputs named
    in ``model_outputs`` are models, whose weights may go to ``OUT.data`` beside them: that path
    is checked like ``OUT``. Refused, in one line: an output that is an input or an input's
    external data (also through a link) or another output; a device, FIFO or socket (through
    links or not; also with ``force``); a folder, or a path ending in '/'; an existing file
    without ``force``; a name or path too long for the file system; a path whose folder cannot
    be created or written. Stale temporary files of gone gspo processes beside them are removed.
    """
    planned = _planned(outputs, model_outputs)
    checked: list[tuple[str, Path]] = []
    try:
        planned = [(name, out, certain) for name, out, certain in planned if _fits(out, certain)]
        wanted = any(out.exists() or out.is_symlink() for _, out, _ in planned)
        read = _read_files(inputs, models, wanted)
        for name, out, certain in planned:
            for other_name, other in checked:
                if _same(out, other):
                    raise OutputError(f"{out}: {other_name} and {name} name the same file; choose two paths")
            _check_one(name, out, certain, read, force)
            checked.append((name, out))
    except (OSError, ValueError) as e:  # ValueError: a NUL in a path given through the API
        where = f"{e.filename}: " if getattr(e, "filename", None) else ""
        raise OutputError(f"{where}cannot check the outputs: {getattr(e, 'strerror', None) or e}") from None
    for _, out in checked:
        remove_stale(out.parent)
