"""``gspo regress``: the CI gate that guards the latency a model set ships with.

- :mod:`~gspo.regress.modelset`: the model set (JSON), checked in full before any work;
- :mod:`~gspo.regress.stats`: the decision (paired rounds in, a verdict out; pure);
- :mod:`~gspo.regress.timing`: paired interleaved timing through gspo's timing harness;
- :mod:`~gspo.regress.job`: one model's whole job (optimize or reuse, check, time, judge);
- :mod:`~gspo.regress.store`: the artifact store (``--record`` / ``--against``) and its cache key;
- :mod:`~gspo.regress.engines`: local, or one Ray task per model;
- :mod:`~gspo.regress.gate`: the driver; :mod:`~gspo.regress.report`: JSON, JUnit, Markdown, plot;
- :mod:`~gspo.regress.estimate`: the deterministic estimate check (``--estimate``).
"""

from gspo.regress.estimate import EstimateRow, read_baseline, run_estimate, write_baseline
from gspo.regress.gate import Engine, GateRun, GateSettings, run_gate
from gspo.regress.job import FAILING, VERDICTS, Job, Result, judge_rounds, run_job
from gspo.regress.modelset import ModelSet, ModelSpec, load_modelset
from gspo.regress.stats import ALPHA, THRESHOLD, Decision, decide

__all__ = [
    "ALPHA",
    "Decision",
    "Engine",
    "EstimateRow",
    "FAILING",
    "GateRun",
    "GateSettings",
    "Job",
    "ModelSet",
    "ModelSpec",
    "Result",
    "THRESHOLD",
    "VERDICTS",
    "decide",
    "judge_rounds",
    "load_modelset",
    "read_baseline",
    "run_estimate",
    "run_gate",
    "run_job",
    "write_baseline",
]
