"""How much memory stalloc saves on a trace, beside the allocators people use today.

``compare(trace)`` gives one row per allocator: PyTorch's caching allocator and its
expandable segments (simulated, stalloc.baseline), and stalloc (the trace replayed through
the runtime from a plan, stalloc.replay). Without a plan, the plan is made from the trace's
first steps only (``first_steps``: the set-up, the warm-up step and two steady steps when the
trace has step markers) and the whole trace is replayed, so the figure includes what happens
when the run goes on past what was recorded.
"""

from __future__ import annotations

import numpy as np

from .baseline import simulate
from .plan import Plan, plan as make_plan
from .replay import replay
from .trace import ALLOC, FREE, FLAG_UNMATCHED, STEP, Trace

__all__ = ["ROW_KEYS", "first_steps", "compare", "plot"]

ROW_KEYS = ("allocator", "peak_allocated", "peak_reserved", "waste", "fragmentation")


def first_steps(trace: Trace, steps: int = 3) -> tuple[Trace, int]:
    """The trace up to the start of its (steps + 1)-th step marker after the first, and how
    many step markers it keeps. A trace with too few markers is returned whole. Requests still
    live at the cut are left unfreed, as they were when the recording stopped."""
    ev = trace.events
    markers = np.flatnonzero(ev["kind"] == STEP)
    if len(markers) < steps + 2:
        return trace, len(markers)
    cut = markers[steps + 1]
    return Trace.from_events(np.array(ev[:cut])), steps + 1


def compare(trace: Trace, plan: Plan | None = None, plan_steps: int = 3, limit: int | None = None,
            time_limit: float = 2.0, timeline_points: int = 0) -> tuple[list[dict], dict]:
    """Rows (dicts with ROW_KEYS and more) for pytorch, pytorch-expandable and stalloc, and a
    dict saying how the stalloc row was made."""
    rows = [simulate(trace, name, memory_limit=limit, timeline_points=timeline_points)
            for name in ("pytorch", "pytorch-expandable")]
    how = {"plan": "given"}
    if plan is None:
        part, kept = first_steps(trace, plan_steps)
        plan = make_plan(part, time_limit=time_limit)
        how = {"plan": "made from the trace's first steps" if part is not trace else "made from the whole trace",
               "plan_events": len(part), "plan_step_markers": kept, "trace_events": len(trace)}
    info = plan.info()
    r = replay(trace, plan, backend="virtual", timeline_points=timeline_points)
    stalloc_row = {
        "allocator": "stalloc",
        "peak_allocated": r["peak_allocated"],
        "peak_reserved": r["peak_reserved"],
        "waste": r["peak_reserved"] - r["peak_allocated"],
        "fragmentation": r["fragmentation"],
        "ooms": int(limit is not None and r["peak_reserved"] > limit),
        "hits": r["hits"], "misses": r["misses"], "fallbacks": r["fallbacks"],
        "plan_pool": info.pool_size, "plan_ratio": info.ratio,
    }
    for key in ("timeline_event", "timeline_allocated", "timeline_reserved"):
        if key in r:
            stalloc_row[key] = r[key]
    rows.append(stalloc_row)
    base = rows[0]["waste"]
    for row in rows:
        row["waste_vs_pytorch"] = row["waste"] / base if base else (0.0 if not row["waste"] else float("inf"))
    return rows, how


def plot(rows: list[dict], path, title: str = "") -> None:
    """Reserved and allocated memory over the run, one panel per allocator."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        raise RuntimeError("plotting needs matplotlib: pip install matplotlib") from e
    fig, axes = plt.subplots(len(rows), 1, figsize=(10, 2.6 * len(rows)), sharex=True, sharey=True)
    for ax, row in zip(np.atleast_1d(axes), rows):
        if "timeline_event" not in row or not len(row["timeline_event"]):
            raise ValueError(f"no timeline for {row['allocator']}: compare(..., timeline_points=N)")
        x = row["timeline_event"]
        ax.fill_between(x, row["timeline_reserved"] / 2**20, step="post", alpha=0.35, label="reserved")
        ax.plot(x, row["timeline_allocated"] / 2**20, drawstyle="steps-post", lw=1, color="k",
                label="allocated")
        ax.set_title(f"{row['allocator']}: peak reserved {row['peak_reserved'] / 2**20:.1f} MiB, "
                     f"fragmentation {row['fragmentation']:.1%}", fontsize=10)
        ax.set_ylabel("MiB")
        ax.legend(loc="upper right", fontsize=8)
    np.atleast_1d(axes)[-1].set_xlabel("event")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
