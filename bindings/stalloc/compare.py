"""How much memory stalloc saves on a trace, beside the allocators people use today.

``compare(trace)`` gives one row per allocator: PyTorch's caching allocator and its
expandable segments (simulated, stalloc.baseline), then stalloc as a first run meets the trace
(``stalloc``: the online lifecycle, stalloc.replay with ``online=True``: it records the first
steps, plans them in the background, switches at a step boundary and re-plans when the run
drifts, never reading ahead; peak reserved counts the recording phase too). A second row,
``stalloc-saved-plan``, is what a later run gets when it loads the plan an earlier run saved
(torch_backend's ``plan_path``): the plan made from the trace's first steps (``first_steps``),
loaded before the first allocation, the whole trace replayed (``how["saved"]`` is False where
those first steps changed shape: torch_backend then saves no plan, and a later run is served
online like the first, the ``stalloc`` row). When the trace has too few step
markers for that, the plan comes from the whole trace: that row sees the future and is named
``stalloc-sees-future``; it is never stalloc's result.
"""

from __future__ import annotations

import numpy as np

from .baseline import simulate
from .plan import Plan, plan as make_plan
from .replay import replay
from .session import steps_vary
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


def _row(name: str, r: dict, limit: int | None) -> dict:
    row = {
        "allocator": name,
        "peak_allocated": r["peak_allocated"],
        "peak_reserved": r["peak_reserved"],
        "waste": r["peak_reserved"] - r["peak_allocated"],
        "fragmentation": r["fragmentation"],
        "ooms": int(limit is not None and r["peak_reserved"] > limit),
        "hits": r["hits"], "misses": r["misses"], "fallbacks": r["fallbacks"],
    }
    for key in ("timeline_event", "timeline_allocated", "timeline_reserved", "steps", "plans"):
        if key in r:
            row[key] = r[key]
    return row


def compare(trace: Trace, plan: Plan | None = None, plan_steps: int = 3, limit: int | None = None,
            time_limit: float = 2.0, timeline_points: int = 0, online=True) -> tuple[list[dict], dict]:
    """Rows (dicts with ROW_KEYS and more) for pytorch, pytorch-expandable, stalloc (online,
    unless ``online=False``) and a plan replayed from the first allocation (``plan`` if given,
    else one made from the first steps), and a dict saying how the plan row was made."""
    rows = [simulate(trace, name, memory_limit=limit, timeline_points=timeline_points)
            for name in ("pytorch", "pytorch-expandable")]
    if online:
        params = dict(online) if isinstance(online, dict) else {}
        params.setdefault("time_limit", min(time_limit, 1.0))
        r = replay(trace, backend="virtual", online=params)
        if timeline_points:  # the per-step replay carries no timeline: replay again for it
            r.update({k: v for k, v in replay(trace, backend="virtual", online=params,
                                              timeline_points=timeline_points).items()
                      if k.startswith("timeline_")})
        rows.append(_row("stalloc", r, limit))
    name = "stalloc-plan"
    how = {"plan": "given"}
    if plan is None:
        part, kept = first_steps(trace, plan_steps)
        plan = make_plan(part, time_limit=time_limit)
        whole = part is trace
        name = "stalloc-sees-future" if whole else "stalloc-saved-plan"
        how = {"plan": "made from the whole trace (it sees the future)" if whole else
               "made from the trace's first steps, as a run saves it for the next",
               "plan_events": len(part), "plan_step_markers": kept, "trace_events": len(trace)}
        if not whole:  # torch_backend saves no plan from first steps that changed shape
            how["saved"] = not steps_vary(part)
    info = plan.info()
    r = replay(trace, plan, backend="virtual", timeline_points=timeline_points)
    row = _row(name, r, limit)
    row.update(plan_pool=info.pool_size, plan_ratio=info.ratio)
    rows.append(row)
    how["plan_row"] = name
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
