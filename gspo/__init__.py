"""gspo: joint graph substitution and inter-operator parallelism for ONNX models (GSPO, DAC'24).

The package is a library first: ``gspo.ir`` loads and saves models, ``gspo.zoo`` builds the
paper's model set, ``gspo.runtime`` runs and compares models with onnxruntime.
"""

from gspo.errors import GspoError

__version__ = "0.1.0"
__all__ = ["GspoError", "InferenceSession", "__version__", "optimize"]


def __getattr__(name: str):
    """``gspo.InferenceSession`` (:class:`gspo.runtime.deploy.InferenceSession`), imported on
    first use: ``import gspo`` does not load onnxruntime."""
    if name == "InferenceSession":
        from gspo.runtime.deploy import InferenceSession

        return InferenceSession
    raise AttributeError(f"module 'gspo' has no attribute {name!r}")


def optimize(model, config=None, **options):
    """Optimize an ONNX model (path or graph) with ``config`` (an
    :class:`~gspo.search.OptimizeConfig`) and keyword options: see :func:`gspo.search.driver.optimize`.

    Example:
        >>> import gspo                                          # doctest: +SKIP
        >>> result = gspo.optimize("model.onnx", time_budget=60)  # doctest: +SKIP
        >>> result.save("fast.onnx"); result.report["speedup"]    # doctest: +SKIP
    """
    from gspo.search.driver import optimize as _optimize

    return _optimize(model, config, **options)
