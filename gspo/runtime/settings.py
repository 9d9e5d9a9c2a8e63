"""The run settings ``gspo optimize`` measured best, saved in the model (``gspo.settings``).

A model is often fastest at a thread count other than its backend's default: a small model on
one intra-op thread pays no thread hand-offs. ``gspo optimize`` times each whole-model contender
at the thread counts worth trying here (:func:`thread_counts`) and saves the winner's
:class:`RunSettings` in the model's metadata as JSON (``{"threads": 1}``); ``gspo run``,
``gspo bench`` (:func:`~gspo.runtime.executor.make_executor`) and the deploy API apply them
(:func:`saved_settings`, :func:`settings_from_metadata` for a session's own metadata map).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace

from gspo.errors import GspoError
from gspo.ir import Graph
from gspo.ir.features import nbytes
from gspo.ir.metadata import metadata_value, with_metadata
from gspo.runtime.session import SessionConfig

__all__ = ["MAX_SESSION_BYTES", "SETTINGS_KEY", "RunSettings", "applied", "saved_settings", "session_bytes",
           "settings_from_metadata", "thread_counts", "with_settings"]

#: The model metadata key holding the settings (JSON).
SETTINGS_KEY = "gspo.settings"
#: Most threads a saved setting may ask for (a corrupt value is refused, not obeyed).
MAX_THREADS = 1024


@dataclass(frozen=True)
class RunSettings:
    """How to run a model: ``threads`` intra-op threads (0: the backend's own choice; on
    OpenVINO, a fixed ``INFERENCE_NUM_THREADS`` beside the latency hint)."""

    threads: int = 0

    @property
    def is_default(self) -> bool:
        """Whether these are the backends' defaults (nothing to save)."""
        return self.threads == 0

    def to_json(self) -> str:
        """The metadata value (sorted keys, so equal settings give equal bytes)."""
        return json.dumps({"threads": self.threads}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunSettings:
        """Parse a metadata value.

        Raises:
            GspoError: one line naming what is wrong.
        """
        try:
            data = json.loads(text)
        except ValueError:
            raise GspoError(f"the settings saved in the model are not JSON: {text[:80]!r}") from None
        threads = data.get("threads", 0) if isinstance(data, dict) else None
        if isinstance(threads, bool) or not isinstance(threads, int) or not 0 <= threads <= MAX_THREADS:
            raise GspoError(f"the settings saved in the model are invalid (threads must be 0 to {MAX_THREADS}): "
                            f"{text[:80]!r}")
        return cls(threads)

    def session_config(self, base: SessionConfig = SessionConfig()) -> SessionConfig:
        """``base`` with these settings' thread count (unless ``base`` already sets one)."""
        if self.is_default or base.intra_op_threads:
            return base
        return replace(base, intra_op_threads=self.threads)

    def describe(self, backend: str = "ort") -> str:
        """The settings as the backend's users set them (for the report and the CLI)."""
        if backend == "openvino":
            fixed = f", INFERENCE_NUM_THREADS={self.threads}" if self.threads else ""
            return f"PERFORMANCE_HINT=LATENCY{fixed}"
        return f"intra_op_num_threads={self.threads}" if self.threads else "onnxruntime's default threads"


def thread_counts(cores: int | None = None) -> tuple[int, ...]:
    """The fixed thread counts worth timing beside the backend's default on this machine: one
    thread (no hand-offs) and every core."""
    cores = cores or os.cpu_count() or 1
    return (1,) if cores <= 1 else (1, cores)


def settings_from_metadata(metadata: Mapping[str, str]) -> RunSettings:
    """The settings in a model's metadata map (e.g. onnxruntime's ``custom_metadata_map``);
    the defaults when there are none.

    Raises:
        GspoError: the saved value is invalid.
    """
    text = metadata.get(SETTINGS_KEY)
    return RunSettings() if text is None else RunSettings.from_json(text)


def saved_settings(graph: Graph) -> RunSettings:
    """The settings saved in ``graph``'s model (the defaults when none)."""
    text = metadata_value(graph, SETTINGS_KEY)
    return RunSettings() if text is None else RunSettings.from_json(text)


def with_settings(graph: Graph, settings: RunSettings) -> Graph:
    """``graph`` carrying ``settings`` in its metadata (default settings remove the entry)."""
    return with_metadata(graph, SETTINGS_KEY, None if settings.is_default else settings.to_json())


def applied(graph: Graph, config: SessionConfig) -> SessionConfig:
    """``config`` with the settings saved in ``graph`` applied (a thread count given in
    ``config``, e.g. ``gspo bench --threads``, wins)."""
    return saved_settings(graph).session_config(config)


#: Each thread setting is one more session of the whole model, holding its own copy of the
#: weights and its own buffers for the values a run makes: an option whose tensors (inputs,
#: weights and every value computed, :func:`session_bytes`) take more than this gets no variants
#: (two or three sessions of a model this size would press on memory and on the final
#: comparison's time share; a model this large is not one that thread hand-offs slow down).
MAX_SESSION_BYTES = 256 * 2**20


def session_bytes(graph: Graph) -> int:
    """Bytes of every tensor of the graph of a known type and static shape: its inputs, its
    weights and each value its nodes compute (what one session of it holds at most, with its
    arena keeping each buffer; an unknown type or shape counted as empty)."""
    return sum(nbytes(v) for v in graph.values.values() if v.is_tensor)
