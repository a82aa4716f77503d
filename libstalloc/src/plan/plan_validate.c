/* plan_validate.c - everything a plan must satisfy before it is handed on: counts and their
 * arrays, classes in the part they may appear in, offsets inside the pool and aligned, lifetimes
 * possible for their class, reuse windows and ranges inside the iteration and the pool, the
 * plan peak and the fingerprint matching the entries. The planner, the plan file and the
 * runtime all call it, so a plan one of them accepts the others accept too. */
#include "plan/classify.h" /* ST_NEVER */
#include "plan/plan_validate.h"
#include "plan/planner.h"

static stalloc_status_t check_entry(const stalloc_plan* plan, const st_plan_entry* e,
                                    bool in_iteration, size_t index, const char* what) {
  const char* part = in_iteration ? "iteration" : "prologue";
  bool planned;
  switch (e->cls) {
    case PLAN_CLASS_PERSISTENT:
    case PLAN_CLASS_WARMUP:
      if (in_iteration) goto bad_class;
      planned = true;
      break;
    case PLAN_CLASS_PERIODIC:
      if (!in_iteration) goto bad_class;
      planned = true;
      break;
    case PLAN_CLASS_DYNAMIC:
      if (!in_iteration) goto bad_class;
      planned = false;
      break;
    case PLAN_CLASS_TINY:
      planned = false;
      break;
    default:
    bad_class:
      return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: %s entry %zu: class %u is not allowed there",
                     what, part, index, e->cls);
  }
  if (planned) {
    if (e->offset == PLAN_NO_OFFSET || e->offset % plan->alignment ||
        e->size > plan->pool_size || e->offset > plan->pool_size - e->size)
      return st_fail(STALLOC_ERR_BAD_FORMAT,
                     "%s: %s entry %zu: offset %llu + size %llu outside the pool of %llu B or "
                     "not aligned to %llu", what, part, index, (unsigned long long)e->offset,
                     (unsigned long long)e->size, (unsigned long long)plan->pool_size,
                     (unsigned long long)plan->alignment);
  } else if (e->offset != PLAN_NO_OFFSET) {
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: %s entry %zu: a %s request has an offset", what,
                   part, index, e->cls == PLAN_CLASS_TINY ? "tiny" : "dynamic");
  }
  bool window_ok = e->window == UINT32_MAX ||
                   (e->cls == PLAN_CLASS_DYNAMIC && e->window < plan->window_count);
  if (!window_ok)
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: %s entry %zu: bad reuse window %u", what, part,
                   index, e->window);
  return STALLOC_OK;
}

stalloc_status_t st_plan_validate(const stalloc_plan* plan, const char* what) {
  stalloc_status_t s;
  if ((plan->prologue_count && !plan->prologue) || (plan->iteration_count && !plan->iteration) ||
      (plan->window_count && !plan->windows) || (plan->range_count && !plan->ranges))
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: a count is set but its array is NULL", what);
  /* The runtime numbers iteration positions with 32 bits and all positions with 64. */
  if (plan->iteration_count > UINT32_MAX || plan->prologue_count > (1ull << 40))
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: %zu prologue and %zu iteration entries is too many",
                   what, plan->prologue_count, plan->iteration_count);
  if (!st_is_pow2(plan->alignment))
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: alignment %llu is not a power of two", what,
                   (unsigned long long)plan->alignment);
  if (plan->pool_size % plan->alignment || plan->plan_peak > plan->pool_size)
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: pool size %llu does not hold the plan peak %llu "
                   "or is not aligned", what, (unsigned long long)plan->pool_size,
                   (unsigned long long)plan->plan_peak);
  if (plan->iteration_count == 0 && (plan->window_count || plan->steps_found))
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: reuse windows or steps without an iteration", what);
  uint64_t peak = 0;
  for (size_t i = 0; i < plan->prologue_count + plan->iteration_count; i++) {
    bool it = i >= plan->prologue_count;
    size_t k = it ? i - plan->prologue_count : i;
    const st_plan_entry* e = it ? &plan->iteration[k] : &plan->prologue[i];
    if ((s = check_entry(plan, e, it, k, what))) return s;
    /* lifetimes are optional (a plan built by hand may have none): never = unknown */
    const uint64_t* ends = it ? plan->iteration_end : plan->prologue_end;
    uint64_t end = ends ? ends[k] : ST_NEVER;
    if (end <= k || (e->cls == PLAN_CLASS_PERSISTENT && end != ST_NEVER) ||
        (end != ST_NEVER && e->cls == PLAN_CLASS_WARMUP && end > plan->prologue_count) ||
        (end != ST_NEVER && e->cls == PLAN_CLASS_PERIODIC && end > k + plan->iteration_count))
      return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: %s entry %zu: lifetime end %llu is impossible "
                     "for its class", what, it ? "iteration" : "prologue", k,
                     (unsigned long long)end);
    if (e->offset != PLAN_NO_OFFSET) peak = ST_MAX(peak, e->offset + e->size);
  }
  if (peak != plan->plan_peak)
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: plan peak %llu differs from its entries' %llu",
                   what, (unsigned long long)plan->plan_peak, (unsigned long long)peak);
  for (size_t w = 0; w < plan->window_count; w++) {
    const st_reuse_window* win = &plan->windows[w];
    /* end may pass the iteration's count: the window runs into the next iteration. */
    if (win->begin >= win->end || win->begin > plan->iteration_count ||
        win->end > 2 * (uint64_t)plan->iteration_count ||
        win->first_range > plan->range_count ||
        win->range_count > plan->range_count - win->first_range)
      return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: reuse window %zu is out of range", what, w);
  }
  for (size_t r = 0; r < plan->range_count; r++) {
    const st_reuse_range* g = &plan->ranges[r];
    if (!g->size || g->size > plan->pool_size || g->offset > plan->pool_size - g->size)
      return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: reuse range %zu is outside the pool", what, r);
  }
  if (st_plan_fingerprint(plan) != plan->fingerprint)
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: fingerprint does not match the entries", what);
  return STALLOC_OK;
}
