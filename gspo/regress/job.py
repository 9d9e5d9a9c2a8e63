"""One model's whole job: optimize (or reuse the stored result), check, time, judge.

A :class:`Job` carries everything as bytes and plain data, so that it runs the same in this
process (the local engine) or on any node of a cluster (the Ray engine): optimize and the
timing of a model always happen in one process on one machine, and a ratio is never taken
across two machines. A model-level failure never raises: it is the result's verdict
(``ERROR`` with the reason, or ``NOT EQUIVALENT``). A model set entry with reduced precision is
judged by its accuracy budget instead of equivalence (:mod:`gspo.regress.accuracy`): a candidate
outside it is ``INACCURATE``.
"""

from __future__ import annotations

import math
import platform
import shutil
import tempfile
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

import numpy as np

from gspo.errors import GspoError
from gspo.regress.modelset import ModelSpec
from gspo.regress.stats import UNDECIDED, Decision, decide, noise, noise_limit

__all__ = ["Job", "Judgement", "Result", "run_job", "judge_rounds", "FAILING", "VERDICTS", "ERROR", "INACCURATE",
           "exit_code"]

OK, FASTER, SUSPICIOUS, NEW = "ok", "faster", "suspicious", "no baseline"
REGRESSED, SLOWER, NOT_EQUIVALENT, ERROR = "REGRESSED", "SLOWER THAN SOURCE", "NOT EQUIVALENT", "ERROR"
#: A reduced-precision candidate whose error on the validation data is outside the entry's budget.
INACCURATE = "INACCURATE"
RECORDED = "recorded"
#: Every verdict, most severe first.
VERDICTS = (ERROR, NOT_EQUIVALENT, INACCURATE, SLOWER, REGRESSED, SUSPICIOUS, NEW, FASTER, OK, RECORDED)
#: The verdicts that fail the gate (exit 1).
FAILING = (NOT_EQUIVALENT, INACCURATE, SLOWER, REGRESSED)
#: Random input sets the candidate is checked on when the set gives no inputs.
CHECK_RUNS = 2


@dataclass
class Job:
    """A model's job: its spec, the source model's bytes, the inputs, the baseline artifact's
    model (``None``: record only, or no baseline stored), a stored candidate to reuse."""

    spec: ModelSpec
    source: bytes
    inputs: dict[str, np.ndarray] | None = None
    baseline: bytes | None = None
    #: A stored optimized model, its report and its cache key (reused when the key is this job's).
    cached: tuple[bytes, dict, str] | None = None
    measure: bool = True
    keep_candidate: bool = False
    #: The files of the model's external weights, by their location beside it: their bytes (a
    #: job sent to a cluster), or the path of the user's file (copied beside the model's copy).
    external: dict[str, str | bytes] = field(default_factory=dict)
    #: One sha256 of those files (part of the source's identity: new weights are a new model).
    weights_sha256: str = ""
    #: The user's model file (or ``zoo model 'name'``): what messages name instead of the copy.
    origin: str = ""
    #: A reduced-precision entry's calibration and validation data, by kind: the user's path (a job
    #: run here), or the files' bytes by name (a job sent to a cluster).
    data: dict[str, str | dict[str, bytes]] = field(default_factory=dict)
    #: One sha256 of that data (part of the cache key: new data may choose another precision).
    data_sha256: str = ""


@dataclass
class Result:
    """A model's outcome: the verdict (and why), each comparison's decision, every round's
    samples, the seconds spent, where it ran, and (when asked for) the candidate to store."""

    name: str
    verdict: str
    reason: str = ""
    threshold: float = 0.0
    vs_baseline: Decision | None = None
    vs_source: Decision | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)
    max_rel_err: float | None = None
    #: The round-to-round noise of the control pair (:func:`~gspo.regress.stats.noise`).
    noise: float | None = None
    reused: bool = False
    seconds: dict[str, float] = field(default_factory=dict)
    node: str = ""
    key: str = ""
    source_sha256: str = ""
    versions: dict = field(default_factory=dict)
    machine: dict = field(default_factory=dict)
    candidate: bytes | None = None
    report: dict | None = None
    #: A reduced-precision entry's accuracy (:func:`~gspo.regress.accuracy.judge_entry`).
    accuracy: dict | None = None

    @property
    def failed(self) -> bool:
        """Whether this verdict fails the gate."""
        return self.verdict in FAILING

    def to_json(self) -> dict:
        """The result as JSON (without the candidate's bytes; the report only as its summary)."""
        out = {k: v for k, v in self.__dict__.items()
               if k not in ("candidate", "report", "vs_baseline", "vs_source", "accuracy")}
        out["vs_baseline"] = self.vs_baseline.to_json() if self.vs_baseline else None
        out["vs_source"] = self.vs_source.to_json() if self.vs_source else None
        if self.report:
            out["optimize"] = {k: self.report.get(k) for k in ("chosen", "substitutions", "streams", "speedup",
                                                               "verdict", "total_seconds")}
        if self.accuracy is not None:
            out["accuracy"] = self.accuracy
        return out


