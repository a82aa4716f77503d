"""The JAX adapter on CPU jax: zero copy, correct results, blocks back to stalloc when JAX
drops an array, threads, the loud zero-copy failure, and XLA's allocator settings."""

from __future__ import annotations

import gc
import os
import threading
import time
import warnings

import numpy as np
import pytest

jax = pytest.importorskip("jax")
import jax.numpy as jnp  # noqa: E402

from stalloc.integrations import jax_backend as jb  # noqa: E402


def _settle(alloc: jb.JaxAllocator, want_blocks: int, timeout: float = 5.0) -> int:
    """XLA may drop a buffer a moment after Python lets go of it; poll briefly."""
    deadline = time.monotonic() + timeout
    while True:
        gc.collect()
        n = alloc.stats().active_blocks
        if n == want_blocks or time.monotonic() > deadline:
            return n
        time.sleep(0.005)


@pytest.fixture
def alloc():
    a = jb.JaxAllocator(backend="host")
    yield a
    a.close()


def test_zero_copy_same_address(alloc):
    x = np.arange(4096, dtype=np.float32).reshape(64, 64)
    t = alloc.tensor(x.shape, x.dtype)
    t.numpy()[...] = x
    ptr = t.data_ptr
    arr = jb.to_jax(t)
    assert jb.buffer_pointer(arr) == ptr
    assert arr.unsafe_buffer_pointer() == ptr
    np.testing.assert_array_equal(np.asarray(arr), x)
    # asarray does the same in one call.
    b = jb.asarray(x, allocator=alloc)
    assert alloc.stats().active_blocks == 2
    assert alloc.stats().allocated_bytes == 2 * x.nbytes


def test_jax_computes_on_stalloc_arrays(alloc):
    rng = np.random.default_rng(0)
    w = rng.standard_normal((32, 16)).astype(np.float32)
    v = rng.standard_normal((8, 32)).astype(np.float32)
    jw, jv = jb.asarray(w, allocator=alloc), jb.asarray(v, allocator=alloc)
    out = jax.jit(lambda a, b: jnp.tanh(b @ a).sum(axis=0))(jw, jv)
    np.testing.assert_allclose(np.asarray(out), np.tanh(v @ w).sum(axis=0), rtol=1e-5, atol=1e-5)
    grad = jax.grad(lambda a: jnp.sum((jv @ a) ** 2))(jw)
    np.testing.assert_allclose(np.asarray(grad), 2 * v.T @ (v @ w), rtol=1e-4, atol=1e-4)
    # dtypes: ints, bools, bfloat16, a scalar, an empty array.
    for src in (np.arange(10, dtype=np.int32), np.array([True, False]), np.float32(3.5),
                np.zeros((0, 3), np.float32)):
        np.testing.assert_array_equal(np.asarray(jb.asarray(src, allocator=alloc)), src)
    bf = jb.asarray(jnp.arange(6, dtype=jnp.bfloat16), allocator=alloc)
    assert bf.dtype == jnp.bfloat16 and float(bf.sum()) == 15.0


def test_block_returns_when_jax_drops_array(alloc):
    base = alloc.stats()
    arrs = [jb.empty((128, 128), "float32", allocator=alloc) for _ in range(5)]
    s = alloc.stats()
    assert s.active_blocks == base.active_blocks + 5
    assert s.allocated_bytes == base.allocated_bytes + 5 * 128 * 128 * 4
    assert alloc.live_tensors() == 5
    del arrs
    assert _settle(alloc, base.active_blocks) == base.active_blocks
    assert alloc.stats().allocated_bytes == base.allocated_bytes
    assert alloc.live_tensors() == 0


def test_unconsumed_tensor_and_capsule_free_the_block(alloc):
    t = alloc.tensor((10,), "float32")
    del t
    assert alloc.stats().active_blocks == 0
    cap = alloc.tensor((10,), "float32").__dlpack__()  # a capsule nobody consumes
    assert alloc.stats().active_blocks == 1
    del cap
    assert alloc.stats().active_blocks == 0
    t = alloc.tensor((2,), "int8")
    t.__dlpack__()
    with pytest.raises(BufferError):
        t.__dlpack__()


def test_four_threads_lose_nothing(alloc):
    base = alloc.stats().active_blocks
    errors = []

    def work(seed):
        try:
            rng = np.random.default_rng(seed)
            for i in range(40):
                x = rng.standard_normal((1 + i % 7, 33)).astype(np.float32)
                a = jb.asarray(x, allocator=alloc)
                np.testing.assert_allclose(np.asarray(a * 2), x * 2)
                del a
        except Exception as e:  # reported by the main thread
            errors.append(e)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert _settle(alloc, base) == base
    s = alloc.stats()
    assert s.alloc_count == s.free_count == 160
    assert alloc.live_tensors() == 0


