"""Record, plan and switch in one process: the lifecycle behind the framework adapters.

A :class:`PlanSession` watches an allocator through a training run:

1. **recording**: the first ``record_steps`` steps are served by the fallback pool while
   libstalloc records them;
2. **planning**: a background thread plans the steady-state steps (the recording without its
   first step, which allocates optimizer state once) for this process, and, when a
   ``plan_path`` is given, the whole recorded run (set-up included) for the next run;
3. **planned**: at the next step boundary the steady-state plan is loaded and the fallback
   pool's cached segments are returned; tensors made before stay where they are.

A later run that finds its rank's saved plan loads it before the first allocation, so the
whole run, weights included, is served from the plan. If a step mostly misses the plan (model
or batch changed), a warning says so; memory stays correct either way, since the runtime serves
misses elsewhere and never hands out bytes that are still live.

With ``online=True`` (what ``torch_backend.enable()`` uses) the run's own switching is the C
library's online lifecycle (docs/online.md: record, plan on a thread, switch or decline, re-plan
or drop on drift; the same code `stalloc replay --online` drives); the session then only saves
the whole recorded run's plan for the next run, and reports the lifecycle's state. With
``background=False`` the first boundary after a plan was started waits for it (the library's
``wait_for_plan``), so what is switched when does not depend on the machine's speed (tests).

The session is framework-neutral: ``torch_backend`` calls :meth:`step` from an optimizer hook.
"""

from __future__ import annotations

import collections.abc
import os
import tempfile
import threading
import warnings

import numpy as np

from .errors import InvalidArgumentError
from .plan import Plan, plan as make_plan
from .trace import ALLOC, FREE, FLAG_UNMATCHED, STEP, Trace

__all__ = ["rank_plan_path", "steady_part", "check_record_steps", "online_params", "PlanSession"]

RECORDING, PLANNING, PLANNED, FAILED = "recording", "planning", "planned", "failed"
POOL = "pool"  # online: no plan used, the growable pool serves the run
_ONLINE_STATE = {"recording": RECORDING, "planning": PLANNING, "serving": PLANNED, "pool": POOL,
                 "off": FAILED}


def rank_plan_path(plan_path, rank: int) -> str | None:
    """A plan directory holds one file per rank (``rank<R>.stplan``); a file path is used as is."""
    if plan_path is None:
        return None
    plan_path = os.fspath(plan_path)
    if os.path.isdir(plan_path) or plan_path.endswith(os.sep) or not os.path.splitext(plan_path)[1]:
        return os.path.join(plan_path, f"rank{rank}.stplan")
    return plan_path


def steady_part(trace: Trace, skip_steps: int = 1) -> Trace:
    """The trace from the start of step ``skip_steps`` on. Frees of blocks allocated earlier
    are flagged as unmatched, so those blocks (weights, optimizer state) are left out of the
    plan: they already live outside its pool."""
    ev = np.array(trace.events)
    starts = np.flatnonzero(ev["kind"] == STEP)
    if len(starts) <= skip_steps:
        raise ValueError(f"the recording has {len(starts)} step markers; need more than {skip_steps}")
    ev = ev[starts[skip_steps]:].copy()
    allocated = set(ev["id"][ev["kind"] == ALLOC].tolist())
    frees = np.flatnonzero(ev["kind"] == FREE)
    earlier = np.array([ev["id"][i] not in allocated for i in frees], dtype=bool)
    ev["flags"][frees[earlier]] |= FLAG_UNMATCHED
    return Trace.from_events(ev)


def step_sizes(trace: Trace) -> list[np.ndarray]:
    """The sizes each complete step asked for, in order: one array per pair of consecutive step
    markers (what comes before the first marker or after the last is not a step)."""
    ev = trace.events
    marks = np.flatnonzero(ev["kind"] == STEP)
    return [ev["size"][a + 1:b][ev["kind"][a + 1:b] == ALLOC] for a, b in zip(marks[:-1], marks[1:])]


def steps_vary(trace: Trace) -> bool:
    """Whether the recorded run changed shape, by the online lifecycle's rule: among its
    trailing complete steps of one kind (the same number of allocations), some position's size
    differs (dynamic padding, a curriculum, MoE routing). A plan saved from such a run misses
    on the next one, which the growable pool serves better."""
    steps = step_sizes(trace)
    if not steps:
        return False
    last, k = steps[-1], len(steps) - 1
    while k > 0 and len(steps[k - 1]) == len(last):
        k -= 1
    return any(not np.array_equal(s, last) for s in steps[k:-1])


