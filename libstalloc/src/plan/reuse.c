/* reuse.c - Dynamic Reusable Space: for each window of the iteration in which dynamic requests
 * live, the address ranges of the pool that no planned request occupies at any moment of the
 * window. Online, dynamic requests are placed best-fit into these ranges.
 *
 * Windows group dynamic positions in alloc order: a position joins the current window while its
 * lifetime overlaps the window's, the window stays within one iteration's length (it would
 * meet its own next copy) and, with a gap, the position comes at most `gap` allocs after the
 * window's last one (bursts: one MoE layer's experts; the planner tries both). Positions are alloc positions of the iteration, half-open;
 * `end` may pass iteration_count when a dynamic request is freed in the next iteration. A
 * planned request occupies its range in a window if any of its copies (previous, this or next
 * iteration) overlaps the window; persistent requests occupy theirs always; so do the arenas of
 * the other windows. Occupied ranges use aligned sizes, as the placement does.
 *
 * Arenas: before the placement, each window gets an item of the most live bytes its requests
 * reached in a recorded iteration, times a headroom; placed like a periodic request, it is then
 * free during its window, so it shows up in the window's ranges. One arena for all of a window's
 * requests rather than a slot per position: one layer's experts share their tokens, so their
 * sum is about the same whatever the routing, while each expert's size is not. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "plan/reuse.h"

typedef struct span {
  uint64_t lo, hi;
} span;

static int by_lo(const void* a, const void* b) {
  const span *x = a, *y = b;
  return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static bool grow(void** p, size_t* cap, size_t need, size_t elem) {
  if (need <= *cap) return true;
  size_t c = *cap ? *cap * 2 : 64;
  while (c < need) c *= 2;
  void* q = realloc(*p, c * elem);
  if (!q) return false;
  *p = q;
  *cap = c;
  return true;
}

/* A dynamic position the reusable space can serve: freed, within an iteration of its alloc. */
static bool servable(const st_class_item* c, size_t p) {
  return c->cls == PLAN_CLASS_DYNAMIC && c->end != ST_NEVER && c->end - c->begin <= (uint64_t)p;
}

size_t st_reuse_windows(const st_class_item* it, size_t p, uint64_t gap, st_reuse_window* out) {
  size_t wn = 0;
  uint64_t last = 0;
  for (size_t pos = 0; pos < p; pos++) {
    const st_class_item* c = &it[pos];
    if (!servable(c, p)) continue;
    st_reuse_window* w = wn ? &out[wn - 1] : NULL;
    bool near = !gap || c->begin - last <= gap;
    last = c->begin;
    if (w && near && c->begin < w->end &&
        ST_MAX(c->end, (uint64_t)w->end) - w->begin <= (uint64_t)p) {
      if (c->end > w->end) w->end = (uint32_t)c->end;
    } else {
      out[wn++] = (st_reuse_window){(uint32_t)c->begin, (uint32_t)c->end, 0, 0};
    }
  }
  return wn;
}

