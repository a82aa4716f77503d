"""Issue 13's reproducers: each failed before its fix (a heap overflow, a garbled message)."""

from __future__ import annotations

import numpy as np
import pytest

import stalloc
from stalloc._lib import ffi, lib
from stalloc.trace import ALLOC, EVENT_DTYPE, FREE, Trace


def test_a_free_of_request_id_0_is_refused():
    # Was accepted: the id map's key 0 means "empty", so the free paired with the first
    # request, the live count went negative and replay read reqs[-1].
    ev = np.array([(1, 64, 0, 0, 0, 0, ALLOC, 0), (0, 0, 0, 0, 0, 0, FREE, 0)], dtype=EVENT_DTYPE)
    with pytest.raises(stalloc.BadFormatError, match="request id 0"):
        Trace.from_events(ev)
    ev = np.array([(1, 64, 0, 0, 0, 0, ALLOC, 0), (0, 0, 0, 0, 0, 0, FREE, 0),
                   (0, 0, 0, 0, 0, 0, FREE, 0), (2, 64, 0, 0, 0, 0, ALLOC, 0)], dtype=EVENT_DTYPE)
    with pytest.raises(stalloc.BadFormatError):
        Trace.from_events(ev)


def test_a_failed_replay_says_its_cause_once():
    # Was "replay: event 1: free: replay: event 1: free: ..." (the message buffer was both the
    # argument and the output of the same formatted write).
    ev = np.array([(1, 64 << 20, 0, 0, 0, 0, ALLOC, 0), (1, 0, 0, 0, 0, 0, FREE, 0)], dtype=EVENT_DTYPE)
    t = Trace.from_events(ev)
    o = ffi.new("stalloc_replay_options_t*")
    lib.stalloc_replay_options_init(o)
    o.virtual_capacity = 8 << 20  # too small for the 64 MiB request
    r = ffi.new("stalloc_replay_result_t*")
    lib.stalloc_replay_result_init(r)
    assert lib.stalloc_replay(t._handle, ffi.NULL, o, r) == lib.STALLOC_ERR_OUT_OF_MEMORY
    msg = ffi.string(lib.stalloc_last_error()).decode()
    assert msg.startswith("replay: event 0: alloc of 67108864 bytes: ")
    assert msg.count("replay: event") == 1, msg


def run_cli(*args):
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "stalloc", *map(str, args)], capture_output=True,
                          text=True, timeout=120)


TRACES = __import__("pathlib").Path(__file__).resolve().parents[1] / "data" / "traces"


def test_a_foreign_plan_is_named_in_a_warning(tmp_path):
    # Was silent: 351 hits, 1,819 misses, exit 0 and not a word.
    stalloc.plan(stalloc.load_trace(TRACES / "llama_plain.npz")).save(tmp_path / "llama.stplan")
    for cmd in ("replay", "compare"):
        out = run_cli(cmd, TRACES / "gpt2_plain.npz", "--plan", tmp_path / "llama.stplan")
        assert out.returncode == 0, out.stderr
        lines = [l for l in out.stderr.splitlines() if l]
        assert lines and all(l.startswith(f"stalloc {cmd}: warning: ") and "was not made for" in l
                             for l in lines), out.stderr
    import importlib

    foreign = importlib.import_module("stalloc.replay").ForeignPlanWarning
    with pytest.warns(foreign, match="was not made for"):
        stalloc.replay(stalloc.load_trace(TRACES / "gpt2_plain.npz"), tmp_path / "llama.stplan")


def test_cli_errors_are_one_line(tmp_path):
    truncated = tmp_path / "t.npz"
    truncated.write_bytes((TRACES / "gpt2_plain.npz").read_bytes()[:200])
    csv = tmp_path / "big.csv"
    csv.write_text("id,lower,upper,size\n0,0,2,18446744073709551616\n")
    for args in (("info", truncated), ("replay", truncated), ("plan", csv, "-o", tmp_path / "o.csv"),
                 ("record", "-o", tmp_path / "no" / "such" / "x.stalloc", "--", "python", "-c", "print(1)")):
        out = run_cli(*args)
        assert out.returncode == 2, (args, out.returncode, out.stderr)
        assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
        assert out.stderr.startswith(f"stalloc {args[0]}: "), out.stderr
    out = run_cli("record", "-o", tmp_path / "no" / "such" / "x.stalloc", "--", "python", "-c",
                  f"open({str(tmp_path / 'ran')!r}, 'w')")
    assert out.returncode == 2 and not (tmp_path / "ran").exists()  # failed before running it


def test_smaller_input_problems_name_the_file_and_the_cause(tmp_path):
    # Item 9. Each of these was a misleading message: numpy's allow_pickle advice, a gzip error
    # without the file's name, "cannot tell the format" for a trace cut inside its magic.
    native = tmp_path / "n.stalloc"
    Trace.from_events(np.array([(1, 64, 0, 0, 0, 0, ALLOC, 0), (1, 64, 0, 0, 0, 0, FREE, 0)],
                               dtype=EVENT_DTYPE)).save(native)
    gz = tmp_path / "g.json.gz"
    gz.write_bytes(b"\x1f\x8b\x08\x00" + b"not deflate data" * 4)
    for args, want in (
        (("--format", "npz", native), "not an .npz archive"),
        ((gz,), f"{gz}: corrupt gzip data"),
    ):
        out = run_cli("info", *args)
        assert out.returncode == 2 and want in out.stderr, out.stderr
        assert "allow_pickle" not in out.stderr and "Traceback" not in out.stderr
    for n in range(1, 8):
        cut = tmp_path / f"cut{n}.stalloc"
        cut.write_bytes(native.read_bytes()[:n])
        with pytest.raises(stalloc.TruncatedError, match="ends inside the header"):
            stalloc.load_trace(cut)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="empty file"):
        stalloc.load_trace(empty)
    # An .npz whose events are Python objects: refused without suggesting an unsafe load.
    objs = tmp_path / "o.npz"
    np.savez(objs, events=np.array([object()], dtype=object))
    with pytest.raises(ValueError, match="holds Python objects") as e:
        stalloc.load_trace(objs)
    assert "allow_pickle" not in str(e.value)
    # An .npz cut short or with a damaged member: the error names the file.
    whole = tmp_path / "whole.npz"
    np.savez_compressed(whole, events=np.zeros(1000, dtype=stalloc.trace.EVENT_DTYPE))
    data = whole.read_bytes()
    damaged = bytearray(data)
    damaged[len(data) // 3: len(data) // 3 + 16] = bytes(16)  # inside the compressed member
    for name, content in (("cut.npz", data[: len(data) // 2]), ("damaged.npz", bytes(damaged))):
        bad = tmp_path / name
        bad.write_bytes(content)
        with pytest.raises(ValueError, match=f"{name}: a damaged .npz archive"):
            stalloc.load_trace(bad)


def test_reserved_trace_header_fields_are_checked(tmp_path):
    # Item 9: the reserved word after the header's checksum was never read.
    native = tmp_path / "n.stalloc"
    Trace.from_events(np.array([(1, 64, 0, 0, 0, 0, ALLOC, 0)], dtype=EVENT_DTYPE)).save(native)
    data = bytearray(native.read_bytes())
    data[28] = 1
    native.write_bytes(bytes(data))
    with pytest.raises(stalloc.BadFormatError, match="reserved"):
        stalloc.load_trace(native)
