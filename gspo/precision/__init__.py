"""Reduced precision (bf16, int8, weight-only int4; fp16, bf16 and tf32 on the GPU) as a searched dimension, within an accuracy budget the user states.

Opt-in only (``gspo optimize --precision bf16,int8 --max-error SPEC``): without it gspo keeps
exact fp32. The error is measured per output on validation data gspo did not tune on.
"""

#: The precisions ``--precision`` takes (fp32 is always a candidate; int4 is weight-only:
#: :mod:`gspo.precision.weights`).
PRECISIONS = ("fp32", "bf16", "int8", "int4", "fp16", "tf32")
#: The precisions only the GPU runs (``--device cuda --cuda-runtime torch``).
GPU_PRECISIONS = ("fp16", "tf32")