def exit_code(results: list[Result]) -> int:
    """0 when no model fails, 1 when one does, 2 when one could not be optimized or timed."""
    if any(r.verdict == ERROR for r in results):
        return 2
    return 1 if any(r.failed for r in results) else 0


def _optimize(job: Job, source_path: Path, data: dict[str, str]) -> tuple[bytes, dict]:
    from gspo.rules import DEFAULT_RULES
    from gspo.search import optimize

    options = dict(job.spec.options)
    if job.spec.precision:
        options.update(precision=job.spec.precision, max_error=job.spec.max_error, **data)
    if job.spec.exclude_rules:
        options["rules"] = tuple(r for r in DEFAULT_RULES if r.name not in job.spec.exclude_rules)
    result = optimize(source_path, input_shapes=job.spec.input_shapes or None, inputs=job.inputs, **options)
    out = source_path.parent.parent / "candidate.onnx"
    result.save(out, overwrite=True)
    if out.with_name(out.name + ".data").exists():
        raise GspoError("the optimized model keeps its weights in a .data file (over 1.8 GB): the gate cannot "
                        "store it as one artifact")
    return out.read_bytes(), result.report.to_json()


def _feeds(job: Job, source) -> list[dict[str, np.ndarray]]:
    from gspo.runtime import random_inputs
    from gspo.runtime.inputs import check_inputs

    if job.inputs is not None:
        return [check_inputs(job.inputs, source, f"model {job.spec.name!r} inputs")]
    seed = job.spec.options.get("seed", 0)
    return [random_inputs(source, seed + i) for i in range(CHECK_RUNS)]


def _judge(timer, rounds: int, threshold: float, has_baseline: bool) -> tuple[dict, Decision | None, Decision]:
    """Time ``rounds`` rounds, decide; extend once when a comparison is undecided."""
    samples = timer(rounds)
    for final in (False, True):
        vs_base = decide(samples["baseline"], samples["candidate"], threshold, final=final) if has_baseline else None
        vs_src = decide(samples["source"], samples["candidate"], threshold, final=final)
        if final or UNDECIDED not in (vs_src.verdict, vs_base and vs_base.verdict):
            return samples, vs_base, vs_src
        more = timer(rounds)
        samples = {k: samples[k] + more[k] for k in samples}
    raise AssertionError("unreachable")


class Judgement(NamedTuple):
    """The verdict of a model's rounds, each comparison's decision, the samples, the noise."""

    verdict: str
    vs_baseline: Decision | None
    vs_source: Decision
    samples: dict
    noise: float


def judge_rounds(timer, rounds: int, threshold: float, has_baseline: bool = True) -> Judgement:
    """The verdict of paired rounds from ``timer(k) -> {"source", "baseline", "candidate": [k seconds]}``
    (pure given the timer: a scripted one in tests). Rounds too noisy to resolve ``threshold``
    (:func:`~gspo.regress.stats.noise`) are ``ERROR``, unless the slowdown is beyond the noise itself."""
    samples, vs_base, vs_src = _judge(timer, rounds, threshold, has_baseline)
    verdict = _verdict(vs_base, vs_src)
    control = samples["baseline"] if has_baseline else samples["candidate"]
    moved = noise(samples["source"], control)
    if has_baseline:
        # The two artifacts may hold a steadier ratio than the source does: the source runs as its
        # users run it (onnxruntime's default threads), the artifacts at their saved setting, and
        # a model of microseconds jitters on two threads by itself (tiny zoo models: 20-110%).
        moved = min(moved, noise(control, samples["candidate"]))
    decisive = vs_src if verdict == SLOWER or vs_base is None else vs_base
    clear = verdict in FAILING and math.log(decisive.ratio) > moved
    if moved > noise_limit(threshold) and not clear:
        verdict = ERROR
    return Judgement(verdict, vs_base, vs_src, samples, moved)


