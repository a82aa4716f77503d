"""The Python Allocator over libstalloc: alignment, real bytes, errors as exceptions, stats
under threads, options from the environment."""

from __future__ import annotations

import subprocess
import sys
import threading

import pytest

import stalloc


def test_version_matches_library():
    assert stalloc.__version__.count(".") == 2
    major, minor, patch = map(int, stalloc.__version__.split("."))
    assert stalloc.lib.stalloc_version() == major * 10000 + minor * 100 + patch


@pytest.mark.parametrize("alignment", [64, 512, 4096])
def test_alignment_and_bytes(alignment):
    with stalloc.Allocator(alignment=alignment) as a:
        ptrs = []
        for i in range(100):
            size = 1 + (i * 7919) % 200_000
            p = a.alloc(size)
            assert p % alignment == 0
            a.buffer(p, size)[:] = bytes([i % 256]) * size
            ptrs.append((p, size, i))
        for p, size, i in ptrs:
            buf = a.buffer(p, size)
            assert buf[0] == i % 256 and buf[size - 1] == i % 256
            assert a.block_size(p) == size
            a.free(p)
        s = a.stats()
        assert s.allocated_bytes == 0 and s.alloc_count == s.free_count == 100


def test_default_alignment_is_512():
    with stalloc.Allocator() as a:
        assert all(a.alloc(n) % 512 == 0 for n in (1, 100, 513, 4097))


def test_double_free_and_unknown_pointer_change_nothing():
    with stalloc.Allocator() as a:
        p = a.alloc(1000)
        q = a.alloc(2000)
        before = a.stats()
        with pytest.raises(stalloc.UnknownPointerError, match="not given out"):
            a.free(p + 512)
        assert a.stats() == before
        a.free(p)
        before = a.stats()
        with pytest.raises(stalloc.DoubleFreeError, match="already freed"):
            a.free(p)
        assert a.stats() == before
        with pytest.raises(stalloc.InvalidArgumentError):
            a.free(q, size=1999)
        a.free(q, size=2000)


def test_out_of_memory_is_memoryerror_with_figures():
    with stalloc.Allocator(memory_limit=4 << 20) as a:
        a.alloc(3 << 20)
        with pytest.raises(MemoryError) as info:
            a.alloc(3 << 20)
        assert isinstance(info.value, stalloc.OutOfMemoryError)
        assert "asked 3145728 bytes" in str(info.value)
        assert a.stats().failed_allocs == 1


def test_virtual_backend_hands_out_untouched_addresses():
    with stalloc.Allocator(backend="virtual", virtual_capacity=128 << 30) as a:
        ptrs = [a.alloc(1 << 30) for _ in range(64)]  # 64 GiB of addresses, no memory
        assert len(set(ptrs)) == 64
        assert a.stats().reserved_bytes >= 64 << 30
        with pytest.raises(ValueError, match="not readable"):
            a.buffer(ptrs[0], 16)
        for p in ptrs:
            a.free(p)


def test_unknown_backend_and_cuda_without_driver():
    with pytest.raises(stalloc.InvalidArgumentError, match="unknown backend"):
        stalloc.Allocator(backend="tpu")


def test_closed_allocator_refuses_use():
    a = stalloc.Allocator()
    a.close()
    with pytest.raises(ValueError, match="closed"):
        a.alloc(10)
    a.close()  # twice is fine


def test_stats_exact_under_four_threads():
    a = stalloc.Allocator()
    errors = []

    def work(seed):
        try:
            live = []
            x = seed
            for _ in range(3000):
                x = (x * 1103515245 + 12345) & 0x7FFFFFFF
                if live and x % 3 == 0:
                    a.free(live.pop(x % len(live)))
                else:
                    live.append(a.alloc(1 + x % 50_000))
            for p in live:
                a.free(p)
        except Exception as e:  # surfaced below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i + 1,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    s = a.stats()
    assert s.allocated_bytes == 0 and s.active_blocks == 0
    assert s.alloc_count == s.free_count > 0
    a.close()


def test_environment_options_are_read():
    code = (
        "import stalloc\n"
        "a = stalloc.Allocator()\n"
        "print(a.backend, a.alloc(10) % 8192)\n"
    )
    env = {"STALLOC_BACKEND": "virtual", "STALLOC_ALIGNMENT": "8k", "PATH": ""}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["virtual", "0"]
    env["STALLOC_ALIGNMENT"] = "banana"
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert "ignoring STALLOC_ALIGNMENT=banana" in out.stderr


def test_pointers_and_sizes_are_range_checked_not_wrapped():
    # issue 13 item 3: a.free(p + 2**64) freed p, a.free(2**64) was a silent no-op
    with stalloc.Allocator() as a:
        p = a.alloc(64)
        for bad in (p + 2**64, 2**64, -1, -p):
            with pytest.raises(stalloc.InvalidArgumentError, match="out of range"):
                a.free(bad)
            with pytest.raises(stalloc.InvalidArgumentError, match="out of range"):
                a.block_size(bad)
            with pytest.raises(stalloc.InvalidArgumentError, match="out of range"):
                a.record_stream(bad, 1)
        with pytest.raises(stalloc.InvalidArgumentError, match="out of range"):
            a.free(p, size=2**64 + 64)
        with pytest.raises(stalloc.InvalidArgumentError, match="out of range"):
            a.alloc(2**64 + 8)
        with pytest.raises(stalloc.InvalidArgumentError, match="out of range"):
            a.set_memory_limit(-1)
        with pytest.raises(stalloc.InvalidArgumentError, match="out of range"):
            a.buffer(p, 2**64)
        with pytest.raises(stalloc.InvalidArgumentError, match="out of range"):
            stalloc.Allocator(memory_limit=2**64)
        assert a.block_size(p) == 64  # p is still live
        a.free(p)


def test_buffer_only_inside_a_live_block_of_an_open_allocator():
    # issue 13 item 2: each of these killed the interpreter
    a = stalloc.Allocator()
    p = a.alloc(64)
    assert len(a.buffer(p, 64)) == 64
    with pytest.raises(stalloc.UnknownPointerError):
        a.buffer(0, 16)
    with pytest.raises(stalloc.InvalidArgumentError, match="run past"):
        a.buffer(p, 1 << 30)
    with pytest.raises(stalloc.StallocError):
        a.buffer(p + 8, 8)  # not a block's start
    a.free(p)
    with pytest.raises(stalloc.StallocError):
        a.buffer(p, 16)  # freed
    assert len(a.buffer(0, 0)) == 0  # what alloc(0) gives
    a.close()
    with pytest.raises(ValueError, match="closed"):
        a.buffer(p, 16)
