"""Every test of the gate times its models on the virtual clock (tests/regress/util.py)."""

from __future__ import annotations

import pytest

from tests.regress.util import virtual_timing


@pytest.fixture(autouse=True)
def _virtual_clock():
    with virtual_timing():
        yield
