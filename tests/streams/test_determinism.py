"""Stream assignment and partition cuts do not depend on Python's per-process hash seed."""

from __future__ import annotations

import os
import subprocess
import sys

SCRIPT = """
import hashlib
from gspo.partition import partition
from gspo.streams import assign_streams
from gspo.zoo import build
out = []
for name in ("nasnet_mobile", "inception_v3", "bert"):
    g = build(name, "tiny")
    s = assign_streams(g)
    out.append((s.streams, s.events, tuple(c.cut for c in partition(g, 16).cuts)))
print(hashlib.sha256(repr(out).encode()).hexdigest())
"""


def test_same_schedule_and_cuts_under_different_hash_seeds():
    digests = set()
    for seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, env=env, check=True)
        digests.add(proc.stdout.strip())
    assert len(digests) == 1
