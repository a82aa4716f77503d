"""Import XLA's buffer assignment of a compiled program as a stalloc trace.

Run a JAX program with ``XLA_FLAGS="--xla_dump_to=DIR --xla_dump_hlo_as_text"``. For each
compiled module XLA writes, beside the HLO text (names as jaxlib 0.10 writes them on CPU;
``gpu_`` instead of ``cpu_`` on GPU)::

    module_0012.jit_step.cpu_after_optimizations-buffer-assignment.txt
    module_0012.jit_step.cpu_after_optimizations-live-range.txt

The buffer assignment lists allocations and the HLO values placed in each::

    BufferAssignment:
    allocation 0: size 2048, maybe-live-out:
     value: <54 ynn_fusion.2 @0> (size=1024,offset=0): f32[8,32]{1,0}
    allocation 1: size 2048, parameter 1, shape |f32[16,32]| at ShapeIndex {}:
    allocation 12: size 1024, preallocated-temp:

Header attributes seen: ``parameter N``, ``maybe-live-out``, ``output shape is |...|``,
``thread-local`` (scalars inside fusions and reductions, not in the schedule), ``constant``,
``preallocated-temp`` (on CPU the one block holding every temporary, at the offsets XLA's
heap simulator chose: its size is memory_analysis()'s temp_size_in_bytes). The live range
gives the schedule XLA's heap simulator walked and each value's inclusive live interval::

    HloLiveRange (max 17):
      InstructionSequence:
        0:p__b1__.1
      BufferLiveRange:
        p__b1__.1{}:0-17
        add_tanh_fusion{}:6-11
      Live ranges at 15 (peak):        <- everything from here on is ignored

Conversion rules:

* A value lives over its inclusive interval [start, end] of schedule positions. At each
  position the values defined there are allocated, then the values whose last use it is are
  freed (the heap simulator's order), so an operand never shares bytes with a result of the
  instruction that reads it ...
* ... unless XLA made it share in place: two values of one allocation whose byte ranges and
  live intervals overlap are one buffer (e.g. a fusion writing into its operand). They become
  one request spanning both intervals, sized by the union of their byte ranges.
* Values the schedule does not list (thread-local scalars, values inside called computations)
  are left out and counted in ``info``; so are values of size 0.
* Request ids follow the order of first allocation; ``address`` is 0, as XLA addresses are
  per-allocation offsets. ``only="temp"`` keeps the requests made of temporaries only (what
  memory_analysis() calls temp), which is the part an allocator can plan.

Malformed input raises ``ValueError`` naming the file and line.
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field

import numpy as np

from ..trace import ALLOC, EVENT_DTYPE, FREE, Trace

__all__ = [
    "DUMP_SUFFIXES", "Value", "Allocation", "parse_buffer_assignment", "parse_live_range",
    "find_module", "import_dump", "load_xla_dump",
]

DUMP_SUFFIXES = ("-buffer-assignment.txt", "-live-range.txt")

_ALLOC_RE = re.compile(r"^allocation (\d+): size (\d+)(?:, (.*))?:\s*$")
_VALUE_RE = re.compile(r"^\s+value: <(\d+) (\S+?)(\{[\d,]*\})? @\S+> \(size=(\d+),offset=(\d+)\)")
_SEQ_RE = re.compile(r"^\s+(\d+):(\S+)\s*$")
_RANGE_RE = re.compile(r"^\s+(\S+?)(\{[\d,]*\}):(\d+)-(\d+)\s*$")


@dataclass
class Value:
    id: int
    name: str       # "instruction{shape index}"
    size: int
    offset: int
    allocation: int


@dataclass
class Allocation:
    index: int
    size: int
    attributes: str
    values: list = field(default_factory=list)

    @property
    def kind(self) -> str:
        a = self.attributes
        if "parameter" in a:
            return "parameter"
        if "constant" in a:
            return "constant"
        if "thread-local" in a:
            return "thread-local"
        if "maybe-live-out" in a or "output shape" in a:
            return "output"
        return "temp"


def parse_buffer_assignment(text: str, where: str = "buffer assignment") -> list:
    """The allocations of a ``*-buffer-assignment.txt``, with their values."""
    lines = text.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.strip() == "BufferAssignment:")
    except StopIteration:
        raise ValueError(f"{where}: no 'BufferAssignment:' line; not an XLA buffer-assignment dump") from None
    allocs: list[Allocation] = []
    seen: set[int] = set()
    for n, line in enumerate(lines[start + 1:], start + 2):
        if not line.strip():
            continue
        m = _ALLOC_RE.match(line)
        if m:
            if int(m.group(1)) in seen:
                raise ValueError(f"{where}:{n}: allocation {m.group(1)} repeated")
            seen.add(int(m.group(1)))
            allocs.append(Allocation(int(m.group(1)), int(m.group(2)), m.group(3) or ""))
            continue
        if line.lstrip().startswith("value:"):
            m = _VALUE_RE.match(line)
            if not m:
                raise ValueError(f"{where}:{n}: cannot read the value line {line.strip()!r}")
            if not allocs:
                raise ValueError(f"{where}:{n}: a value before any allocation")
            a = allocs[-1]
            size, offset = int(m.group(4)), int(m.group(5))
            if offset + size > a.size:
                raise ValueError(f"{where}:{n}: value {m.group(2)} (offset {offset}, size {size}) "
                                 f"exceeds allocation {a.index} of {a.size} bytes")
            a.values.append(Value(int(m.group(1)), m.group(2) + (m.group(3) or "{}"), size, offset, a.index))
            continue
        if not allocs:
            raise ValueError(f"{where}:{n}: expected 'allocation N: size S, ...:', got {line.strip()!r}")
        break  # a later section (GPU dumps add totals and used-value lists): not needed
    if not allocs:
        raise ValueError(f"{where}: no allocations")
    return allocs


def parse_live_range(text: str, where: str = "live range") -> tuple:
    """(instruction sequence, {value name: (start, end)} inclusive, schedule end) of a
    ``*-live-range.txt``."""
    lines = text.splitlines()
    m = re.match(r"^HloLiveRange \(max (\d+)\):\s*$", lines[0] if lines else "")
    if not m:
        raise ValueError(f"{where}:1: expected 'HloLiveRange (max N):'; not an XLA live-range dump")
    end_time = int(m.group(1))
    sequence: list[str] = []
    ranges: dict[str, tuple[int, int]] = {}
    section = None
    for n, line in enumerate(lines[1:], 2):
        s = line.strip()
        if not s:
            continue
        if s == "InstructionSequence:":
            section = "seq"
        elif s == "BufferLiveRange:":
            section = "ranges"
        elif not line.startswith("    "):
            if section == "ranges":
                break  # "Live ranges at T (peak):" and the stack breakdown
            raise ValueError(f"{where}:{n}: unexpected line {s!r}")
        elif section == "seq":
            m = _SEQ_RE.match(line)
            if not m or int(m.group(1)) != len(sequence):
                raise ValueError(f"{where}:{n}: expected instruction {len(sequence)}, got {s!r}")
            sequence.append(m.group(2))
        elif section == "ranges":
            m = _RANGE_RE.match(line)
            if not m:
                raise ValueError(f"{where}:{n}: cannot read the live range {s!r}")
            a, b = int(m.group(3)), int(m.group(4))
            if a > b or b > end_time:
                raise ValueError(f"{where}:{n}: live range {a}-{b} is not inside 0-{end_time}")
            ranges[m.group(1) + m.group(2)] = (a, b)
        else:
            raise ValueError(f"{where}:{n}: a line outside any section: {s!r}")
    if not ranges:
        raise ValueError(f"{where}: no BufferLiveRange entries")
    return sequence, ranges, end_time


def _groups(values: list, ranges: dict) -> list:
    """Union of the values XLA shares in place: same allocation, overlapping bytes and time."""
    parent = list(range(len(values)))

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    by_alloc: dict[int, list[int]] = {}
    for i, v in enumerate(values):
        by_alloc.setdefault(v.allocation, []).append(i)
    for idx in by_alloc.values():
        if len(idx) < 2:
            continue
        off = np.array([values[i].offset for i in idx], np.int64)
        end = off + np.array([values[i].size for i in idx], np.int64)
        t0 = np.array([ranges[values[i].name][0] for i in idx], np.int64)
        t1 = np.array([ranges[values[i].name][1] for i in idx], np.int64)
        for k in range(len(idx)):
            hit = (off < end[k]) & (off[k] < end) & (t0 <= t1[k]) & (t0[k] <= t1)
            for j in np.nonzero(hit[k + 1:])[0] + k + 1:
                parent[find(idx[j])] = find(idx[k])
    groups: dict[int, list] = {}
    for i in range(len(values)):
        groups.setdefault(find(i), []).append(values[i])
    return list(groups.values())


def find_module(dump_dir, name: str = "") -> str:
    """The path prefix (without DUMP_SUFFIXES) of the last-compiled module in dump_dir whose
    name contains ``name``."""
    hits = sorted(glob.glob(os.path.join(os.fspath(dump_dir), f"module_*{name}*{DUMP_SUFFIXES[0]}")))
    if not hits:
        raise ValueError(f"{dump_dir}: no module matching {name!r} with a {DUMP_SUFFIXES[0]} file; "
                         "was XLA_FLAGS='--xla_dump_to=DIR --xla_dump_hlo_as_text' set before jax started?")
    return hits[-1][: -len(DUMP_SUFFIXES[0])]


def import_dump(prefix, only: str | None = None, with_info: bool = False):
    """The stalloc Trace of one module's dump. ``prefix`` is the path up to the suffixes (as
    from find_module), or a dump directory holding exactly one module with a live range."""
    prefix = os.fspath(prefix)
    if os.path.isdir(prefix):
        prefix = find_module(prefix)
    paths = [prefix + s for s in DUMP_SUFFIXES]
    for p in paths:
        if not os.path.isfile(p):
            raise ValueError(f"{p}: missing; XLA writes it with --xla_dump_hlo_as_text")
    with open(paths[0], encoding="utf-8") as f:
        allocs = parse_buffer_assignment(f.read(), paths[0])
    with open(paths[1], encoding="utf-8") as f:
        _, ranges, end_time = parse_live_range(f.read(), paths[1])
    if only not in (None, "temp"):
        raise ValueError(f"only must be None or 'temp', not {only!r}")

    kind_of = {a.index: a.kind for a in allocs}
    info = {"values": 0, "unscheduled_values": 0, "unscheduled_bytes": 0, "zero_size_values": 0,
            "shared_in_place": 0, "schedule_length": end_time}
    values = []
    for a in allocs:
        for v in a.values:
            info["values"] += 1
            if v.size == 0:
                info["zero_size_values"] += 1
            elif v.name not in ranges:
                info["unscheduled_values"] += 1
                info["unscheduled_bytes"] += v.size
            else:
                values.append(v)
    temp = [a for a in allocs if "preallocated-temp" in a.attributes]
    info["xla_temp_peak"] = max((v.offset + v.size for a in temp for v in a.values), default=0)

    reqs = []  # (start, end, size, kind)
    for g in _groups(values, ranges):
        kinds = {kind_of[v.allocation] for v in g}
        kind = next((k for k in ("parameter", "constant", "output") if k in kinds), "temp")
        info["shared_in_place"] += len(g) - 1
        if only == "temp" and kind != "temp":
            continue
        lo = min(v.offset for v in g)
        hi = max(v.offset + v.size for v in g)
        reqs.append((min(ranges[v.name][0] for v in g), max(ranges[v.name][1] for v in g), hi - lo, kind))
    info["requests_by_kind"] = {k: sum(r[3] == k for r in reqs) for k in sorted({r[3] for r in reqs})}
    # Heap-simulator order: at each position, allocs (by first use), then frees.
    reqs.sort(key=lambda r: (r[0], r[1]))
    ev = np.zeros(2 * len(reqs), EVENT_DTYPE)
    order = sorted([(r[0], 0, i) for i, r in enumerate(reqs)] + [(r[1], 1, i) for i, r in enumerate(reqs)])
    for e, (_, is_free, i) in zip(ev, order):
        e["id"] = i + 1
        e["size"] = reqs[i][2]
        e["kind"] = FREE if is_free else ALLOC
    trace = Trace.from_events(ev)
    return (trace, info) if with_info else trace


def load_xla_dump(path) -> Trace:
    """load_trace's entry: a module prefix, a dump directory or one of the module's files."""
    path = os.fspath(path)
    for s in DUMP_SUFFIXES:
        if path.endswith(s):
            path = path[: -len(s)]
    return import_dump(path)
