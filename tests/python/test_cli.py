"""The `stalloc` command line: --version, --cmakedir, info, errors on bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import stalloc
from stalloc.cli import main


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "stalloc", *args], capture_output=True, text=True)


def test_version_and_cmakedir(tmp_path):
    out = run_cli("--version")
    assert out.returncode == 0 and out.stdout.strip() == f"stalloc {stalloc.__version__}"
    out = run_cli("--cmakedir")
    assert out.returncode == 0
    assert (tmp_path.__class__(out.stdout.strip()) / "stallocConfig.cmake").is_file()


def test_no_command_prints_help():
    out = run_cli()
    assert out.returncode == 2 and "usage: stalloc" in out.stderr


def test_info_text_and_json(tmp_path, capsys):
    path = tmp_path / "t.stalloc"
    with stalloc.Allocator(record_path=path) as a:
        for step in range(2):
            a.step(step)
            a.free(a.alloc(4096))
    assert main(["info", str(path)]) == 0
    text = capsys.readouterr().out
    assert "lower bound" in text and "steps found" in text
    assert main(["info", str(path), "--json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["events"] == 6 and d["requests"] == 2 and d["steps"] == 2 and d["lower_bound"] == 4096


def test_info_on_bad_files(tmp_path):
    bad = tmp_path / "bad.stalloc"
    bad.write_bytes(b"STALTRCE" + b"\0" * 10)
    out = run_cli("info", str(bad))
    assert out.returncode == 2 and "stalloc info:" in out.stderr and "Traceback" not in out.stderr
    out = run_cli("info", str(tmp_path / "missing"))
    assert out.returncode == 2 and "no such file" in out.stderr
    junk = tmp_path / "junk.bin"
    junk.write_bytes(b"\x00\x01binary")
    out = run_cli("info", str(junk))
    assert out.returncode == 2 and "--format" in out.stderr


def _one_line_exit_2(r, start):
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(start), r.stderr


def test_foreign_plan_warns_naming_both_files(tmp_path):
    # issue 13 item 5: a plan of another trace replayed silently
    data = os.path.join(os.path.dirname(__file__), "..", "data", "traces")
    gpt2, llama = os.path.join(data, "gpt2_plain.npz"), os.path.join(data, "llama_1f1b.npz")
    plan_path = tmp_path / "llama.stplan"
    stalloc.plan(stalloc.load_trace(llama), time_limit=0.2).save(plan_path)
    r = run_cli("replay", gpt2, "--plan", str(plan_path))
    assert r.returncode == 0
    assert "warning" in r.stderr and str(plan_path) in r.stderr and gpt2 in r.stderr
    r = run_cli("replay", llama, "--plan", str(plan_path))
    assert r.returncode == 0 and "warning" not in r.stderr
    with pytest.warns(stalloc.ForeignPlanWarning, match="not made for trace"):
        stalloc.replay(gpt2, str(plan_path))


def test_every_input_error_is_one_line_exit_2(tmp_path):
    # issue 13 item 8
    npz = tmp_path / "cut.npz"
    data = os.path.join(os.path.dirname(__file__), "..", "data", "traces", "gpt2_plain.npz")
    with open(data, "rb") as f:
        blob = f.read()
    npz.write_bytes(blob[: len(blob) // 2])
    _one_line_exit_2(run_cli("info", str(npz), "--format", "npz"), "stalloc info:")
    csv = tmp_path / "big.csv"
    csv.write_text("id,lower,upper,size\n0,0,2,18446744073709551616\n")
    _one_line_exit_2(run_cli("info", str(csv), "--format", "minimalloc"), "stalloc info:")
    script = tmp_path / "train.py"
    marker = tmp_path / "ran"
    script.write_text(f"open({str(marker)!r}, 'w').close()\n")
    r = run_cli("record", "-o", "/no/such/dir/x", "--", "python", str(script))
    _one_line_exit_2(r, "stalloc record:")
    assert not marker.exists()  # refused before running the script
    _one_line_exit_2(run_cli("record", "-o", str(tmp_path / "t"), "--", "/nonexistent/prog"),
                     "stalloc record:")
