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
