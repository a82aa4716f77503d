/* classify.c - the class of every request the plan holds (DESIGN.md: persistent, periodic,
 * tiny, dynamic, warm-up) and its lifetime in alloc time.
 *
 * Prologue allocs (before the steady state) are matched by position once: freed before the
 * steady state begins -> warm-up; still live then -> persistent (kept until the end, which is
 * what weights and optimizer state do). Iteration positions are compared over every complete
 * steady iteration: a size that differs anywhere -> dynamic; otherwise periodic, with the
 * latest free seen, relative to its iteration. A periodic request that outlives its next copy
 * (or is never freed although allocated every iteration) cannot hold one fixed range and is
 * dynamic too. Requests of at most tiny_threshold bytes go to the slab. With sizes tolerated
 * (the online lifecycle, runs whose shapes change), a varying position is periodic at the
 * largest size it reached: a smaller request takes the slot, a larger one misses.
 *
 * With step markers, the warm-up step just before the steady state is one more look at the
 * routing: it repeats the iteration up to where it does something else (the optimizer creating
 * its state), so over that aligned prefix a size that differs there also makes a position
 * dynamic. Two recorded iterations leave many MoE positions that repeated their size by chance;
 * a third look catches most of them. Only for a trace whose steady iterations already differ
 * somewhere: a dense model's warm-up step adds nothing, and where it is shifted against the
 * iteration (an extra alloc) it would only mark positions dynamic by mistake. */
#include "plan/classify.h"

void st_classify(const uint64_t* sizes, const uint64_t* free_pos, size_t n,
                 const st_period* period, bool classify_tiny, uint64_t tiny_threshold,
                 size_t warm_start, size_t warm_len, bool tolerate_sizes,
                 st_class_item* prologue, st_class_item* iteration) {
  size_t start = period->start, p = period->period, iters = period->iterations;
  for (size_t i = 0; i < start; i++) {
    st_class_item* c = &prologue[i];
    c->size = sizes[i];
    c->begin = i;
    c->end = free_pos[i];
    if (classify_tiny && sizes[i] <= tiny_threshold)
      c->cls = PLAN_CLASS_TINY;
    else if (p && free_pos[i] <= start)
      c->cls = PLAN_CLASS_WARMUP;
    else if (!p && free_pos[i] != ST_NEVER)
      c->cls = PLAN_CLASS_WARMUP; /* static plan: everything freed happens once */
    else {
      c->cls = PLAN_CLASS_PERSISTENT;
      c->end = ST_NEVER;
    }
  }
  bool routed = false; /* some position's size differs between steady iterations */
  for (size_t pos = 0; pos < p && !routed; pos++)
    for (size_t k = 1; k < iters && !routed; k++)
      routed = sizes[start + k * p + pos] != sizes[start + pos];
  if (!routed) warm_len = 0;
  for (size_t pos = 0; pos < p; pos++) {
    st_class_item* c = &iteration[pos];
    uint64_t size = sizes[start + pos], largest = size, latest = 0;
    bool varies = pos < warm_len && sizes[warm_start + pos] != size, freed = false;
    for (size_t k = 0; k < iters; k++) {
      size_t base = start + k * p, i = base + pos;
      if (sizes[i] != size) varies = true;
      largest = ST_MAX(largest, sizes[i]);
      if (free_pos[i] != ST_NEVER) {
        freed = true;
        latest = ST_MAX(latest, free_pos[i] - base);
      }
    }
    c->size = tolerate_sizes ? largest : size;
    c->begin = pos;
    c->end = freed ? latest : ST_NEVER;
    if (classify_tiny && largest <= tiny_threshold)
      c->cls = PLAN_CLASS_TINY;
    else if ((varies && !tolerate_sizes) || !freed || latest > p + pos)
      c->cls = PLAN_CLASS_DYNAMIC;
    else
      c->cls = PLAN_CLASS_PERIODIC;
  }
}
