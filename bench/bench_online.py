"""The online lifecycle on training runs, against PyTorch's caching allocator (simulated,
default and expandable segments): waste per trace and what each plan did.

stalloc meets each trace as a first run does (stalloc.replay with online=True, the defaults of
torch_backend.enable()): it records the first steps, plans them on a background thread (the
replay waits for the plan at the next step boundary, so figures do not depend on the machine),
switches to the plan or declines it when the growable pool already needs less, and re-plans
when a step misses the plan. It never reads ahead. Peak reserved counts the recording phase.

    python bench/bench_online.py [--traces DIR ...] [--growable 0|1] [--scale K] [--device-lag N]
        [--online-param KEY=VALUE ...] [--repeat-steps N] [--draw-steps N [--seed S]]

Waste = peak reserved - peak allocated. repeats: whether the run is exactly periodic (from its
middle step on, each step asks for the sizes of the step before), where the goal is at most 5%
of PyTorch's default waste; the summary counts those runs, and those whose lower bound alone,
rounded up to 2 MiB granules, is over that. Plans: switched (s) or declined (d) per plan made;
from plans: the share of the run's requested bytes served at their planned offsets (the rest came
from the growable pool: on a GPU the plan's hits are the fast path); plan ms: the longest
planning time; delay ms: the longest wait at a boundary for a plan (a replay waits; a live run
switches at the first boundary after planning is done instead); hints: layouts the growable
pool's layout hints kept / made (one per step it served whole), hint ms: the longest one took
on the hints' thread (placement and two replays of the step); maps/step: granules the run
mapped (moves included; the whole run's over its steps, warm-up too), each tens of us of
driver calls on a GPU (README, "On a GPU"); late maps: the same over the second half of the
steps only (the run replayed again up to its middle step marker and subtracted), the steady
state's cost where a run has one. --scale K multiplies every size
by K (the allocation order unchanged), as bench_compare.py does; --layout-hints 0 turns the hints
off (best fit alone). --device-lag N models a GPU running N allocator calls behind the host
(docs/online.md, "On an asynchronous device"): freed granules stay in use by queued work that
long, and a `waits` column counts the times the host waited for the device. --online-param
passes an online parameter to every replay; --repeat-steps N makes each run longer, its steps
from the third marker on N times over (bench_online.repeated_steps), where late maps show the
steady state of a run whose sizes vary. --draw-steps N makes a longer run whose steps come in no
recorded order: N steps drawn at random (--seed) from its steps from the third marker on, after
the steps before it (bench_online.drawn_steps), as a long run that pads, ramps or evaluates at
no fixed rhythm would.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import numpy as np

import stalloc
from stalloc.baseline import simulate
from stalloc.replay import parse_online_params, replay
from stalloc.compare import first_steps
from stalloc.session import step_sizes
from stalloc.trace import ALLOC, FREE, STEP


REPO = Path(__file__).resolve().parents[1]
NEVER = 2**64 - 1


def mib(n: float) -> str:
    return f"{n / 2**20:.2f}"


def repeats_exactly(t) -> bool:
    """Whether the run is exactly periodic: from its middle step marker on, every step asks for
    the sizes the step before it asked for, position by position. MoE routing, dynamic padding,
    a curriculum or a ramp in the second half, or evaluation passes between steps, all break it.
    The issue's line for such runs: at most 5% of PyTorch's default waste."""
    steps = step_sizes(t)
    tail = steps[len(steps) // 2 - 1:] if len(steps) >= 3 else []
    return bool(tail) and all(np.array_equal(a, b) for a, b in zip(tail, tail[1:]))


def repeated_steps(t, times: int, first: int = 3):
    """A longer run made from a recorded one: its steps from the `first`-th step marker on,
    `times` times over, in order (steps_in_order, whose frees of blocks from before a step take
    the block its like made last time)."""
    marks = int(np.count_nonzero(np.asarray(t.events)["kind"] == STEP))
    if times <= 1 or marks <= first:
        return t
    return steps_in_order(t, list(range(marks - first)) * times, first)


def drawn_steps(t, count: int, seed: int = 0, first: int = 3):
    """A longer run whose steps do not come in the recorded order: `count` steps drawn at random
    (with replacement, from `seed`) from the recorded run's steps from the `first`-th step marker
    on, after the recorded steps before it (steps_in_order)."""
    marks = int(np.count_nonzero(np.asarray(t.events)["kind"] == STEP))
    if count < 1 or marks <= first:
        return t
    return steps_in_order(t, np.random.default_rng(seed).integers(marks - first, size=count), first)


def steps_in_order(t, picks, first: int = 3):
    """The recorded steps before the `first`-th step marker, then, for each k in `picks`, the
    recorded run's k-th step from that marker on. A step's requests get ids of their own. Its
    frees of blocks from before it (a gradient held until the next zero_grad) take, from the
    latest step that has one live, the block made at the same place: the same size, as
    many requests of that size into its step (so a run of one repeated step is the recording);
    failing that the block of that size made last and still live; a free with no block is
    dropped."""
    ev = np.asarray(t.events)
    marks = np.flatnonzero(ev["kind"] == STEP)
    if len(marks) <= first:
        raise ValueError(f"the run has {len(marks)} step markers; its steps from marker {first} on are none")
    kinds, ids, sizes = ev["kind"].tolist(), ev["id"].tolist(), ev["size"].tolist()
    place: dict[int, tuple[int, int]] = {}  # id -> (size, how many of that size its step made before it)
    made_here: dict[int, int] = {}
    for kind, ident, size in zip(kinds, ids, sizes):
        if kind == STEP:
            made_here = {}
        elif kind == ALLOC:
            place[ident] = (size, made_here.get(size, 0))
            made_here[size] = made_here.get(size, 0) + 1
    live: dict[int, list[int]] = {}  # size -> ids live now, oldest first
    made: list[dict[tuple[int, int], int]] = [{}]  # per step so far: (size, rank) -> id
    for kind, ident, size in zip(kinds[: marks[first]], ids[: marks[first]], sizes[: marks[first]]):
        if kind == STEP:
            made.append({})
        elif kind == ALLOC:
            live.setdefault(size, []).append(ident)
            made[-1][place[ident]] = ident
        elif kind == FREE and ident in place:
            live[place[ident][0]].remove(ident)
    bounds = list(marks[first:]) + [len(ev)]
    steps = [ev[a:b] for a, b in zip(bounds, bounds[1:])]
    stride = int(ev["id"].max()) + 1
    out = [ev[: marks[first]]]
    for k, pick in enumerate(picks, start=1):
        b = steps[pick].copy()
        keep = np.ones(len(b), bool)
        own: dict[int, int] = {}
        here: dict[tuple[int, int], int] = {}
        made.append(here)
        for j, (kind, ident) in enumerate(zip(b["kind"].tolist(), b["id"].tolist())):
            if kind == ALLOC:
                own[ident] = here[place[ident]] = ident + k * stride
                b["id"][j] = own[ident]
                live.setdefault(place[ident][0], []).append(own[ident])
            elif kind == FREE:
                if ident not in place:
                    keep[j] = False
                    continue
                size = place[ident][0]
                gone = own.get(ident)
                if gone is None:
                    ours = live.get(size, [])
                    gone = next((m[place[ident]] for m in reversed(made)
                                 if m is not here and m.get(place[ident]) in ours), ours[-1] if ours else None)
                if gone is None or gone not in live.get(size, ()):
                    keep[j] = False
                    continue
                b["id"][j] = gone
                live[size].remove(gone)
        out.append(b[keep])
    return stalloc.Trace.from_events(np.concatenate(out))


def row(path: Path, growable: bool, scale: int = 1, hints: int = 1, lag: int = 0,
        params: dict | None = None, repeat: int = 1, draw: int = 0, seed: int = 0) -> dict:
    t = repeated_steps(stalloc.load_trace(path), repeat)
    t = drawn_steps(t, draw, seed)
    t = t.scaled(scale)
    torch = simulate(t, "pytorch")["waste"]
    expandable = simulate(t, "pytorch-expandable")["waste"]
    online = {"layout_hints": hints, **(params or {})}
    r = replay(t, online=online, growable_pool=growable, device_lag=lag)
    # The second half's maps: the run again up to its middle step marker (no look-ahead, so the
    # same figures up to there), subtracted.
    markers = int((np.asarray(t.events)["kind"] == STEP).sum())
    half = (markers + 1) // 2
    head, _ = first_steps(t, half - 1)
    late_maps = r["backend_allocs"] - replay(head, online=online, growable_pool=growable,
                                             device_lag=lag)["backend_allocs"]
    waste = r["peak_reserved"] - r["peak_allocated"]
    plans = "".join("s" if p["switched_step"] != NEVER else "d" if p["declined"] else "-"
                    for p in r["plans"])
    ev = np.asarray(t.events)
    asked = int(ev["size"][ev["kind"] == ALLOC].sum())
    from_plans = sum(s["hit_bytes"] for s in r["steps"]) / asked if asked else 0.0
    return dict(trace=path.stem, lb=t.lower_bound, periodic=repeats_exactly(t), torch=torch, expandable=expandable, waste=waste,
                plans=plans or "none", from_plans=from_plans,
                plan_ms=max((p["plan_seconds"] for p in r["plans"]), default=0) * 1e3,
                delay_ms=max((-p["delay_seconds"] for p in r["plans"]), default=0) * 1e3,
                hints=f"{r['hint_layouts_kept']}/{r['hint_layouts']}", hint_ms=r["hint_seconds_max"] * 1e3,
                waits=r["device_waits"], maps=r["backend_allocs"] / max(1, t.summary().steps),
                late_maps=late_maps / max(1, markers - half))


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", nargs="+", default=[str(REPO / "tests" / "data" / "traces")])
    ap.add_argument("--growable", type=int, default=1, help="the growable pool (default 1)")
    ap.add_argument("--scale", type=int, default=1, help="multiply every size by this (default 1)")
    ap.add_argument("--layout-hints", type=int, default=1, choices=(0, 1),
                    help="the growable pool's layout hints (default 1; 0: best fit alone)")
    ap.add_argument("--device-lag", type=int, default=0, metavar="N",
                    help="model a device N allocator calls behind the host (default 0: synchronous)")
    ap.add_argument("--online-param", action="append", default=[], metavar="KEY=VALUE",
                    help="an online parameter (docs/online.md), e.g. pool_at_ends_after=4; repeatable")
    ap.add_argument("--repeat-steps", type=int, default=1, metavar="N",
                    help="each run's steps from its third step marker on, N times over (a longer run, "
                         "for the steady state; default 1: the run as recorded)")
    ap.add_argument("--draw-steps", type=int, default=0, metavar="N",
                    help="a longer run whose steps come in no recorded order: N steps drawn at random "
                         "from each run's steps from its third step marker on (default 0: none)")
    ap.add_argument("--seed", type=int, default=0, help="the seed --draw-steps draws with (default 0)")
    args = ap.parse_args(argv)
    if args.draw_steps < 0:
        ap.error(f"--draw-steps must be 0 or more, not {args.draw_steps}")
    try:
        params = parse_online_params(args.online_param)
    except ValueError as e:
        raise SystemExit(f"--online-param: {e}") from None
    paths = [p for d in args.traces for p in sorted(Path(d).glob("*.npz")) + sorted(Path(d).glob("*.stalloc"))]
    if not paths:
        raise SystemExit(f"no traces (*.npz, *.stalloc) in {' '.join(args.traces)}")
    head = (f"{'trace':<24} {'lower bound MiB':>15} {'2 MiB floor':>11} {'PyTorch waste':>13} {'expandable waste':>16} "
            f"{'stalloc waste':>13} {'vs PyTorch':>10} {'vs expandable':>13} {'repeats':>7} {'plans':>6} "
            f"{'from plans':>10} {'plan ms':>8} {'delay ms':>8} {'hints':>6} {'hint ms':>8} {'maps/step':>9} {'late maps':>9}"
            + (f" {'waits':>7}" if args.device_lag else ""))
    print(head + "\n" + "-" * len(head))
    vs_ex, shares, maps, late, wastes, periodic = [], [], [], [], [], []
    for p in paths:
        r = row(p, bool(args.growable), args.scale, args.layout_hints, args.device_lag, params, args.repeat_steps,
                args.draw_steps, args.seed)
        shares.append(r["from_plans"])
        maps.append(r["maps"])
        late.append(r["late_maps"])
        a = r["waste"] / r["torch"] if r["torch"] else float("nan")
        b = r["waste"] / r["expandable"] if r["expandable"] else float("nan")
        vs_ex.append(b)
        wastes.append(r["waste"])
        floor = -(-r["lb"] // (2 << 20)) * (2 << 20) - r["lb"]  # the lower bound in whole 2 MiB granules
        if r["periodic"]:  # at or under 5% of PyTorch's; or the floor alone is over that
            periodic.append("met" if r["waste"] <= 0.05 * r["torch"] else
                            "floor" if floor > 0.05 * r["torch"] else "missed")
        print(f"{r['trace']:<24} {mib(r['lb']):>15} {mib(floor):>11} {mib(r['torch']):>13} {mib(r['expandable']):>16} "
              f"{mib(r['waste']):>13} {a:>10.1%} {b:>13.1%} {'yes' if r['periodic'] else 'no':>7} {r['plans']:>6} {r['from_plans']:>10.1%} "
              f"{r['plan_ms']:>8.1f} {r['delay_ms']:>8.1f} {r['hints']:>6} {r['hint_ms']:>8.1f} {r['maps']:>9.1f} "
              f"{r['late_maps']:>9.1f}"
              + (f" {r['waits']:>7}" if args.device_lag else ""))
    print(f"\nstalloc waste, all traces: {mib(sum(wastes))} MiB; "
          f"median stalloc waste / expandable segments' waste: {statistics.median(vs_ex):.1%}; "
          f"at most half on {sum(v <= 0.5 for v in vs_ex)} of {len(vs_ex)} traces; "
          f"bytes from plans: mean {statistics.mean(shares):.1%}, some on {sum(v > 0 for v in shares)}; "
          f"granules mapped per step: median {statistics.median(maps):.1f}, summed {sum(maps):.1f}; "
          f"in the second half: median {statistics.median(late):.1f}, summed {sum(late):.1f}; "
          f"runs that repeat exactly: {len(periodic)}, at or under 5% of PyTorch's waste on "
          f"{periodic.count('met')}, over it on {periodic.count('missed')}, "
          f"held over it by the 2 MiB floor alone on {periodic.count('floor')}")


if __name__ == "__main__":
    main()
