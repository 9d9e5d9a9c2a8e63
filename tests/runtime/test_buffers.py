"""The pool of large outputs: an array is handed out again only once nobody else holds it."""

from __future__ import annotations

import weakref

import numpy as np

from gspo.runtime.buffers import OutputBuffers


def test_an_array_is_handed_out_again_once_its_holder_lets_it_go():
    pool = OutputBuffers()
    a = pool.take((4, 3), np.float32)
    first = id(a)
    del a
    again = pool.take((4, 3), np.float32)
    assert id(again) == first and again.shape == (4, 3) and again.dtype == np.float32


def test_an_array_someone_holds_is_never_handed_out():
    pool = OutputBuffers()
    kept = pool.take((5,), np.float64)
    kept[:] = 7.0
    other = pool.take((5,), np.float64)
    assert other is not kept
    other[:] = 1.0
    assert np.all(kept == 7.0)


def test_a_view_keeps_its_array_held():
    pool = OutputBuffers()
    a = pool.take((6,), np.int64)
    view = a[2:]
    del a
    b = pool.take((6,), np.int64)
    assert not np.shares_memory(b, view)


def test_shapes_and_types_are_pooled_apart():
    pool = OutputBuffers()
    a = pool.take((2, 2), np.float32)
    a_id = id(a)
    del a
    assert id(pool.take((4,), np.float32)) != a_id
    b = pool.take((2, 2), np.float16)
    assert b.dtype == np.float16


def test_the_pool_tracks_at_most_two_arrays_per_shape():
    pool = OutputBuffers()
    held = [pool.take((3,), np.float32) for _ in range(5)]
    assert len(pool._arrays[((3,), np.dtype(np.float32).str)]) == 2
    assert len({id(h) for h in held}) == 5


def test_clear_lets_idle_arrays_go_and_leaves_held_ones_alone():
    pool = OutputBuffers()
    kept = pool.take((3,), np.float32)
    kept[:] = 2.0
    idle = weakref.ref(pool.take((3,), np.float32))
    assert idle() is not None  # the pool still has it
    pool.clear()
    assert idle() is None  # freed, its memory back to the system
    assert pool.take((3,), np.float32) is not kept and np.all(kept == 2.0)