def test_zero_copy_failure_raises():
    # 16-byte alignment lets a block start off a 64-byte boundary, which XLA's CPU client
    # cannot alias: asked for zero copy, the adapter must raise, not copy silently.
    a = jb.JaxAllocator(alignment=16)
    ts = [a.tensor((3,), "float32") for _ in range(8)]
    bad = [t for t in ts if t.data_ptr % 64]
    assert bad, "no block off a 64-byte boundary"
    with pytest.raises(jb.ZeroCopyError, match="without a copy|copied"):
        jb.to_jax(bad[0], zero_copy=True)
    bad[1].numpy()[:] = [1, 2, 3]
    copied = jb.to_jax(bad[1], zero_copy=False)  # allowed to copy: works, elsewhere
    assert jb.buffer_pointer(copied) != bad[1].data_ptr
    np.testing.assert_array_equal(np.asarray(copied), [1, 2, 3])
    del ts, bad, copied
    assert _settle(a, 0) == 0
    a.close()


def test_allocator_outlives_close_while_arrays_live():
    a = jb.JaxAllocator()
    arr = jb.asarray(np.full((256,), 7, np.float32), allocator=a)
    a.close()  # libstalloc keeps the memory until JAX drops arr
    gc.collect()
    assert float(jnp.sum(arr * 1)) == 7 * 256
    with pytest.raises(ValueError, match="closed"):
        a.stats()
    del arr
    gc.collect()


def test_wrapped_stalloc_allocator_and_default():
    import stalloc
    user = stalloc.Allocator(backend="host")
    arr = jb.asarray(np.ones(5, np.float32), allocator=user)
    assert user.stats().active_blocks == 1
    assert float(arr.sum()) == 5.0
    del arr
    deadline = time.monotonic() + 5
    while user.stats().active_blocks and time.monotonic() < deadline:
        gc.collect()
    assert user.stats().active_blocks == 0
    assert jb.default_allocator().backend == "host"
    with pytest.raises(TypeError):
        jb.empty((2,), allocator="host")


def test_bad_input():
    with pytest.raises(ValueError, match="DLPack"):
        jb.asarray(np.array(["a", "b"]))
    import stalloc
    with pytest.raises(stalloc.UnsupportedError, match="virtual"):
        jb.JaxAllocator(backend="virtual")


def test_configure_xla_memory(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
    jax.devices()  # the backend is up in this process: the helper must say it is too late
    with pytest.warns(RuntimeWarning, match="already initialised"):
        env = jb.configure_xla_memory(fraction=0.5)
    assert env == {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.5"}
    assert os.environ["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.5"
    with pytest.raises(ValueError):
        jb.configure_xla_memory(fraction=1.5)


def test_import_without_jax_is_lazy():
    import subprocess
    import sys
    code = ("import sys; sys.modules['jax'] = None\n"
            "from stalloc.integrations import jax_backend as jb\n"
            "try:\n    jb.empty((2,))\nexcept ImportError as e:\n    print('ok', e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok") and "pip install jax" in out.stdout


def test_record_jax_allocations(tmp_path):
    import stalloc
    a = jb.JaxAllocator()
    a.record_start(tmp_path / "t.stalloc")
    for i in range(3):
        a.step(i)
        x = jb.asarray(np.ones((16, 16), np.float32), allocator=a)
        del x
        _settle(a, 0)
    a.record_stop()
    t = stalloc.load_trace(tmp_path / "t.stalloc")
    s = t.summary()
    assert (s.requests, s.steps, s.unfreed_requests) == (3, 3, 0)
    assert t.lower_bound == 16 * 16 * 4
    a.close()


def test_other_consumers_take_the_capsule(alloc):
    # numpy consumes the "dltensor" capsule too (renaming it), sharing the block.
    t = alloc.tensor((3, 4), "float32")
    t.numpy()[...] = np.arange(12).reshape(3, 4)
    ptr = t.data_ptr
    n = np.from_dlpack(t)
    assert n.ctypes.data == ptr and n[2, 3] == 11
    del t
    assert alloc.stats().active_blocks == 1  # numpy holds it now
    del n
    gc.collect()
    assert alloc.stats().active_blocks == 0
