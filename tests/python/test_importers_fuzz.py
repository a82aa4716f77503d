"""Property tests (Hypothesis) of the Python importers and the format detection: whatever the
bytes, loading a trace either gives a valid trace or raises one of the errors the CLI turns into
one line and exit 2 (stalloc.cli.INPUT_ERRORS, StallocError); never another exception, never a
crash, never a hang. Inputs: arbitrary bytes, mutations of the sample files in
tests/data/importers, and structured rows with numbers past 2^64, negative, or not numbers.
The C readers have libFuzzer targets of their own (tests/fuzz, docs/fuzzing.md)."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")  # scripts/setup_env.sh installs it
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import stalloc  # noqa: E402
from stalloc.cli import INPUT_ERRORS  # noqa: E402
from stalloc.errors import StallocError  # noqa: E402
from stalloc.load import FORMATS, load_trace  # noqa: E402
from stalloc.trace import Trace  # noqa: E402

SAMPLES = Path(__file__).resolve().parents[1] / "data" / "importers"
TEXT_FORMATS = ["rmm", "minimalloc", "stalloc-log", "torch-profiler", "torch-snapshot", "npz", "native"]
SAMPLE_OF = {
    "rmm": "rmm_log.csv",
    "stalloc-log": "stalloc_log.txt",
    "torch-snapshot": "torch_snapshot.pickle",
}
PROFILE = settings(max_examples=int(os.environ.get("STALLOC_HYPOTHESIS_EXAMPLES", "150")),
                   deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None)


def load_bytes(data: bytes, fmt: str | None):
    """load_trace on a file holding data; returns the trace or the exception it raised."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "input"
        path.write_bytes(data)
        try:
            return load_trace(path, fmt)
        except (StallocError, *INPUT_ERRORS) as e:
            message = str(e)
            assert message.strip() or type(e).__name__, "an error needs a message"
            assert "allow_pickle" not in message, message  # never suggest an unsafe load
            return e


def check_trace(result) -> None:
    if isinstance(result, Trace):
        s = result.summary()
        assert s.lower_bound <= s.total_bytes
        ev = np.asarray(result.events)
        assert len(ev) == s.events


@PROFILE
@given(st.binary(max_size=600), st.sampled_from([None, *TEXT_FORMATS]))
def test_any_bytes_load_or_raise_an_input_error(data, fmt):
    check_trace(load_bytes(data, fmt))


def mutate(data: bytes, edits) -> bytes:
    b = bytearray(data)
    for pos, value, mode in edits:
        if not b:
            b.append(value)
            continue
        i = pos % len(b)
        if mode == 0:
            b[i] = value
        elif mode == 1:
            del b[i:i + 1 + value % 16]
        else:
            b[i:i] = bytes([value]) * (1 + value % 8)
    return bytes(b)


EDITS = st.lists(st.tuples(st.integers(0, 1 << 16), st.integers(0, 255), st.integers(0, 2)),
                 min_size=1, max_size=8)


@PROFILE
@given(st.sampled_from(sorted(SAMPLE_OF)), EDITS, st.booleans())
def test_mutated_samples_load_or_raise_an_input_error(fmt, edits, detect):
    data = mutate((SAMPLES / SAMPLE_OF[fmt]).read_bytes(), edits)
    check_trace(load_bytes(data, None if detect else fmt))


NUMBER = st.one_of(st.integers(-5, 1 << 20), st.integers(1 << 63, 1 << 70), st.integers(-(1 << 70), -1),
                   st.sampled_from(["", "x", "0x10", "1e3", "nan", " 7", "(nil)", "18446744073709551615"]))


@PROFILE
@given(st.lists(st.tuples(NUMBER, NUMBER, NUMBER, NUMBER), max_size=12))
def test_minimalloc_rows(rows):
    text = "id,lower,upper,size\n" + "".join(f"{a},{b},{c},{d}\n" for a, b, c, d in rows)
    check_trace(load_bytes(text.encode(), "minimalloc"))


@PROFILE
@given(st.lists(st.tuples(st.sampled_from(["allocate", "free", "allocate failure", "bogus"]),
                          NUMBER, NUMBER, NUMBER), max_size=12))
def test_rmm_rows(rows):
    text = "Thread,Time,Action,Pointer,Size,Stream\n" + "".join(
        f"1,10:00:00.{i:06d},{action},{hex(p) if isinstance(p, int) and p >= 0 else p},{size},{s}\n"
        for i, (action, p, size, s) in enumerate(rows))
    check_trace(load_bytes(text.encode(), "rmm"))


@PROFILE
@given(st.lists(st.tuples(st.sampled_from(["1", "0", "2"]), NUMBER, NUMBER, NUMBER), max_size=12))
def test_stalloc_log_rows(rows):
    text = "".join(f"{k} {hex(p) if isinstance(p, int) and p >= 0 else p} {size} {s}\n"
                   for k, p, size, s in rows)
    check_trace(load_bytes(text.encode(), "stalloc-log"))


JSONISH = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-(1 << 70), 1 << 70), st.text(max_size=8)),
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(
        st.sampled_from(["addr", "size", "action", "stream", "device_traces", "segments", "traceEvents",
                         "name", "ph", "args", "Addr", "Bytes", "Total Allocated", "Device Id", "ts"]),
        inner, max_size=5)),
    max_leaves=20)


@PROFILE
@given(JSONISH, st.sampled_from(["torch-profiler", "torch-snapshot", None]))
def test_json_documents(doc, fmt):
    check_trace(load_bytes(json.dumps(doc).encode(), fmt))


def test_every_format_is_covered():
    assert set(TEXT_FORMATS) | {"xla"} == set(FORMATS), "a new importer needs its property test here"