def _verdict(vs_base: Decision | None, vs_src: Decision) -> str:
    if vs_src.verdict == "slower":
        verdict = SLOWER
    elif vs_base is None:
        verdict = SUSPICIOUS if vs_src.verdict == SUSPICIOUS else NEW
    elif vs_base.verdict == "slower":
        verdict = REGRESSED
    elif SUSPICIOUS in (vs_base.verdict, vs_src.verdict):
        verdict = SUSPICIOUS
    else:
        verdict = FASTER if vs_base.verdict == FASTER else OK
    return verdict


def _equivalent(bench, feeds, result: Result) -> bool:
    """Whether the candidate's outputs are the source's (else the result is ``NOT EQUIVALENT``)."""
    check = bench.check("source", "candidate", feeds)
    result.max_rel_err = check.max_norm_rel
    if not check.equivalent:
        bad = check.worst
        result.verdict, result.reason = NOT_EQUIVALENT, f"output {bad.name} differs from the source's ({bad.reason})"
    return check.equivalent


def _accurate(job: Job, source_path: Path, source_graph, candidate: bytes, data: dict[str, str],
              result: Result) -> bool:
    """Whether a reduced-precision entry's candidate keeps its budget (else ``INACCURATE``, the
    broken limits the reason); the candidate's and the baseline's accuracy go into the result."""
    from gspo.regress.accuracy import accuracy_reason, judge_entry

    chosen = ((result.report or {}).get("precision") or {}).get("chosen")
    result.accuracy = judge_entry(job.spec, source_path, source_graph, candidate, job.baseline, data, chosen)
    if result.accuracy["candidate"]["holds"]:
        return True
    result.verdict, result.reason = INACCURATE, accuracy_reason(result.accuracy)
    return False


def _measure(job: Job, source_graph, candidate: bytes, result: Result, judged: bool = False) -> None:
    """Check the candidate equivalent to the source (unless its accuracy was ``judged``), then time."""
    from gspo.ir import load_bytes
    from gspo.regress.timing import Bench

    shapes = job.spec.input_shapes or None
    versions = {"source": (source_graph, 1), "candidate": (load_bytes(candidate, shapes, label="candidate"), None)}
    if job.baseline is not None:
        versions["baseline"] = (load_bytes(job.baseline, shapes, label="baseline artifact"), None)
    feeds = _feeds(job, source_graph)
    with Bench(versions) as bench:
        if not judged and not _equivalent(bench, feeds, result):
            return
        j = judge_rounds(lambda k: bench.rounds(feeds[0], k), job.spec.rounds, job.spec.threshold,
                         job.baseline is not None)
    result.verdict, result.vs_baseline, result.vs_source, result.samples = j.verdict, j.vs_baseline, j.vs_source, j.samples
    result.noise = j.noise
    if j.verdict == ERROR:
        pair = "source/baseline" if j.vs_baseline is not None else "source/candidate"
        result.reason = (f"too noisy to measure: the {pair} ratio moved {100 * j.noise:.0f}% between rounds "
                         f"(interquartile range; {100 * noise_limit(job.spec.threshold):.0f}% at most for a "
                         f"{100 * job.spec.threshold:g}% threshold); rerun on a quieter machine")
    else:
        result.reason = _reason(j.verdict, j.vs_baseline, j.vs_source)


def _reason(verdict: str, vs_base: Decision | None, vs_src: Decision) -> str:
    d = vs_src if verdict == SLOWER or vs_base is None else vs_base
    what = "source" if d is vs_src else "baseline"
    return (f"x{d.ratio:.3f} the {what}'s latency (95% CI {d.low:.3f}-{d.high:.3f}), slower in {d.slower} of "
            f"{d.rounds} rounds (p={d.p_slower:.2g}), threshold {100 * d.threshold:g}%")


