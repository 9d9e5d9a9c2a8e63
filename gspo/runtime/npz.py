"""The user's inputs (``--inputs FEEDS.npz``): each array of the ``.npz`` is known from its
headers (name, dtype, shape, the size the zip declares) before any of its data is read or
inflated, so that a small compressed file declaring gigabytes is refused by what it declares.
"""

from __future__ import annotations

import math
import os
import stat
import zipfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import IO

import numpy as np

from gspo.errors import GspoError
from gspo.errors import first_line as _first_line

__all__ = ["NpzMember", "NpzInputs", "read_npz", "declared", "entry_name", "write_npz"]

_NPY_MAGIC = b"\x93NUMPY"
_SUFFIX = ".npy"


@dataclass(frozen=True)
class NpzMember:
    """One array of an ``.npz`` file as its headers declare it."""

    member: str
    shape: tuple[int, ...]
    dtype: np.dtype
    declared: int  # the uncompressed bytes the zip header declares (the .npy header included)

    @property
    def nbytes(self) -> int:
        """Bytes the array takes once read."""
        return math.prod(self.shape) * self.dtype.itemsize


def _open(path: str) -> IO[bytes]:
    """``path`` opened for reading, refused unless a regular file (a FIFO is not waited on)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise GspoError(f"{path}: no such file") from None
    except OSError as e:
        raise GspoError(f"{path}: cannot read inputs: {e.strerror or e}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise GspoError(f"{path}: not a regular file (a directory, device or FIFO); --inputs wants an .npz file")
    return os.fdopen(fd, "rb")


def _zip(path: str, f: IO[bytes]) -> zipfile.ZipFile:
    try:
        return zipfile.ZipFile(f)
    except (zipfile.BadZipFile, OSError, ValueError):
        f.seek(0)
        if f.read(len(_NPY_MAGIC)) == _NPY_MAGIC:
            raise GspoError(f"{path}: cannot read inputs: a single .npy array, not an .npz of named inputs "
                            "(write one with numpy.savez(path, name=array, ...))") from None
        raise GspoError(f"{path}: cannot read inputs: not an .npz file (a zip of .npy arrays, as numpy.savez writes)") from None


def _header(path: str, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> NpzMember:
    """The member's .npy header (only its first bytes are inflated)."""
    name = info.filename[:-len(_SUFFIX)]
    try:
        with zf.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, _, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, _, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                raise ValueError(f".npy format version {version[0]}.{version[1]} is not read here")
            header_bytes = f.tell()
    except Exception as e:  # zlib, zipfile and numpy header errors alike
        raise GspoError(f"{path}: array {name!r} cannot be read: {_first_line(e)}") from None
    member = NpzMember(info.filename, tuple(int(d) for d in shape), np.dtype(dtype), info.file_size)
    if member.dtype.hasobject:
        raise GspoError(f"{path}: array {name!r} holds Python objects (pickled data), which gspo does not load")
    if info.file_size < header_bytes + member.nbytes:
        raise GspoError(f"{path}: array {name!r} is truncated: {list(member.shape)} {member.dtype} takes "
                        f"{member.nbytes} bytes, the file holds {info.file_size - header_bytes}")
    return member


def _members(path: str) -> dict[str, NpzMember]:
    with _open(path) as f, _zip(path, f) as zf:
        out = {}
        for info in zf.infolist():
            if not info.filename.endswith(_SUFFIX):
                raise GspoError(f"{path}: member {info.filename!r} is not an .npy array; "
                                "--inputs wants an .npz file (numpy.savez)")
            out[info.filename[:-len(_SUFFIX)]] = _header(path, zf, info)
        return out


class NpzInputs(Mapping[str, np.ndarray]):
    """The arrays of an ``.npz`` file by name, each read when asked for; :attr:`members` holds
    what the headers declare (read when the object is made).

    Raises:
        GspoError: the file is not an ``.npz`` of plain arrays (one line saying what it is).
    """

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self.members = _members(self.path)

    def __getitem__(self, name: str) -> np.ndarray:
        member = self.members[name]
        with _open(self.path) as f, _zip(self.path, f) as zf:
            try:
                info = zf.getinfo(member.member)
            except KeyError:
                info = None
            if info is None or _header(self.path, zf, info) != member:
                raise GspoError(f"{self.path}: changed while read (array {name!r})")
            try:
                with zf.open(info) as data:
                    return np.lib.format.read_array(data, allow_pickle=False)
            except Exception as e:
                raise GspoError(f"{self.path}: array {name!r} cannot be read: {_first_line(e)}") from None

    def __iter__(self) -> Iterator[str]:
        return iter(self.members)

    def __len__(self) -> int:
        return len(self.members)


def read_npz(path: str | os.PathLike) -> NpzInputs:
    """The arrays of an ``.npz`` file by name, their headers checked, their data not yet read
    (see :func:`gspo.runtime.inputs.check_inputs`, which reads them once checked against a model)."""
    return NpzInputs(path)


def declared(feeds: Mapping[str, np.ndarray]) -> Mapping[str, tuple[tuple[int, ...], np.dtype]] | None:
    """Shapes and dtypes of ``feeds`` known without reading them (``None`` when not an .npz)."""
    if isinstance(feeds, NpzInputs):
        return {k: (m.shape, m.dtype) for k, m in feeds.members.items()}
    return None


#: What an archive entry may not hold, percent-encoded ('%' first, so that the name comes back).
_ENTRY_ESCAPES = (("%", "%25"), ("/", "%2F"), ("\\", "%5C"), ("\0", "%00"), ("..", "%2E%2E"))


def entry_name(name: str) -> str:
    """The ``.npz`` entry (without ``.npy``) that holds the array named ``name``: the name with
    ``%``, ``/``, ``\\``, NUL and ``..`` percent-encoded, so that no entry names a path
    (``urllib.parse.unquote`` gives the name back); a plain name is its own entry."""
    for raw, escaped in _ENTRY_ESCAPES:
        name = name.replace(raw, escaped)
    return name


def write_npz(f: IO[bytes], arrays: Mapping[str, np.ndarray]) -> dict[str, str]:
    """Write ``arrays`` to the open file ``f`` as an ``.npz``, each under :func:`entry_name`;
    returns the names whose entry differs from them (name -> entry)."""
    entries = {name: entry_name(name) for name in arrays}
    # as numpy.savez writes it, without its keyword arguments (an output may be named "file")
    with zipfile.ZipFile(f, mode="w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, array in arrays.items():
            with zf.open(entries[name] + _SUFFIX, "w", force_zip64=True) as out:
                np.lib.format.write_array(out, np.asanyarray(array), allow_pickle=True)  # as savez: strings
    return {name: e for name, e in entries.items() if e != name}
