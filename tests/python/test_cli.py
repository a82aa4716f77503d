"""The `stalloc` command line: --version, --cmakedir, info, errors on bad input."""

from __future__ import annotations

import json
import subprocess
import sys

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
