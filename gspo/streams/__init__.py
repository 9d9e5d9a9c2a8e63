"""Stream assignment (JOCG_P): pure graph algorithms, no I/O, no onnxruntime."""

from gspo.streams.assign import assign_streams, chain_cover, make_events
from gspo.streams.placement import Placement, PlacementError, split_runs
from gspo.streams.schedule import (
    Schedule,
    ScheduleError,
    apply_schedule,
    check_schedule,
    happens_before,
    node_id,
    segment_runs,
)

__all__ = [
    "Placement",
    "PlacementError",
    "split_runs",
    "Schedule",
    "ScheduleError",
    "apply_schedule",
    "assign_streams",
    "chain_cover",
    "check_schedule",
    "happens_before",
    "make_events",
    "node_id",
    "segment_runs",
]
