"""Every model shipped in the onnx wheel survives a load/save round trip through gspo.ir."""

from __future__ import annotations

import pytest

from tests.ir.conformance import SOURCES, Skip, check, collect


def _params():
    for source in SOURCES:
        for case in collect(source):
            yield pytest.param(case, id=f"{source}/{case.name}")


@pytest.mark.parametrize("case", list(_params()))
def test_round_trip_reproduces_onnxruntime_outputs(case):
    try:
        check(case)
    except Skip as s:
        pytest.skip(str(s))


def test_the_real_model_zoo_graphs_all_pass():
    """The nine model-zoo graphs (ResNet-50, Inception v1/v2, DenseNet-121, ...) never skip."""
    cases = collect("light")
    assert len(cases) == 9
    for case in cases:
        check(case)