stalloc_status_t st_reuse_compute(stalloc_plan* plan, const st_class_item* prologue,
                                  const st_class_item* iteration, const st_class_item* arenas,
                                  const uint64_t* arena_offsets, size_t arena_count,
                                  uint64_t gap) {
  size_t p = plan->iteration_count;
  uint64_t a = plan->alignment;
  st_reuse_window* windows = NULL;
  st_reuse_range* ranges = NULL;
  span* occ = NULL;
  size_t wcap = 0, rcap = 0, ocap = 0, wn = 0, rn = 0;

  /* 1. windows */
  if (!grow((void**)&windows, &wcap, p + 1, sizeof *windows)) goto oom;
  wn = st_reuse_windows(iteration, p, gap, windows);
  for (size_t pos = 0; pos < p; pos++) plan->iteration[pos].window = UINT32_MAX;
  for (size_t w = 0; w < wn; w++)
    for (size_t pos = windows[w].begin; pos < p && pos < windows[w].end; pos++)
      if (servable(&iteration[pos], p)) plan->iteration[pos].window = (uint32_t)w;

  /* 2. per window: the complement of the occupied ranges within [0, pool_size) */
  for (size_t w = 0; w < wn; w++) {
    uint64_t b = windows[w].begin, en = windows[w].end;
    size_t on = 0;
    for (size_t i = 0; i < plan->prologue_count; i++) {
      if (prologue[i].cls != PLAN_CLASS_PERSISTENT) continue;
      if (!grow((void**)&occ, &ocap, on + 1, sizeof *occ)) goto oom;
      uint64_t off = plan->prologue[i].offset;
      occ[on++] = (span){off, off + st_align_up(plan->prologue[i].size, a)};
    }
    for (size_t pos = 0; pos < p; pos++) {
      if (plan->iteration[pos].cls != PLAN_CLASS_PERIODIC) continue;
      uint64_t lo = iteration[pos].begin, hi = iteration[pos].end;
      /* copies shifted by -p, 0, +p (all times offset by p to stay unsigned) */
      bool hit = false;
      for (uint64_t s = 0; s <= 2 && !hit; s++)
        hit = lo + s * p < en + p && hi + s * p > b + p;
      if (!hit) continue;
      if (!grow((void**)&occ, &ocap, on + 1, sizeof *occ)) goto oom;
      uint64_t off = plan->iteration[pos].offset;
      occ[on++] = (span){off, off + st_align_up(plan->iteration[pos].size, a)};
    }
    for (size_t k = 0; k < arena_count; k++) {
      if (k == w || !arenas[k].size) continue;
      uint64_t lo = arenas[k].begin, hi = arenas[k].end;
      bool hit = false;
      for (uint64_t sh = 0; sh <= 2 && !hit; sh++)
        hit = lo + sh * p < en + p && hi + sh * p > b + p;
      if (!hit) continue;
      if (!grow((void**)&occ, &ocap, on + 1, sizeof *occ)) goto oom;
      occ[on++] = (span){arena_offsets[k], arena_offsets[k] + st_align_up(arenas[k].size, a)};
    }
    st_sort(occ, on, sizeof *occ, by_lo);
    windows[w].first_range = (uint32_t)rn;
    uint64_t cursor = 0;
    for (size_t k = 0; k <= on; k++) {
      uint64_t lo = k < on ? occ[k].lo : plan->pool_size;
      if (lo > cursor) {
        if (!grow((void**)&ranges, &rcap, rn + 1, sizeof *ranges)) goto oom;
        ranges[rn++] = (st_reuse_range){cursor, lo - cursor};
      }
      if (k < on && occ[k].hi > cursor) cursor = occ[k].hi;
    }
    windows[w].range_count = (uint32_t)(rn - windows[w].first_range);
  }
  free(occ);
  plan->windows = windows;
  plan->window_count = wn;
  plan->ranges = ranges;
  plan->range_count = rn;
  return STALLOC_OK;
oom:
  free(occ);
  free(windows);
  free(ranges);
  return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "planner: no memory for the reuse table");
}

/* ---- arenas: room for the dynamic requests, reserved by the placement ------------------ */

typedef struct ev {
  uint64_t t;
  uint64_t bytes;
  bool alloc; /* bytes come at an alloc, go at a free; frees sort first at equal times */
} ev;

static int by_time(const void* a, const void* b) {
  const ev *x = a, *y = b;
  if (x->t != y->t) return x->t < y->t ? -1 : 1;
  return (int)x->alloc - (int)y->alloc;
}

stalloc_status_t st_reuse_arenas(const uint64_t* sizes, const uint64_t* free_pos,
                                 const st_period* per, const st_class_item* it, double headroom,
                                 uint64_t alignment, uint64_t gap, st_class_item* out,
                                 size_t* count) {
  size_t S = per->start, p = per->period, iters = per->iterations;
  *count = 0;
  if (!p || !iters) return STALLOC_OK;
  ev* evs = malloc(2 * p * sizeof *evs);
  st_reuse_window* win = malloc(p * sizeof *win);
  if (!evs || !win) {
    free(evs);
    free(win);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "planner: no memory for the arenas");
  }
  size_t wn = st_reuse_windows(it, p, gap, win);
  for (size_t w = 0; w < wn; w++) {
    /* the most live bytes of the window's requests, over the recorded iterations */
    uint64_t need = 0;
    for (size_t k = 0; k < iters; k++) {
      size_t base = S + k * p, m = 0;
      for (size_t q = win[w].begin; q < p && q < win[w].end; q++) {
        if (!servable(&it[q], p) || (w + 1 < wn && q >= win[w + 1].begin)) continue;
        uint64_t sz = st_align_up(sizes[base + q], alignment);
        if (!sz && sizes[base + q]) sz = UINT64_MAX; /* rounding up passed 2^64: saturate */
        uint64_t f = free_pos[base + q] == ST_NEVER ? base + win[w].end : free_pos[base + q];
        evs[m++] = (ev){base + q, sz, true};
        evs[m++] = (ev){f, sz, false};
      }
      st_sort(evs, m, sizeof *evs, by_time);
      /* 128 bits: sizes near 2^64 would wrap a 64-bit sum; the need saturates. */
      __int128 live = 0;
      for (size_t j = 0; j < m; j++) {
        live += evs[j].alloc ? (__int128)evs[j].bytes : -(__int128)evs[j].bytes;
        if (live > (__int128)need) need = live > (__int128)UINT64_MAX ? UINT64_MAX : (uint64_t)live;
      }
    }
    double want = ceil((double)need * headroom);
    uint64_t size = want < 9.0e18 ? st_align_up((uint64_t)want, alignment) : 0;
    out[w] = (st_class_item){size, win[w].begin, win[w].end, PLAN_CLASS_PERIODIC};
  }
  free(evs);
  free(win);
  *count = wn;
  return STALLOC_OK;
}
