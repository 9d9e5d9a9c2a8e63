"""The CPU's flags, read from /proc/cpuinfo once, and whether int8's u8s8 kernels saturate there:
every CPU is injected (a file or a flag set), none is needed."""

from __future__ import annotations

import platform

import pytest

from gspo.runtime import cpu_features
from gspo.runtime.cpu_features import _read_flags, cpu_flags, has_vnni, int8_saturates

#: Lines of /proc/cpuinfo: an AVX2-only EPYC (Zen 2), an AVX-512 Xeon without VNNI (Skylake-SP),
#: one with it (Zen 4), a hybrid with AVX-VNNI only (Alder Lake), and ARM (its "Features").
ZEN2 = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx f16c fma bmi1 avx2 bmi2 sha_ni clzero"
SKYLAKE_SP = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma avx512f avx512dq avx512cd avx512bw avx512vl"
ZEN4 = ZEN2 + " avx512f avx512bw avx512vl avx512_bf16 avx512_vnni avx512_bitalg"
ALDER_LAKE = "fpu sse sse2 ssse3 sse4_1 sse4_2 avx avx2 fma avx_vnni"
SAPPHIRE_RAPIDS = SKYLAKE_SP + " amx_bf16 amx_tile amx_int8"


def _cpuinfo(flags: str, key: str = "flags") -> str:
    one = f"processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: some cpu\n{key}\t\t: {flags}\nbugs\t\t: x\n\n"
    return one + one.replace(": 0", ": 1", 1)


@pytest.mark.parametrize("flags, vnni", [(ZEN2, False), (SKYLAKE_SP, False), (ZEN4, True), (ALDER_LAKE, True),
                                         (SAPPHIRE_RAPIDS, True)])
def test_the_flags_of_the_first_processor_are_read_and_vnni_found_in_them(tmp_path, flags, vnni):
    path = tmp_path / "cpuinfo"
    path.write_text(_cpuinfo(flags))
    read = _read_flags.__wrapped__(str(path))
    assert read == frozenset(flags.split())
    assert has_vnni(read) is vnni


def test_arm_features_are_read_and_an_unreadable_file_gives_no_flags(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(_cpuinfo("fp asimd evtstrm aes asimddp", key="Features"))
    assert _read_flags.__wrapped__(str(path)) == {"fp", "asimd", "evtstrm", "aes", "asimddp"}
    assert _read_flags.__wrapped__(str(tmp_path / "missing")) == frozenset()
    path.write_text("processor\t: 0\n")
    assert _read_flags.__wrapped__(str(path)) == frozenset()


def test_this_machines_flags_are_read_once():
    assert cpu_flags() is cpu_flags()
    if platform.system() == "Linux" and platform.machine() == "x86_64":
        assert {"sse2", "ssse3"} <= cpu_flags()  # every x86-64 CPU gspo runs on has them


@pytest.mark.parametrize("machine, flags, saturates", [
    ("x86_64", ZEN2, True), ("x86_64", SKYLAKE_SP, True), ("x86_64", ZEN4, False), ("x86_64", ALDER_LAKE, False),
    ("x86_64", SAPPHIRE_RAPIDS, False),
    ("x86_64", "", True),  # flags that cannot be read: assumed to lack VNNI (7-bit weights are right anywhere)
    ("aarch64", "fp asimd asimddp", False),  # no vpmaddubsw, nothing saturates
])
def test_int8_saturates_on_x86_without_vnni_only(monkeypatch, machine, flags, saturates):
    monkeypatch.setattr(cpu_features, "cpu_flags", lambda: frozenset(flags.split()))
    monkeypatch.setattr(cpu_features.platform, "machine", lambda: machine)
    assert int8_saturates() is saturates
