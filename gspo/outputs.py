"""Writing output files without losing data.

Every file gspo writes goes to a temporary file beside its target and is moved into place only
once complete: a full disk, an error or an interrupt leaves the earlier file as it was, and a
target that is one of several hard links to the same data is replaced, not written through.
Without ``overwrite`` the last step links the temporary file to the target's name, which fails
if a file of that name exists, even one that appeared while gspo was working (two runs writing
the same path: one wins, the other reports it). Only regular files are written: a target that
is (through links or not) a device, FIFO or socket is refused, also with ``overwrite``.

A target that is a symbolic link is written *through*, as ``cp`` does: with ``overwrite`` the
existing file its links lead to is replaced (from a temporary file beside it); the link stays.
Refused also with ``overwrite``: a path or link into /proc (``/dev/stdout`` is a link to
``/proc/self/fd/1``, a process's open file descriptor), a dangling link (gspo does not create
the file a link names, as GNU ``cp`` does not), a loop of links, and links that take files
written together (a model and its weights) to two folders or to other names.

Temporary files are named after the process that made them
(``.NAME.gspo-HOST-PID-TOKEN.tmp``, NAME shortened so that any legal target name fits): HOST
identifies the machine and its process-id namespace (a hash of the host name, the kernel's boot
id and the pid namespace, so that two machines or containers sharing a folder never take each
other's names), TOKEN is random. The name is chosen before the file is made and removed on the
way out whatever happens, an interrupt as it is made included; a process killed while writing
leaves one, and the next write into that folder removes it once it is provably dead: made on
this machine (the same HOST) by a process that no longer runs.

:func:`check_outputs` refuses, before any work, an output that is an input, an input model's
external data, inside an input folder, another output, not a regular file, or a name the file
system cannot hold.
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
#: Where the kernel shows processes and their open files; nothing in it is a file to write.
_PROC = Path("/proc")


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
    for read in (lambda: Path(_BOOT_ID).read_text().strip(), lambda: os.readlink(_PID_NAMESPACE)):
        with contextlib.suppress(OSError):
            parts.append(read())
    if len(parts) == 1:
        parts.append(str(uuid.getnode()))
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def _name_max(folder: Path) -> int:
    """The longest file name (in bytes) the file system of ``folder`` (or its nearest existing ancestor) takes."""
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


def _is_stale(name: str) -> bool:
    """Whether ``name`` is a temporary file of a gspo process on this machine that is gone."""
    m = _TEMP_NAME.match(name)
    if not m or m["host"] != _host() or int(m["pid"]) <= 0:
        return False
    try:
        os.kill(int(m["pid"]), 0)
    except ProcessLookupError:
        return True
    except (OSError, OverflowError):  # another user's process, or a number the system cannot hold
        pass
    return False


def remove_stale(folder: str | os.PathLike) -> list[Path]:
    """Remove the temporary files and folders gspo processes that are gone left in ``folder``:
    only names gspo makes (see the module's docstring), of this machine, owned by this user,
    whose process no longer runs. Returns what was removed."""
    try:
        with os.scandir(folder) as entries:
            stale = [Path(e.path) for e in entries
                     if _is_stale(e.name) and e.stat(follow_symlinks=False).st_uid == os.getuid()]
    except OSError:
        return []
    for path in stale:
        _remove(path)
    return [path for path in stale if not os.path.lexists(path)]


def _new_file_mode(target: Path) -> int:
    """The mode the target has, or the one a plain ``open(..., "w")`` would give it."""
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        os.umask(umask := os.umask(0))
        return 0o666 & ~umask


def _exists_error(target: Path) -> OutputError:
    return OutputError(f"{target}: exists; not overwritten (use --force to overwrite it)")


def _claim_then_replace(tmp: Path, target: Path) -> None:
    """Where hard links are not supported: create the target exclusively, then replace it."""
    try:
        _make_file(target)
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
    if kind := _special(path):
        how = " (through a link)" if os.path.islink(path) else ""
        raise OutputError(f"{path}: {label}is {kind}{how}, not a regular file; gspo writes only regular files "
                          "(refused also with --force)")


def _written(path: str | os.PathLike, label: str = "") -> Path:
    """The file that writing ``path`` replaces: ``path``, or for a symbolic link the existing file
    its links lead to (see the module's docstring for the links refused)."""
    given = p = Path(path)
    try:
        for _ in range(40):  # the kernel's own limit
            shown, p = p, Path(os.path.realpath(p.parent)) / p.name  # its folders resolved
            if p == _PROC or _PROC in p.parents:
                what = f"a link to {shown}" if shown is not given else p
                raise OutputError(f"{given}: {label}is {what}, a process's open file descriptor or other file of "
                                  "/proc; gspo writes only regular files (refused also with --force)")
            if not p.is_symlink():
                break
            p = p.parent / os.readlink(p)
        else:
            raise OutputError(f"{given}: {label}is a loop of symbolic links")
        if shown is not given and not p.exists():
            raise OutputError(f"{given}: {label}is a link to {p}, which does not exist; gspo writes through a link "
                              "only onto an existing file (refused also with --force: remove the link)")
    except OSError as e:
        raise _cannot_write(given, e) from None
    return given if shown is given else p


def _names_a_folder(path: str | os.PathLike) -> bool:
    """Whether ``path`` as given ends in a separator, ``/.`` or ``/..`` (which Path drops)."""
    raw = os.fspath(path)
    seps = tuple(s for s in (os.sep, os.altsep) if s)
    return bool(raw) and (raw.endswith(seps) or os.path.basename(raw) in (".", ".."))


def _folder_error(path: str | os.PathLike, option: str = "the output") -> OutputError:
    return OutputError(f"{os.fspath(path)}: ends in '/' (or '/.', '/..'), which names a folder; "
                       f"{option} needs a file path")


def _target(path: str | os.PathLike, overwrite: bool) -> Path:
    """The file to write for ``path`` (see :func:`_written`), refusing what is not to be written."""
    if _names_a_folder(path):
        raise _folder_error(path)
    _refuse_special(path)
    target = Path(path)
    if not overwrite and (target.exists() or target.is_symlink()):
        raise _exists_error(target)
    return _written(target) if overwrite else target


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


@contextlib.contextmanager
def _temporary(target: Path, make) -> Iterator[Path]:
    """A new temporary file or folder beside ``target`` (made by ``make``), removed on the way out whatever
    happens: named inside the ``try`` that removes it, so an interrupt (SIGTERM) as it is made leaves nothing."""
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
    """Yield a temporary path beside ``path`` (a link's target: see the module's docstring); on
    success move it onto ``path``. Missing folders are created and stale temporary files of gone
    gspo processes removed. On any exception (or interrupt) the temporary file is removed and
    ``path`` is left untouched.

    Raises:
        OutputError: ``path`` exists and ``overwrite`` is false (checked again, atomically, at the
            end), it is (or becomes) a device, FIFO or socket, a link refused, or it cannot be written.
    """
    target = _target(path, overwrite)
    with _temporary(target, _make_file) as tmp:
        try:
            yield tmp
            os.chmod(tmp, _new_file_mode(target))
            _into_place(tmp, target, overwrite)
        except OSError as e:
            raise _cannot_write(target, e) from None


def _identity(path: Path) -> tuple[int, int]:
    return (st := path.stat()).st_dev, st.st_ino


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
    ends = [_target(p, overwrite) for p in paths]
    if len({e.parent.resolve() for e in ends}) != 1 or any(e.name != t.name for e, t in zip(ends, targets)):
        raise OutputError(f"{' and '.join(map(str, targets))}: a link leads one to another folder or name; files "
                          "written together (a model and its weights) go through links only to one folder, same names")
    first = ends[0]
    with _temporary(first, functools.partial(os.mkdir, mode=0o700)) as folder:
        try:
            yield folder
            staged = [(folder / t.name, e) for t, e in zip(targets, ends) if (folder / t.name).exists()]
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
    with contextlib.suppress(OSError, ValueError, RuntimeError):  # RuntimeError: a loop of links
        return a.resolve() == b.resolve() or os.path.samefile(a, b)
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


def _reads(inputs: Mapping | Iterable, models: Iterable, wanted: bool) -> tuple[list, list]:
    """What the command reads, each as (path, how a message names it): the files, with (when
    ``wanted``: an output exists) the external data of each model, an input ending in .onnx
    counting as one; and the folders, named by their option when ``inputs`` maps options to paths."""
    pairs = inputs.items() if isinstance(inputs, Mapping) else ((None, p) for p in inputs)
    given = [(option, Path(p)) for option, p in pairs if p is not None]
    folders = [(p, f"{o}'s folder {p}" if o else f"the input folder {p}") for o, p in given if p.is_dir()]
    read = [(p, "an input file") for _, p in given if not p.is_dir()]
    if not wanted:
        return read, folders
    # imported here: importing gspo.ir loads gspo.ir.onnx_io, which writes through this module
    from gspo.ir.external import external_locations, read_header

    models = [Path(m) for m in models if m is not None]
    seen = {m.resolve() for m in models}
    models += [p for p, _ in read if p.suffix.lower() == ".onnx" and p.resolve() not in seen]
    for m in models:  # the files its tensors name (none: no regular file, or no model: loading it says so)
        if proto := None if _special(m) or not m.is_file() else read_header(m):
            read += [(m.parent / loc, f"the external data of {m}") for loc in external_locations(proto)]
    return read, folders


def _inside(out: Path, folder: Path) -> bool:
    """Whether ``out``, as named or where its links lead, is ``folder`` or inside it (at any depth,
    existing or not): one of its existing folders is ``folder``."""
    key = _identity(folder)
    ends = (Path(os.path.realpath(out.parent)) / out.name, Path(os.path.realpath(out)))
    return any(_identity(f) == key for end in ends for f in (end, *end.parents) if f.exists())


def _planned(outputs: Mapping, model_outputs: Collection[str]) -> list[tuple[str, Path, bool]]:
    """Each output to write as (its option, its path, whether it is written for certain): a
    model's output adds its weights file ``OUT.data`` (written when the weights pass ~1.8 GB)."""
    planned = []
    for name, p in [(name, p) for name, p in outputs.items() if p is not None]:
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
    """Refuse the output ``out`` (option ``name``) as :func:`check_outputs` says (``read``: :func:`_reads`)."""
    files, folders = read
    for i, what in files:
        if _same(out, i):
            raise OutputError(f"{out}: {name} is {what}; choose another path")
    for folder, what in folders:
        if _inside(out, folder):
            raise OutputError(f"{out}: {name} is inside {what}, which gspo reads; choose a path outside it")
    label = f"{name} " if not certain else ""
    end = _written(out, label)
    _refuse_special(out, label)
    if out.is_dir():
        raise OutputError(f"{out}: is a folder ({name} needs a file path)")
    if (out.exists() or out.is_symlink()) and not force:
        why = "" if certain else f" (gspo writes {name} there when the weights pass 1.8 GB)"
        raise OutputError(f"{out}: exists{why}; use --force to overwrite it")
    _writable_folder(end)


def check_outputs(outputs: Mapping[str, str | os.PathLike | None], inputs=(), force: bool = False, *,
                  models: Iterable = (), model_outputs: Collection[str] = ()) -> None:
    """Refuse, before any work, outputs that would lose data or could not be written.

    ``outputs`` maps an option name (``-o``, ``--report``) to its path (``None``: not given);
    ``inputs`` are the files and folders read (or a mapping of their options to them, which the
    messages name), ``models`` the ONNX models among them (an input ending in ``.onnx`` counts as
    one too): their external-data files are inputs as well. The outputs named in
    ``model_outputs`` are models, whose weights may go to ``OUT.data`` beside them: that path is
    checked like ``OUT``. Refused, in one line: an output that is an input, an input's external
    data or another output (also through a link), or is inside an input folder (at any depth,
    as named or where its links lead, existing or not); a device, FIFO or socket, a link into
    /proc or a dangling link (also with ``force``); a folder, or a path ending in '/'; an
    existing file without ``force``; a name or path too long for the file system; a path whose
    folder cannot be created or written. Stale temporary files of gone processes are removed.
    """
    planned = _planned(outputs, model_outputs)
    checked: list[tuple[str, Path]] = []
    try:
        planned = [(name, out, certain) for name, out, certain in planned if _fits(out, certain)]
        wanted = any(out.exists() or out.is_symlink() for _, out, _ in planned)
        read = _reads(inputs, models, wanted)
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
