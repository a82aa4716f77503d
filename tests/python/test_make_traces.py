"""tools/make_traces.py records the held-out convnet family with torch alone (no transformers):
a real run's trace, one step marker per optimizer step, every block freed or live at the end;
tools/make_loop_traces.py records its loops the same way."""

import importlib.util
import os
from collections import Counter

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.filterwarnings("ignore:Profiler won.t be using warmup")


def _load_tool(name: str):
    """tools/<name>.py as a module (tools/ is not a package)."""
    pytest.importorskip("torch")
    spec = importlib.util.spec_from_file_location("_" + name, os.path.join(REPO, "tools", name + ".py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def make_traces():
    return _load_tool("make_traces")


def test_held_out_families_take_only_variants_they_can_run(make_traces):
    for name in make_traces.HELD_OUT:
        assert make_traces.supported(name, "plain") and make_traces.supported(name, "dynpad")
        assert not make_traces.supported(name, "1f1b_vpp")
    assert make_traces.supported("bert", "recompute") and not make_traces.supported("convnet", "recompute")
    assert all(make_traces.supported(m, "1f1b") for m in make_traces.MODELS)


def test_a_convnet_batch_follows_the_shape(make_traces):
    import torch
    s = make_traces.sizes(small=True)
    images, labels = make_traces.make_batch("convnet", (3, 40), s, torch.Generator().manual_seed(0))
    assert tuple(images.shape) == (3, 3, 10, 10) and tuple(labels.shape) == (3,)
    model = make_traces.ConvNet(8)
    assert model(images, labels).ndim == 0


def test_a_seq2seq_target_is_half_the_source_or_a_length_of_its_own(make_traces):
    import torch
    s = make_traces.sizes(small=True)
    gen = torch.Generator().manual_seed(3)
    ids, labels = make_traces.make_batch("t5", (2, 40), s, gen)
    assert tuple(ids.shape) == (2, 40) and tuple(labels.shape) == (2, 20)
    after_half = torch.rand(1, generator=gen)  # half draws no length: the stream goes on as before
    gen = torch.Generator().manual_seed(3)
    make_traces.make_batch("t5", (2, 40), s, gen)
    assert torch.equal(torch.rand(1, generator=gen), after_half)
    gen = torch.Generator().manual_seed(3)
    lengths = set()
    for _ in range(20):
        ids, labels = make_traces.make_batch("t5", (2, 40), s, gen, own_target=True)
        assert tuple(ids.shape) == (2, 40) and labels.shape[0] == 2 and 10 <= labels.shape[1] <= 40
        lengths.add(labels.shape[1])
    assert len(lengths) > 3
    # only t5 has a target of its own
    ids, labels = make_traces.make_batch("gpt2", (2, 40), s, torch.Generator().manual_seed(3), own_target=True)
    assert labels is ids


def test_a_convnet_curriculum_records_a_real_trace(make_traces, tmp_path):
    info = make_traces.record("convnet", "curriculum", 3, True, str(tmp_path), False,
                              make_traces._load_importer())
    ev = np.load(tmp_path / "convnet_curriculum.npz")["events"]
    kinds = ev["kind"]
    assert info["steps"] == 4 == int((kinds == 3).sum())  # construction + 3 optimizer steps
    allocs, frees = ev[kinds == 1], ev[kinds == 2]
    assert len(allocs) > 100 and set(frees["id"]) <= set(allocs["id"])
    # the resolution grows with the curriculum: the last step's input batch (its first request)
    # is 4x the one before (twice the side). Its bytes in all need not grow: oneDNN's
    # convolution buffers follow the algorithm it picks for the shape and the CPU (on an AVX2
    # AMD EPYC the last step asked 1.49 MB against 1.63 MB before it).
    marks = np.flatnonzero(kinds == 3)
    before, last = ev[marks[2]:marks[3]], ev[marks[3]:]
    first = lambda step: int(step["size"][step["kind"] == 1][0])  # noqa: E731
    assert first(last) == 4 * first(before)


def _live_after_first_step(ev):
    """Bytes live at the second step marker: weights and optimizer state."""
    marks = np.flatnonzero(ev["kind"] == 3)
    sizes = {}
    for e in ev[:marks[2]]:
        if e["kind"] == 1:
            sizes[int(e["id"])] = int(e["size"])
        elif e["kind"] == 2:
            sizes.pop(int(e["id"]), None)
    return sum(sizes.values())


def _has_run_of(ev, wanted):
    """Whether the second optimizer step (the run's last) makes the sizes `wanted` (a Counter)
    among one run of requests with no free between them."""
    marks = np.flatnonzero(ev["kind"] == 3)
    run = Counter()
    for e in ev[marks[2]:]:
        if e["kind"] == 1:
            run[int(e["size"])] += 1
            if not wanted - run:
                return True
        elif e["kind"] == 2:
            run = Counter()
    return False


def test_the_optimizer_choice_shapes_the_recorded_step(make_traces, tmp_path):
    importer = make_traces._load_importer()
    runs = {}
    for kind in make_traces.OPTIMIZERS:
        out = tmp_path / kind
        out.mkdir()
        make_traces.record("convnet", "plain", 2, True, str(out), False, importer, optimizer=kind)
        runs[kind] = np.load(out / "convnet_plain.npz")["events"]
    params = list(make_traces.ConvNet(make_traces.sizes(True)["hidden"] // 8).parameters())
    weights = sum(p.numel() * 4 for p in params)
    # AdamW keeps two tensors a parameter (and a step count each), SGD with momentum one
    assert _live_after_first_step(runs["adamw"]) >= 3 * weights
    assert _live_after_first_step(runs["adamw_foreach"]) >= 3 * weights
    assert 2 * weights <= _live_after_first_step(runs["sgd"]) < 3 * weights
    # foreach makes a temporary for every parameter at once; one tensor at a time does not
    every_param = Counter(p.numel() * 4 for p in params)
    assert _has_run_of(runs["adamw_foreach"], every_param)
    assert not _has_run_of(runs["adamw"], every_param)
    with pytest.raises(ValueError, match="unknown optimizer"):
        make_traces.make_optimizer("lion", [])


def _second_step(ev):
    marks = np.flatnonzero(ev["kind"] == 3)
    step = ev[marks[2]:]
    return step[step["kind"] == 1]


def test_lazy_micro_batches_are_made_each_before_its_forward(make_traces, tmp_path):
    importer = make_traces._load_importer()
    steps = {}
    for how in ("upfront", "lazy"):
        out = tmp_path / how
        out.mkdir()
        make_traces.record("convnet", "accum", 2, True, str(out), False, importer, micro_batches=how)
        steps[how] = _second_step(np.load(out / "convnet_accum.npz")["events"])["size"].tolist()
    s = make_traces.sizes(True)
    r = max(4, s["seq"] // 4)
    images = s["batch"] * 3 * r * r * 4  # float32 images of side seq / 4
    where = {how: [i for i, size in enumerate(sizes) if size == images] for how, sizes in steps.items()}
    # both micro-batches' images first, or the second only after the first's forward and backward
    assert where["upfront"][:2] == [0, 2]
    assert where["lazy"][0] == 0 and where["lazy"][1] > len(steps["lazy"]) // 4
    assert sorted(steps["upfront"]) == sorted(steps["lazy"])  # the same requests, in another order


def test_mixed_precision_and_clipping_shape_the_recorded_step(make_traces, tmp_path):
    importer = make_traces._load_importer()
    runs = {}
    for tag, kw in (("plain", {}), ("amp", {"amp": True}), ("clip", {"clip_grad": 1.0})):
        out = tmp_path / tag
        out.mkdir()
        make_traces.record("convnet", "plain", 2, True, str(out), False, importer, **kw)
        runs[tag] = _second_step(np.load(out / "convnet_plain.npz")["events"])
    # under autocast every convolution's weight is cast to bfloat16 (half its bytes) once a step
    params = list(make_traces.ConvNet(make_traces.sizes(True)["hidden"] // 8).parameters())
    conv_halves = Counter(p.numel() * 2 for p in params if p.ndim == 4)
    assert all(Counter(runs["amp"]["size"].tolist())[s] >= n for s, n in conv_halves.items())
    assert not all(Counter(runs["plain"]["size"].tolist())[s] >= n for s, n in conv_halves.items())
    # clipping adds its norms' temporaries and nothing else: more requests, the same largest
    assert len(runs["clip"]) > len(runs["plain"])
    assert runs["clip"]["size"].max() == runs["plain"]["size"].max()
    assert make_traces.supported("llama", "1f1b") and not make_traces.supported("llama", "1f1b", amp=True)
    with pytest.raises(ValueError, match="pipeline"):
        make_traces.record("llama", "1f1b_vpp", 1, True, str(tmp_path), False, importer, amp=True)
    with pytest.raises(SystemExit):
        make_traces.main(["--clip-grad", "0", "--models", "convnet", "--out", str(tmp_path / "x")])


@pytest.fixture(scope="module")
def make_loop_traces():
    return _load_tool("make_loop_traces")


def test_a_loop_of_another_shape_records_a_real_trace(make_loop_traces, tmp_path):
    # tools/make_loop_traces.py's U-Net: the image size changes every 4 steps, so step 5 (the
    # first at 96 px) asks for more bytes than step 4 (the last at 64 px)
    import torch
    threads = torch.get_num_threads()  # main() sets one, for the recording's order
    try:
        assert make_loop_traces.main(["--out", str(tmp_path), "--loops", "unet_multiscale", "--steps", "5"]) == 0
    finally:
        torch.set_num_threads(threads)
    ev = np.load(tmp_path / "unet_multiscale.npz")["events"]
    kinds = ev["kind"]
    assert int((kinds == 3).sum()) == 6  # construction + 5 optimizer steps
    allocs, frees = ev[kinds == 1], ev[kinds == 2]
    assert set(frees["id"]) <= set(allocs["id"])
    marks = np.flatnonzero(kinds == 3)
    before, after = ev[marks[4]:marks[5]], ev[marks[5]:]
    assert after["size"][after["kind"] == 1].sum() > before["size"][before["kind"] == 1].sum()
    # the shipped recording is the same run, 16 steps long: the same allocs and frees in the
    # same order, and the same sizes but for oneDNN's convolution buffers, which follow the
    # CPU's vector width (on an AVX2 AMD EPYC 3.6% of these requests, most at half the size)
    shipped = np.load(os.path.join(REPO, "tests", "data", "traces", "loops", "unet_multiscale.npz"))["events"]
    n = marks[5]
    assert np.array_equal(shipped["kind"][:n], ev["kind"][:n])
    assert np.mean(shipped["size"][:n] == ev["size"][:n]) > 0.9


def test_make_loop_traces_refuses_a_step_count_under_one(make_loop_traces, tmp_path, capsys):
    with pytest.raises(SystemExit):
        make_loop_traces.main(["--out", str(tmp_path), "--steps", "0"])
    assert "--steps must be at least 1" in capsys.readouterr().err
