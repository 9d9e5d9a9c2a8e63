"""The estimator is pure: estimating and fitting never load the runtime, the partitioner or the zoo."""

from __future__ import annotations

import subprocess
import sys

_CHECK = """
import sys
import gspo.costmodel, gspo.costmodel.estimate, gspo.costmodel.fit, gspo.costmodel.features
import gspo.costmodel.layout, gspo.costmodel.poly, gspo.costmodel.profile
loaded = [m for m in ("gspo.runtime", "onnxruntime", "gspo.partition", "gspo.zoo") if m in sys.modules]
print(",".join(loaded))
"""


def test_the_estimator_and_the_fit_do_not_import_measurement():
    out = subprocess.run([sys.executable, "-c", _CHECK], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_calibration_measures_through_the_runtime():
    out = subprocess.run([sys.executable, "-c", _CHECK + "import gspo.costmodel.calibrate\n"
                          "print('gspo.runtime' in sys.modules)"], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True"]
