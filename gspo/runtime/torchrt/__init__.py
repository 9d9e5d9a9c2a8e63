"""The PyTorch runtime: gspo's scheduled graphs as torch calls on CUDA streams (or torch's CPU).

``status`` says whether torch can run on a CUDA device here (importable without torch); the op
table (``registry``, where the op modules ``ops_*`` register their ops with the ``helpers``, and
``ops``, which imports them all and looks an op up), ``convert``, ``streams`` and ``executor``
import torch and are imported only when the runtime is used:
``from gspo.runtime.torchrt.executor import TorchExecutor``.
"""

from gspo.runtime.torchrt.status import torch_status, torch_versions

__all__ = ["torch_status", "torch_versions"]
