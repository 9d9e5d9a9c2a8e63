"""The CPU's instruction-set features (:func:`cpu_flags`, the one place gspo reads them; tests
replace it) and what int8 needs of them (:func:`int8_saturates`).

onnxruntime runs int8 products of uint8 activations and int8 weights ("u8s8") on x86-64 with
VNNI (``vpdpbusd``: four products summed straight into 32 bits) where the CPU has it: AVX512-VNNI,
AVX-VNNI or AMX. Without it (AVX2, AVX-512 without VNNI, SSE4.1) its kernels use ``vpmaddubsw``,
which sums each pair of adjacent u8*s8 products into a *saturating* 16-bit integer: 255 * 127 * 2
= 64770 does not fit in 32767, and the sum is clamped (onnxruntime's quantization documentation:
"try reduce_range"). With weights of 7 bits (``reduce_range``, [-64, 64]) a pair is at most
255 * 64 * 2 = 32640 and never saturates. Other CPUs (ARM) do not have the problem.
"""

from __future__ import annotations

import functools
import platform
from collections.abc import Collection
from pathlib import Path

__all__ = ["VNNI_FLAGS", "cpu_flags", "has_vnni", "int8_saturates"]

#: The ``/proc/cpuinfo`` flags of the instructions that compute u8*s8 products in 32 bits.
VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni", "amx_int8"})
_X86 = frozenset({"x86_64", "amd64", "i386", "i686", "x86"})


@functools.lru_cache(maxsize=1)
def _read_flags(path: str = "/proc/cpuinfo") -> frozenset[str]:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86's name for them, ARM's
            return frozenset(value.split())
    return frozenset()


def cpu_flags() -> frozenset[str]:
    """The instruction-set flags of this machine's CPU as ``/proc/cpuinfo`` lists them (its first
    processor's; ``avx2``, ``avx512_vnni`` ...), read once; empty where they cannot be read."""
    return _read_flags()


def has_vnni(flags: Collection[str] | None = None) -> bool:
    """Whether ``flags`` (default: :func:`cpu_flags`) include an instruction of :data:`VNNI_FLAGS`."""
    return bool(VNNI_FLAGS.intersection(cpu_flags() if flags is None else flags))


def int8_saturates() -> bool:
    """Whether onnxruntime's u8s8 int8 kernels can saturate on this CPU: an x86 CPU without VNNI,
    or one whose flags cannot be read (assumed to lack it: 7-bit weights are right everywhere)."""
    return platform.machine().lower() in _X86 and not has_vnni()