def check_record_steps(record_steps: int) -> None:
    """A session records at least two steps: the first is warm-up (the optimizer makes its state
    there), so a plan from it alone would not repeat."""
    if record_steps < 2:
        raise ValueError(f"record_steps must be at least 2 (got {record_steps}; the first step is warm-up)")


def online_params(record_steps: int, time_limit: float, online, background: bool = True) -> dict:
    """The online lifecycle's parameters (stalloc_online_params_t fields) a session with these
    arguments starts it with: a time limit of at most 1 s per plan, the fields of an ``online``
    dict over the arguments."""
    params = dict(record_steps=record_steps, time_limit=min(time_limit, 1.0),
                  wait_for_plan=0 if background else 1)
    if isinstance(online, collections.abc.Mapping):
        params.update(online)
    return params


class PlanSession:
    """See the module docstring. ``allocator`` is a stalloc.Allocator serving the run."""

    def __init__(self, allocator, record_steps: int = 3, plan_path=None, rank: int = 0,
                 time_limit: float = 2.0, background: bool = True, save: bool = True,
                 trace_dir=None, online: bool | collections.abc.Mapping = False):
        given = online if isinstance(online, collections.abc.Mapping) else None  # stalloc_online_params_t fields
        if given is not None:  # its record_steps is the session's too
            record_steps = given.get("record_steps", record_steps)
        check_record_steps(record_steps)
        self.allocator = allocator
        self.record_steps = record_steps
        self.plan_file = rank_plan_path(plan_path, rank)
        self.rank = rank
        self.time_limit = time_limit
        self.background = background
        self.save = save
        self.steps = 0
        self.online = given is not None or bool(online)
        self._state = RECORDING
        self.plan: Plan | None = None
        self.plan_source = None  # "saved" (loaded at start) or "planned" (in this process)
        self.saved_plan_file = None  # where this run's whole-run plan was written
        self.save_skipped = None  # why no whole-run plan was saved, if it was not
        self.error: BaseException | None = None
        self._tmp = tempfile.TemporaryDirectory(prefix="stalloc-", dir=trace_dir)
        self.trace_path = os.path.join(self._tmp.name, f"rank{rank}.stalloc")
        self._planned = threading.Event()  # set when planning has finished, well or not
        self._misfit_warned = False
        self._last_counts = (0, 0)
        if self.plan_file and os.path.exists(self.plan_file) and self._load_saved():
            allocator.step(0)
            return
        if self.online:
            allocator.online_start(**online_params(record_steps, time_limit, online, background))
            self.plan_source = "online"
            self._saving = bool(save and self.plan_file)
            if self._saving and not self._record():  # the whole recorded run, planned for the next run
                self._saving = False
                self.save_skipped = ("the allocator was already recording a trace of its own "
                                     "(STALLOC_RECORD_PATH): plan that trace for the next run")
                self._planned.set()
            allocator.step(0)
            return
        if not self._record():
            self.state = FAILED
            self._planned.set()  # nothing will plan: wait() returns at once
            self.error = RuntimeError("the allocator was already recording a trace of its own "
                                      "(STALLOC_RECORD_PATH), so the session could not record")
            warnings.warn(f"stalloc: {self.error}; the run goes on with the fallback pool (the "
                          "online lifecycle has no such limit)", RuntimeWarning, stacklevel=2)
        allocator.step(0)

    def _record(self) -> bool:
        """Starts the session's recording; False where the allocator already records (its
        record_path, STALLOC_RECORD_PATH: the user's own trace of the whole run). One recorder
        per allocator, and stopping it is the user's, so the session leaves it alone."""
        try:
            self.allocator.record_start(self.trace_path)
        except InvalidArgumentError:
            return False
        return True

    @property
    def state(self) -> str:
        """recording, planning, planned, failed; online also pool (no plan used)."""
        if self.online and self.plan_source == "online":
            return _ONLINE_STATE[self.allocator.online_info()["state"]]
        return self._state

    @state.setter
    def state(self, value: str) -> None:
        self._state = value

    def _load_saved(self) -> bool:
        try:
            p = Plan.load(self.plan_file)
            self.allocator.load_plan(p)
        except Exception as e:
            warnings.warn(f"stalloc: cannot use the saved plan {self.plan_file} ({e}); recording "
                          "and planning again", RuntimeWarning, stacklevel=3)
            return False
        self.plan, self.plan_source, self.state = p, "saved", PLANNED
        return True

    def step(self) -> None:
        """A training step ended (and the next begins)."""
        if self.online and self.plan_source == "online":
            self.steps += 1
            self.allocator.step(self.steps)  # the library's lifecycle acts at this boundary
            if self._saving and self.steps >= self.record_steps:
                self._saving = False
                self.allocator.record_stop()
                threading.Thread(target=self._save_whole_run, daemon=True, name="stalloc-saver").start()
            return
        self.steps += 1
        if self.state == PLANNING and self._planned.is_set():
            self._switch()
        self.allocator.step(self.steps)
        if self.state == RECORDING and self.steps >= self.record_steps:
            self.allocator.record_stop()
            self.state = PLANNING
            if self.background:
                threading.Thread(target=self._plan_safely, daemon=True, name="stalloc-planner").start()
            else:
                self._plan_safely()
        elif self.state == PLANNED and self.steps > 1:
            self._watch_fit()

    def _save_whole_run(self) -> None:
        try:
            whole = Trace.load(self.trace_path)
            if steps_vary(whole):
                # the next run is better served as this one was: recorded and planned online
                self.save_skipped = ("the recorded steps changed shape (sizes differ between "
                                     "steps of one kind): a saved plan would miss on the next run")
                return
            os.makedirs(os.path.dirname(self.plan_file) or ".", exist_ok=True)
            make_plan(whole, time_limit=self.time_limit).save(self.plan_file)
            self.saved_plan_file = self.plan_file
        except Exception as e:  # never raised into the training loop
            self.error = e
        finally:
            self._planned.set()

    def wait(self, timeout: float | None = None) -> bool:
        """Blocks until planning has finished (the switch still waits for the next step);
        False if it had not finished within timeout or has not started."""
        return self.state != RECORDING and self._planned.wait(timeout)

    def _plan_safely(self) -> None:
        try:
            whole = Trace.load(self.trace_path)
            self.plan = make_plan(steady_part(whole), time_limit=self.time_limit)
            self.plan_source = "planned"
            if self.save and self.plan_file:
                # The next run loads this before its first allocation: plan the whole run.
                os.makedirs(os.path.dirname(self.plan_file) or ".", exist_ok=True)
                make_plan(whole, time_limit=self.time_limit).save(self.plan_file)
                self.saved_plan_file = self.plan_file
        except Exception as e:  # surfaced at the switch, never raised into the training loop
            self.error = e
        finally:
            self._planned.set()

    def _switch(self) -> None:
        if self.plan is None:
            self.state = FAILED
            warnings.warn(f"stalloc: planning failed ({self.error}); the run goes on with the "
                          "fallback pool", RuntimeWarning, stacklevel=3)
            return
        try:
            self.allocator.load_plan(self.plan)
        except Exception as e:
            self.state, self.error = FAILED, e
            warnings.warn(f"stalloc: could not switch to the plan ({e}); the run goes on with "
                          "the fallback pool", RuntimeWarning, stacklevel=3)
            return
        self.state = PLANNED
        self.allocator.release_cached()  # recording-phase segments no longer needed
        s = self.allocator.stats()
        self._last_counts = (s.plan_hits, s.plan_misses)

    def _watch_fit(self) -> None:
        s = self.allocator.stats()
        hits = s.plan_hits - self._last_counts[0]
        misses = s.plan_misses - self._last_counts[1]
        self._last_counts = (s.plan_hits, s.plan_misses)
        if misses > hits and not self._misfit_warned:
            self._misfit_warned = True
            warnings.warn(f"stalloc: the last step missed the plan {misses} times and hit it {hits} "
                          "times: the run no longer matches what was recorded (model or batch "
                          "changed?). Memory stays correct; delete the saved plan to replan.",
                          RuntimeWarning, stacklevel=3)

    def save_plan(self, path) -> None:
        """Saves the plan in use (after the switch) to ``path``."""
        if self.plan is None:
            raise RuntimeError(f"no plan yet (state: {self.state}; planning starts after "
                               f"{self.record_steps} steps)")
        self.plan.save(path)

    def close(self) -> None:
        if self.online and self.plan_source == "online":
            if self._saving:
                self.allocator.record_stop()
            elif self.steps >= self.record_steps and self.plan_file and self.save:
                self._planned.wait()
        elif self._state == RECORDING:
            self.allocator.record_stop()
        elif self._state == PLANNING:
            self._planned.wait()
        self._tmp.cleanup()