def _identify(job: Job, result: Result) -> None:
    """The source's sha256, this node's versions and machine, and the job's cache key."""
    from gspo.regress.store import cache_key, machine, sha256, versions

    result.source_sha256 = sha256(job.source)
    if job.weights_sha256:  # the model with its external weights
        result.source_sha256 = sha256(f"{result.source_sha256}+{job.weights_sha256}".encode())
    result.versions, result.machine = versions(), machine()
    inputs_sha = None
    if job.inputs is not None:
        inputs_sha = sha256(b"".join(k.encode() + np.ascontiguousarray(v).tobytes() + str(v.dtype).encode()
                                     for k, v in sorted(job.inputs.items())))
    precision = None
    if job.spec.precision:  # only then: an entry without it keeps its key
        precision = {"precision": list(job.spec.precision), "max_error": job.spec.max_error.spec,
                     "data": job.data_sha256}
    result.key = cache_key(result.source_sha256, job.spec.input_shapes, inputs_sha, job.spec.options,
                           job.spec.exclude_rules, result.versions, precision)


def _place_source(job: Job, tmp: Path) -> Path:
    """The source model written into ``tmp/source/`` under the user's file name, with its
    external weights beside it as they lie beside the user's (bytes written, or the user's file
    copied: onnx's checker refuses external data reached through a symbolic link out of the
    model's folder or a file of several hard links)."""
    folder = tmp / "source"
    folder.mkdir()
    name = Path(job.origin).name if job.spec.path is not None and job.origin else f"{job.spec.name}.onnx"
    source_path = folder / name
    source_path.write_bytes(job.source)
    for loc, data in job.external.items():
        target = folder / loc
        target.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(data, bytes):
            target.write_bytes(data)
        else:
            shutil.copyfile(data, target)
    return source_path


def _in_user_terms(message: str, job: Job, source_path: Path | None) -> str:
    """``message`` (its first line) naming the user's file where it names the copy of it."""
    lines = message.strip().splitlines()
    text = lines[0] if lines else ""
    if source_path is not None and job.origin:
        text = text.replace(str(source_path), job.origin)
        if job.spec.path is not None:
            text = text.replace(str(source_path.parent), str(job.spec.path.parent))
    return text[:300]


def run_job(job: Job) -> Result:
    """Run one model's job; every failure becomes the result's verdict (never an exception)."""
    from gspo.search import OptimizeError

    result = Result(job.spec.name, ERROR, threshold=job.spec.threshold, node=platform.node())
    began = time.perf_counter()
    source_path = None
    try:
        with tempfile.TemporaryDirectory(prefix="gspo-regress-") as tmp:
            source_path = _place_source(job, Path(tmp))
            _run(job, source_path, result, began)
    except OptimizeError as e:
        result.verdict = NOT_EQUIVALENT
        result.reason = f"optimize refused its result: {_in_user_terms(str(e), job, source_path)}"
    except GspoError as e:
        result.verdict, result.reason = ERROR, _in_user_terms(str(e), job, source_path)
    except MemoryError:
        result.verdict, result.reason = ERROR, "out of memory"
    except Exception as e:  # a bug in gspo: the model is ERROR (exit 2), never ok
        tb = traceback.extract_tb(e.__traceback__)[-1]
        result.verdict, result.reason = ERROR, (f"internal error ({type(e).__name__}: "
                                                f"{_in_user_terms(str(e), job, source_path)} at "
                                                f"{Path(tb.filename).name}:{tb.lineno})")
    result.seconds["total"] = time.perf_counter() - began
    return result


def _run(job: Job, source_path: Path, result: Result, began: float) -> None:
    from gspo.ir import load
    from gspo.regress.accuracy import place_data

    _identify(job, result)
    data = place_data(job.data, source_path.parent.parent)
    if job.cached is not None and job.cached[2] == result.key:
        candidate, result.report, _ = job.cached
        result.reused = True
    else:
        candidate, result.report = _optimize(job, source_path, data)
    result.seconds["optimize"] = time.perf_counter() - began
    if job.keep_candidate:
        result.candidate = candidate
    if not job.measure:
        result.verdict = RECORDED
        return
    source_graph = load(source_path, job.spec.input_shapes or None)
    precise = bool(job.spec.precision)
    if precise and not _accurate(job, source_path, source_graph, candidate, data, result):
        return
    _measure(job, source_graph, candidate, result, judged=precise)
