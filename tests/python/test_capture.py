"""Capturing real PyTorch runs through the profiler: the context manager and `stalloc record`."""

from __future__ import annotations

import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

import stalloc  # noqa: E402
from stalloc import capture  # noqa: E402

TRAIN = """
import sys, torch
torch.manual_seed(0)
m = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 1))
opt = torch.optim.AdamW(m.parameters())
for i in range(int(sys.argv[1])):
    loss = m(torch.randn(16, 64)).pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
print("trained", sys.argv[1])
"""


def test_context_manager_marks_optimizer_steps(tmp_path):
    torch.manual_seed(0)
    m = torch.nn.Linear(32, 32)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    path = tmp_path / "run.stalloc"
    with capture.record(path) as rec:
        for _ in range(4):
            m(torch.randn(8, 32)).sum().backward()
            opt.step()
            opt.zero_grad()
    assert rec.steps == 4
    t = stalloc.Trace.load(path)
    s = t.summary()
    assert s.steps == 5  # the start, then one marker per optimizer step
    assert s.requests > 0 and s.lower_bound > 0
    # Every step after the first allocates the same sizes in the same order.
    r = t.requests
    per_step = [r["size"][r["step"] == k].tolist() for k in range(2, 5)]
    assert per_step[0] == per_step[1] == per_step[2] and per_step[0]


def test_steps_limit_stops_recording(tmp_path):
    m = torch.nn.Linear(16, 16)
    opt = torch.optim.SGD(m.parameters(), lr=0.1)
    path = tmp_path / "run.stalloc"
    rec = capture.record(path, steps=2).start()
    for _ in range(5):
        m(torch.randn(4, 16)).sum().backward()
        opt.step()
    assert rec.steps == 2 and rec.trace is not None
    assert stalloc.Trace.load(path).summary().steps == 3


def test_record_cli_runs_a_script(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(TRAIN)
    out_path = tmp_path / "cli.stalloc"
    out = subprocess.run([sys.executable, "-m", "stalloc", "record", "-o", str(out_path), "--json",
                          "--", "python", str(script), "3"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "trained 3" in out.stdout
    assert '"steps": 4' in out.stdout
    assert stalloc.Trace.load(out_path).summary().steps == 4


def test_record_cli_refuses_non_python_commands(tmp_path):
    out = subprocess.run([sys.executable, "-m", "stalloc", "record", "-o", str(tmp_path / "x"),
                          "--", "ls", "-l"], capture_output=True, text=True)
    assert out.returncode == 2 and "captures Python training scripts" in out.stderr
    out = subprocess.run([sys.executable, "-m", "stalloc", "record", "-o", str(tmp_path / "x"),
                          "--", "python", str(tmp_path / "missing.py")], capture_output=True, text=True)
    assert out.returncode == 2 and "no such script" in out.stderr
