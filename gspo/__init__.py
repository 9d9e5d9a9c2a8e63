"""gspo: joint graph substitution and inter-operator parallelism for ONNX models (GSPO, DAC'24).

The package is a library first: ``gspo.ir`` loads and saves models, ``gspo.zoo`` builds the
paper's model set, ``gspo.runtime`` runs and compares models with onnxruntime.
"""

from gspo.errors import GspoError

__version__ = "0.1.0"
__all__ = ["GspoError", "__version__"]
