"""The thread setting as part of the final choice.

Each whole-model option on one stream and one backend (onnxruntime or OpenVINO) is also timed at
the thread counts worth trying here (:func:`~gspo.runtime.settings.thread_counts`: one thread,
every core), beside the backend's default, like any other option; the winner's setting is saved
in the model (:func:`settled`) and reported as the setting to use with the plain backend
(:func:`settings_report`).
"""

from __future__ import annotations

import dataclasses

from gspo.ir import Graph
from gspo.ir.metadata import metadata_value
from gspo.runtime.settings import (
    MAX_SESSION_BYTES,
    SETTINGS_KEY,
    RunSettings,
    session_bytes,
    thread_counts,
    with_settings,
)
from gspo.search.candidate import Candidate
from gspo.search.report_parts import SettingsReport
from gspo.timing import Deadline

__all__ = ["MAX_SESSION_BYTES", "THREADED_BACKENDS", "option_backend", "session_bytes", "settled", "settings_report",
           "thread_options"]

#: The backends whose thread count a setting fixes (``intra_op_num_threads``, ``INFERENCE_NUM_THREADS``).
THREADED_BACKENDS = ("ort", "openvino")
_NAMES = {"ort": "onnxruntime", "openvino": "OpenVINO"}


def option_backend(option: Candidate) -> str | None:
    """The one backend the whole option runs on (``None``: several, or on streams)."""
    if option.on_streams:
        return None
    if option.placement is None or option.placement.is_default:
        return "ort"
    used = option.placement.used()
    whole = len(used) == 1 and option.placement.counts(option.graph).get("ort", 0) == 0
    return used[0] if whole else None


def thread_options(options: list[Candidate], deadline: Deadline | None = None, cores: int | None = None,
                   max_bytes: int = MAX_SESSION_BYTES) -> list[Candidate]:
    """Each option on one stream and one threaded backend at every thread count worth trying
    (none once ``deadline`` has passed; none for an option whose tensors exceed ``max_bytes``,
    :data:`MAX_SESSION_BYTES`)."""
    if deadline is not None and deadline.expired():
        return []
    out = []
    for o in options:
        if o.settings.is_default and option_backend(o) in THREADED_BACKENDS and session_bytes(o.graph) <= max_bytes:
            out += [dataclasses.replace(o, label=f"{o.label}[threads={t}]", settings=RunSettings(t))
                    for t in thread_counts(cores)]
    return out


def settled(original: Graph, graph: Graph, settings: RunSettings, source: bytes | None) -> tuple[Graph, bytes | None]:
    """The result carrying the winner's ``settings``, and the source bytes to write when they
    still are the result (``None`` once the saved settings differ from the file's)."""
    graph = with_settings(graph, settings)
    same = metadata_value(graph, SETTINGS_KEY) == metadata_value(original, SETTINGS_KEY)
    return graph, source if same else None


def settings_report(option: Candidate) -> SettingsReport:
    """The winner's settings for the report: the thread count (0: the backend's default), the
    backend, and, when the result runs on one backend without streams, how to run it there
    without gspo."""
    backend = option_backend(option)
    s = option.settings
    advice = None
    if backend in THREADED_BACKENDS and not s.is_default:
        advice = f"run it with {_NAMES[backend]}: {s.describe(backend)}"
    return SettingsReport(s.threads, backend, not s.is_default, advice)
