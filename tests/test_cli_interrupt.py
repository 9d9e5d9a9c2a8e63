"""Ctrl-C while gspo is still starting (issue 51, item 9): a SIGINT 0.2-0.5 s after ``gspo
optimize ...`` arrived while Python imported gspo's command modules, before the command line's
own handling began, and printed a 30-57-line traceback. It is one line and exit 130, as later.

No race with the clock: the child sends itself SIGINT at a known point of its start (while a
given module is imported, or when the command line's group installs its SIGTERM handler)."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

STOPPED = "gspo: stopped (SIGINT); nothing was written"

#: The child: SIGINT sent while ``AT`` is imported (or, for ``signal.signal``, when it is first
#: called, as the group does first thing), then gspo started as its console script starts it.
CHILD = textwrap.dedent("""
    import signal, sys

    AT, HOW = sys.argv[1], sys.argv[2]
    # as Python starts where Ctrl-C reaches it: a job a non-interactive shell runs in the
    # background inherits SIGINT ignored, and Python then leaves it so (the test's runner, not gspo)
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)

    class Interrupting:
        def find_spec(self, name, path=None, target=None):
            if name == AT:
                sys.meta_path.remove(self)
                signal.raise_signal(signal.SIGINT)
            return None

    if AT == "signal.signal":
        real = signal.signal

        def interrupting(*args):
            signal.signal = real
            previous = real(*args)
            signal.raise_signal(signal.SIGINT)
            return previous

        signal.signal = interrupting
    else:
        sys.meta_path.insert(0, Interrupting())
    sys.argv = ["gspo", "optimize", "model.onnx", "-o", "out.onnx"]
    if HOW == "script":  # what the console script `gspo` runs
        from gspo.cli import main
        sys.exit(main())
    import runpy  # python -m gspo

    runpy.run_module("gspo", run_name="__main__", alter_sys=True)
""")


def _interrupted(tmp_path, at: str, how: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CHILD, at, how], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)


@pytest.mark.parametrize("at", ["click", "numpy", "onnx", "gspo.cli.common", "gspo.cli.regress", "signal.signal"])
def test_ctrl_c_while_gspo_starts_is_one_line_and_exit_130(tmp_path, at):
    done = _interrupted(tmp_path, at, "script")
    assert "Traceback" not in done.stderr and "KeyboardInterrupt" not in done.stderr, done.stderr[-3000:]
    assert done.stderr.splitlines() == [STOPPED] and done.stdout == ""
    assert done.returncode == 130  # not 2: the interrupt came (else optimize refuses the missing model)
    assert not (tmp_path / "out.onnx").exists()


def test_ctrl_c_while_python_m_gspo_starts_is_one_line_and_exit_130(tmp_path):
    done = _interrupted(tmp_path, "numpy", "module")
    assert done.stderr.splitlines() == [STOPPED] and done.returncode == 130, done.stderr[-3000:]

