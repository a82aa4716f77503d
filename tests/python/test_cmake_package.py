"""The installed wheel is a CMake package: an outside project finds stalloc::stalloc through
`stalloc --cmakedir`, links it, and runs alloc/free on the host backend."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import stalloc

REPO = Path(__file__).resolve().parents[2]


def tool(name):
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    if not found:
        pytest.fail(f"{name} is needed to test the CMake package (pip install {name})")
    return found


def test_outside_project_links_stalloc(tmp_path):
    cmake = tool("cmake")
    cmake_dir = subprocess.run([sys.executable, "-m", "stalloc", "--cmakedir"],
                               capture_output=True, text=True, check=True).stdout.strip()
    assert cmake_dir == stalloc.cmake_dir()
    build = tmp_path / "build"
    gen = ["-G", "Ninja"] if shutil.which("ninja") or (Path(sys.executable).parent / "ninja").exists() else []
    # cmake and ninja may come from the virtual environment's bin/.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}"}
    subprocess.run([cmake, "-S", str(REPO / "examples" / "cpp_trainer"), "-B", str(build), *gen,
                    f"-Dstalloc_DIR={cmake_dir}"], check=True, capture_output=True, env=env)
    subprocess.run([cmake, "--build", str(build)], check=True, capture_output=True, env=env)
    trace = tmp_path / "trainer.stalloc"
    out = subprocess.run([str(build / "cpp_trainer"), str(trace)], capture_output=True, text=True, env=env)
    assert out.returncode == 0, out.stderr
    assert f"libstalloc {stalloc.__version__}" in out.stdout
    assert "5 steps" in out.stdout
    # The trace the C++ program recorded reads back in Python.
    assert stalloc.Trace.load(trace).summary().steps == 5
