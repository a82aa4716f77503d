"""Layout hints under random training-like runs: whatever the steps look like (kinds that
come and go, shapes that change, gradients that live into the next step, blocks kept for
good), an online replay on the host backend keeps every block's bytes its own (each block is
patterned and checked at its free, and the overlap check runs on every alloc)."""

from __future__ import annotations

import pytest

from stalloc.replay import replay

from test_online import Events

hypothesis = pytest.importorskip("hypothesis")  # scripts/setup_env.sh installs it
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

KiB = 1024

# A kind of step: (layers, activation sizes, temporary sizes), in units of 64 KiB.
kinds = st.tuples(st.integers(2, 8), st.lists(st.integers(1, 48), min_size=8, max_size=8),
                  st.lists(st.integers(1, 24), min_size=8, max_size=8))


def run(step_kinds, order, keep_grads, scales) -> Events:
    e = Events()
    e.step(0)
    kept = [e.alloc(256 * KiB * (1 + i % 3)) for i in range(4)]  # weights
    grads = []
    for n, (k, scale) in enumerate(zip(order, scales), start=1):
        layers, act, tmp = step_kinds[k % len(step_kinds)]
        e.step(n)
        for g in grads:  # zero_grad: the step before's gradients go first
            e.free(g)
        grads = []
        acts, t = [], None
        for i in range(layers):
            acts.append(e.alloc(act[i] * scale * 64 * KiB))
            if t is not None:
                e.free(t)  # a temporary lives past the next activation
            t = e.alloc(tmp[i] * scale * 64 * KiB)
        e.free(t)
        for i, a in reversed(list(enumerate(acts))):
            if keep_grads:
                grads.append(e.alloc(act[i] * 32 * KiB))
            e.free(a)
        if n == 2:
            kept.append(e.alloc(512 * KiB))  # state created once, between steps' blocks
    return e


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step_kinds=st.lists(kinds, min_size=1, max_size=3),
       order=st.lists(st.integers(0, 2), min_size=4, max_size=12),
       keep_grads=st.booleans(), data=st.data())
def test_hints_keep_every_block_its_own(step_kinds, order, keep_grads, data):
    scales = data.draw(st.lists(st.sampled_from([1, 1, 1, 2]), min_size=len(order), max_size=len(order)))
    t = run(step_kinds, order, keep_grads, scales).trace()
    r = replay(t, online=True, backend="host", check=True)
    assert r["checked_events"] == r["requests"]
    assert r["peak_reserved"] >= r["peak_allocated"]
