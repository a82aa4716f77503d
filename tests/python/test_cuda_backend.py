"""The cuda backend from Python without a GPU: a clear NoDeviceError where no driver is, and
the allocator over the mock driver (tests/c/backends/mock_cuda_driver.c, compiled here) in a fresh
process, since the driver is loaded once per process."""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import stalloc

REPO = Path(__file__).resolve().parents[2]


def _real_driver() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def _run(code: str, **env) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if not k.startswith("STALLOC_")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=60)


@pytest.mark.skipif(_real_driver(), reason="a CUDA driver is installed here")
def test_no_driver_raises_no_device(monkeypatch):
    monkeypatch.delenv("STALLOC_CUDA_DRIVER", raising=False)
    with pytest.raises(stalloc.NoDeviceError) as info:
        stalloc.Allocator(backend="cuda")
    message = str(info.value)
    assert "no CUDA driver" in message and "libcuda.so.1" in message
    # The rest of the library is unaffected.
    with stalloc.Allocator(backend="host") as a:
        a.free(a.alloc(1000))


def test_driver_path_from_environment_is_named():
    r = _run(
        "import stalloc\n"
        "try:\n"
        "    stalloc.Allocator()\n"
        "except stalloc.NoDeviceError as e:\n"
        "    print('NoDeviceError:', e)\n",
        STALLOC_BACKEND="cuda", STALLOC_CUDA_DRIVER="/nonexistent/libcuda.so.1")
    assert r.returncode == 0, r.stderr
    assert "NoDeviceError:" in r.stdout
    assert "/nonexistent/libcuda.so.1" in r.stdout and "STALLOC_CUDA_DRIVER" in r.stdout


@pytest.fixture(scope="module")
def mock_driver(tmp_path_factory) -> Path:
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if not cc:
        pytest.skip("no C compiler to build the mock driver")
    out = tmp_path_factory.mktemp("mockcu") / "libmockcuda.so"
    src = REPO / "tests" / "c" / "backends" / "mock_cuda_driver.c"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-fvisibility=hidden", "-o", str(out), str(src), "-lpthread"],
                   check=True, capture_output=True)
    return out


MOCK_SCRIPT = r"""
import ctypes, os, stalloc
mock = ctypes.CDLL(os.environ["STALLOC_CUDA_DRIVER"])
mock.mockcu_stat.restype = ctypes.c_longlong
mock.mockcu_set_capacity(ctypes.c_ulonglong(64 << 20))
a = stalloc.Allocator(backend="cuda", growable_pool=False)  # segments from cuMemAlloc
ptrs = [a.alloc(n) for n in (1000, 3 << 20, 12 << 20)]
assert all(p % 512 == 0 for p in ptrs)
ctypes.memset(ptrs[1], 7, 3 << 20)  # the mock's device memory is host memory
s = a.stats()
assert s.allocated_bytes == 1000 + (3 << 20) + (12 << 20)
assert s.reserved_bytes == mock.mockcu_stat(b"device_bytes")
try:
    a.alloc(100 << 20)
    raise SystemExit("no OutOfMemoryError")
except stalloc.OutOfMemoryError as e:
    assert "CUDA_ERROR_OUT_OF_MEMORY" in str(e), e
mock.mockcu_fail(b"cuMemAlloc_v2", 999, 1)
try:
    a.alloc(30 << 20)
    raise SystemExit("no BackendError")
except stalloc.BackendError as e:
    assert "CUDA_ERROR_UNKNOWN" in str(e), e
for p in ptrs:
    a.free(p)
a.close()
assert mock.mockcu_stat(b"device_bytes") == 0 and mock.mockcu_stat(b"events_live") == 0
print("ok")
"""


def test_allocator_over_mock_driver(mock_driver):
    r = _run(MOCK_SCRIPT, STALLOC_CUDA_DRIVER=str(mock_driver))
    assert r.returncode == 0, r.stdout + r.stderr
    assert r.stdout.strip().endswith("ok")


def test_init_failure_is_no_device(mock_driver):
    code = ("import ctypes, os, stalloc\n"
            "ctypes.CDLL(os.environ['STALLOC_CUDA_DRIVER']).mockcu_set_init_error(100)\n"
            "try:\n"
            "    stalloc.Allocator(backend='cuda')\n"
            "except stalloc.NoDeviceError as e:\n"
            "    print(e)\n")
    r = _run(code, STALLOC_CUDA_DRIVER=str(mock_driver))
    assert r.returncode == 0, r.stderr
    assert "cuInit" in r.stdout and "CUDA_ERROR_NO_DEVICE" in r.stdout


TIMER_SCRIPT = r"""
import ctypes, os, sys, stalloc
sys.path.insert(0, os.path.join(os.environ["REPO"], "scripts", "gpu"))
import driver_timer
a = stalloc.Allocator(backend="cuda")  # the growable pool: cuMemCreate, cuMemMap, cuMemSetAccess
driver_timer.reset()
p = a.alloc(6 << 20)
ctypes.memset(p, 1, 6 << 20)
counts = driver_timer.read()
assert counts["cuMemCreate"][0] == 3 and counts["cuMemMap"][0] == 3, counts
assert counts["cuMemSetAccess"][0] == 1 and all(ns >= 0 for _, ns in counts.values()), counts
assert "cuInit" not in counts  # before the reset
a.free(p)
a.close()
print(driver_timer.summary({"device_allocs_per_step": 3.0, "steady_steps": 1, "driver_calls": counts}))
"""


def test_driver_timer_counts_what_the_backend_calls(mock_driver, tmp_path):
    """scripts/gpu/driver_timer.c forwards every entry point to the driver it stands in for (the
    mock here) and counts the calls, so the GPU kit can say where the pool's time goes."""
    cc = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    timer = tmp_path / "driver_timer.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(timer), str(REPO / "scripts" / "gpu" / "driver_timer.c"),
                    "-ldl"], check=True, capture_output=True)
    at_exit = tmp_path / "counts.jsonl"
    r = _run(TIMER_SCRIPT, STALLOC_CUDA_DRIVER=str(timer), DRIVER_TIMER_REAL=str(mock_driver),
             DRIVER_TIMER_OUT=str(at_exit), REPO=str(REPO))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "3.0 new granules/step, driver " in r.stdout
    assert '"cuMemUnmap": [3,' in at_exit.read_text()  # the pool's close, counted at exit
    # With no real driver behind it, every call says there is no device: a clear NoDeviceError.
    r = _run("import stalloc\ntry:\n    stalloc.Allocator(backend='cuda')\nexcept stalloc.NoDeviceError as e:\n"
             "    print('NoDeviceError:', e)\n",
             STALLOC_CUDA_DRIVER=str(timer), DRIVER_TIMER_REAL="/nonexistent/libcuda.so.1")
    assert r.returncode == 0, r.stderr
    assert "NoDeviceError:" in r.stdout and "cannot load the real driver" in r.stderr
