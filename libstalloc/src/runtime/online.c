/* online.c - the online lifecycle (see online.h, docs/online.md).
 *
 * Recording keeps the raw events in a growable array (the hot path only appends 40 bytes)
 * and, per step in it, where it starts and its kind. It rolls: once the first steps are in,
 * it keeps only the trailing steps that a plan or re-plan may still want.
 *
 * Kinds. Steps with the same number of allocs between two markers are of one kind, whatever
 * their sizes (dynamic padding, a curriculum); a training step and an evaluation pass are two.
 * Each kind gets its own plan, made on the planning thread from the last steps of that kind,
 * wherever they lie in the recording, with sizes tolerated: every position at the largest size
 * it reached. A re-plan of a kind never shrinks a position: its recorded sizes are raised to
 * the kind's current plan's first. Which kind comes next is predicted from the kinds seen so
 * far (the longest run of recent kinds that happened before, and what followed it); never from
 * what is ahead.
 *
 * Drift: a step of the kind its plan serves whose bytes missing the plan pass replan_miss_share
 * of its planned traffic is drifting; replan_after of them in a row start a re-plan from the
 * kind's last replan_steps steps (with a growable pool: the plans are dropped instead). A step
 * of another kind is not drift: it is that kind's step. The thread never touches the
 * allocator: it owns its job until `done` is set, and the allocator reads the result under its
 * lock at a step boundary. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/grow.h"
#include "base/struct_size.h"
#include "base/u64map.h"
#include "plan/planner.h"
#include "runtime/online.h"
#include "trace/trace.h"

#define MAX_RECORDS 4096  /* plan records kept (a run re-planning more often stops keeping them) */
#define KEEP_STEPS 12     /* complete steps a rolling recording keeps at most */
#define KEEP_EVENTS (4u << 20) /* past the minimum, a recording stops growing at this many events */
#define HISTORY 64        /* kinds of the last steps, for predicting the next */
#define MATCH_MAX 8       /* longest run of recent kinds looked for in the history */
#define POOL_FIT_CANDIDATES 4 /* default free blocks a request weighs once the pool serves for good */

typedef struct step_kind {
  uint64_t allocs;        /* allocs per step: what tells kinds apart */
  uint64_t seen;          /* steps of this kind so far */
  uint64_t last_seen;     /* the boundary that closed the latest one */
  uint64_t retry_at;      /* a failed plan is tried again once `seen` reaches this */
  stalloc_plan* current;  /* the plan it is served from (the next plan's floor), or NULL */
  uint32_t drifting;
  bool used;
  bool served_by_other;   /* its latest step, served by another kind's plan, missed at most
                             replan_miss_share of its traffic: it needs no plan of its own */
} step_kind;

typedef struct rec_step {
  size_t at;              /* its marker's index in the recording */
  uint64_t allocs;
} rec_step;

typedef struct plan_job {
  stalloc_event_t* events; /* the recording from the first chosen step on, owned by the job */
  size_t count;
  size_t* ranges;          /* chosen steps: [ranges[2i], ranges[2i+1]), each from its marker to
                              the next one (which closes it) */
  size_t chosen;
  int kind;
  uint64_t* floor;         /* the kind's current plan's iteration sizes (NULL: none) */
  size_t floor_count;
  stalloc_plan_params_t params;
  stalloc_plan* plan;      /* result */
  stalloc_status_t status;
  char message[256];
  bool varied;             /* some position's size differed between the planned steps */
  double seconds, finished_at;
  atomic_int done;
} plan_job;

struct st_online {
  stalloc_online_params_t p;
  uint64_t alignment;
  bool growable;             /* see st_online_create */
  uint64_t steps;            /* boundaries seen */
  int32_t state;             /* stalloc_online_state_t */
  uint32_t switched;         /* plans switched to */
  bool first_tried;          /* the first plan was started (before: record_steps steps wanted) */

  bool recording;
  uint32_t rec_number;
  stalloc_event_t* ev;
  size_t n, cap;
  rec_step* rs;              /* steps in the recording; the last is still open */
  size_t rs_count, rs_cap;

  step_kind kinds[ST_ONLINE_KINDS];
  int8_t history[HISTORY];   /* kinds of the last steps (oldest first); -1: untracked */
  size_t history_count;
  int served;                /* the kind whose plan served the step under way, or -1 */

  plan_job* job;             /* non-NULL while a plan is being made or waits to be used */
  pthread_t thread;
  bool thread_live;
  size_t job_record;         /* its index in records */
  stalloc_plan* offered;     /* handed to the allocator, not yet confirmed */
  int offered_kind;

  stalloc_online_plan_record_t* records;
  size_t record_count;
};

void stalloc_online_params_init(stalloc_online_params_t* p) {
  if (!p) return;
  memset(p, 0, sizeof *p);
  p->struct_size = sizeof *p;
  p->record_steps = 3;
  p->replan_steps = 2;
  p->time_limit = 1.0;
  p->replan_miss_share = 0.02;
  p->replan_after = 1;
  p->wait_for_plan = 0;
  p->layout_hints = 1;
  p->pool_fit_candidates = POOL_FIT_CANDIDATES;
  p->pool_at_ends_after = 0;
}

void stalloc_online_info_init(stalloc_online_info_t* info) {
  if (!info) return;
  memset(info, 0, sizeof *info);
  info->struct_size = sizeof *info;
}

stalloc_status_t st_online_create(const stalloc_online_params_t* params, uint64_t alignment,
                                  bool growable, st_online** out) {
  stalloc_online_params_t p;
  stalloc_online_params_init(&p);
  stalloc_status_t s = st_struct_read(&p, sizeof p, params, "online_start: params");
  if (s) return s;
  if (p.record_steps < 2 || p.replan_steps < 1 || p.replan_after < 1)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "online_start: record_steps must be at least 2 (the first is warm-up), replan_steps and replan_after at least 1");
  if (!(p.time_limit >= 0 && p.time_limit <= 3600) || !(p.replan_miss_share >= 0 && p.replan_miss_share <= 1))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "online_start: time_limit must be in [0, 3600] s and replan_miss_share in [0, 1]");
  if (!p.pool_fit_candidates) p.pool_fit_candidates = POOL_FIT_CANDIDATES; /* zeroed, as by memset */
  if (p.pool_fit_candidates > 64)
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "online_start: pool_fit_candidates must be in [1, 64] (1: best fit alone; 0: the default, 4)");
  st_online* on = calloc(1, sizeof *on);
  if (!on) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "online_start: no host memory");
  on->p = p;
  on->alignment = alignment;
  on->growable = growable;
  on->state = STALLOC_ONLINE_RECORDING;
  on->recording = true;
  on->rec_number = 1;
  on->served = -1;
  on->offered_kind = -1;
  *out = on;
  return STALLOC_OK;
}

static void join_job(st_online* on) {
  if (on->thread_live) {
    pthread_join(on->thread, NULL);
    on->thread_live = false;
  }
}

static void free_job(plan_job* job) {
  if (!job) return;
  free(job->events);
  free(job->ranges);
  free(job->floor);
  if (job->plan) stalloc_plan_destroy(job->plan);
  free(job);
}

void st_online_destroy(st_online* on) {
  if (!on) return;
  join_job(on);
  free_job(on->job);
  if (on->offered) stalloc_plan_destroy(on->offered);
  for (int k = 0; k < ST_ONLINE_KINDS; k++)
    if (on->kinds[k].current) stalloc_plan_destroy(on->kinds[k].current);
  free(on->ev);
  free(on->rs);
  free(on->records);
  free(on);
}

const stalloc_online_params_t* st_online_params(const st_online* on) { return &on->p; }

bool st_online_recording(const st_online* on) { return on->recording; }

uint32_t st_online_recording_number(const st_online* on) { return on->recording ? on->rec_number : 0; }

static void stop_recording(st_online* on) {
  on->recording = false;
  free(on->ev);
  free(on->rs);
  on->ev = NULL;
  on->rs = NULL;
  on->n = on->cap = on->rs_count = on->rs_cap = 0;
}

void st_online_event(st_online* on, const stalloc_event_t* e) {
  if (!on->recording) return;
  stalloc_event_t* ev = st_room(on->ev, on->n, &on->cap, sizeof *ev, 4096);
  if (!ev) {
    stop_recording(on);
    return;
  }
  on->ev = ev;
  on->ev[on->n++] = *e;
  if (e->kind == STALLOC_EVENT_ALLOC && on->rs_count) on->rs[on->rs_count - 1].allocs++;
}

/* The boundary's marker opens a step of the recording. */
static void record_marker(st_online* on, const stalloc_event_t* marker) {
  rec_step* rs = st_room(on->rs, on->rs_count, &on->rs_cap, sizeof *rs, 16);
  if (!rs) {
    stop_recording(on);
    return;
  }
  on->rs = rs;
  st_online_event(on, marker);
  if (on->recording) on->rs[on->rs_count++] = (rec_step){on->n - 1, 0};
}

/* ---- kinds ---- */

static int kind_of(const st_online* on, uint64_t allocs) {
  for (int k = 0; k < ST_ONLINE_KINDS; k++)
    if (on->kinds[k].used && on->kinds[k].allocs == allocs) return k;
  return -1;
}

static bool kind_busy(const st_online* on, int k) {
  return on->kinds[k].current || (on->job && on->job->kind == k) || (on->offered && on->offered_kind == k);
}

/* The kind of a step with `allocs` allocs, made if new: in a free entry, else in place of the
 * kind seen longest ago that has no plan (its history entries forgotten); -1 when all have. */
static int note_kind(st_online* on, uint64_t allocs) {
  int k = kind_of(on, allocs);
  if (k >= 0) return k;
  for (int j = 0; j < ST_ONLINE_KINDS && k < 0; j++)
    if (!on->kinds[j].used) k = j;
  if (k < 0)
    for (int j = 0; j < ST_ONLINE_KINDS; j++)
      if (!kind_busy(on, j) && (k < 0 || on->kinds[j].last_seen < on->kinds[k].last_seen)) k = j;
  if (k < 0) return -1;
  for (size_t i = 0; i < on->history_count; i++)
    if (on->history[i] == k) on->history[i] = -1;
  on->kinds[k] = (step_kind){.allocs = allocs, .used = true};
  return k;
}

static void push_history(st_online* on, int k) {
  if (on->history_count == HISTORY) {
    memmove(on->history, on->history + 1, (HISTORY - 1) * sizeof *on->history);
    on->history_count--;
  }
  on->history[on->history_count++] = (int8_t)k;
}

/* The kind expected next: the longest run of recent kinds that also happened earlier (up to
 * MATCH_MAX steps), and the kind that followed it most often then (the latest on a tie); with
 * no such run, the kind seen most often. */
static int predict(const st_online* on) {
  size_t n = on->history_count;
  if (!n) return -1;
  int count[ST_ONLINE_KINDS];
  for (size_t len = ST_MIN(n - 1, (size_t)MATCH_MAX); len >= 1; len--) {
    int best = -1;
    memset(count, 0, sizeof count);
    for (size_t start = n - len; start-- > 0;) {
      int next = on->history[start + len];
      if (next < 0 || memcmp(on->history + start, on->history + n - len, len) != 0) continue;
      if (++count[next] > (best < 0 ? 0 : count[best])) best = next; /* latest first: ties stay */
    }
    if (best >= 0) return best;
  }
  int best = -1;
  memset(count, 0, sizeof count);
  for (size_t i = n; i-- > 0;) {
    int k = on->history[i];
    if (k >= 0 && ++count[k] > (best < 0 ? 0 : count[best])) best = k;
  }
  return best;
}

/* ---- the recording's window ---- */

/* Complete steps in the recording (the last one in rs is still open). */
static size_t complete_steps(const st_online* on) { return on->rs_count ? on->rs_count - 1 : 0; }

/* Of the last `wanted` complete steps of kind `allocs` (at most), the oldest (an index into rs;
 * the open step's index when there are none) and, in *count, how many there are. */
static size_t oldest_of_last(const st_online* on, uint64_t allocs, size_t wanted, size_t* count) {
  size_t from = complete_steps(on), c = 0;
  for (size_t i = from; i-- > 0 && c < wanted;)
    if (on->rs[i].allocs == allocs) {
      c++;
      from = i;
    }
  *count = c;
  return from;
}

/* The chosen steps: the last `wanted` complete steps of kind `allocs` (at most), oldest first,
 * as indices into rs. Returns how many. */
static size_t choose_steps(const st_online* on, uint64_t allocs, size_t wanted, size_t* idx) {
  size_t c, n = 0;
  for (size_t i = oldest_of_last(on, allocs, wanted, &c); n < c; i++)
    if (on->rs[i].allocs == allocs) idx[n++] = i;
  return c;
}

/* How many steps of kind k a plan for it is made from. */
static size_t steps_wanted(const st_online* on, int k) {
  return (on->kinds[k].current || on->first_tried) ? on->p.replan_steps : on->p.record_steps;
}

/* Drops what lies before the steps still wanted: for each kind that may still be planned (no
 * plan yet, or re-planned on drift), its last steps_wanted steps; always the last record_steps;
 * at most KEEP_STEPS, and past the minimum no more than KEEP_EVENTS events. */
static void trim_recording(st_online* on) {
  size_t complete = complete_steps(on);
  if (!complete) return;
  size_t keep = ST_MIN(complete, (size_t)on->p.record_steps);
  for (int k = 0; k < ST_ONLINE_KINDS; k++) {
    const step_kind* sk = &on->kinds[k];
    /* a kind seen once is kept only within the minimum: a warm-up step never comes back */
    if (!sk->used || sk->seen < 2 || (sk->current && on->growable)) continue;
    size_t got, from = oldest_of_last(on, sk->allocs, steps_wanted(on, k), &got);
    if (got) keep = ST_MAX(keep, complete - from);
  }
  keep = ST_MIN(keep, (size_t)KEEP_STEPS);
  size_t minimum = ST_MIN(complete, (size_t)on->p.record_steps);
  while (keep > minimum && on->n - on->rs[on->rs_count - 1 - keep].at > KEEP_EVENTS) keep--;
  size_t first = on->rs_count - 1 - keep; /* the oldest step kept */
  size_t cut = on->rs[first].at;
  if (!cut) return;
  memmove(on->ev, on->ev + cut, (on->n - cut) * sizeof *on->ev);
  on->n -= cut;
  memmove(on->rs, on->rs + first, (on->rs_count - first) * sizeof *on->rs);
  on->rs_count -= first;
  for (size_t i = 0; i < on->rs_count; i++) on->rs[i].at -= cut;
}

/* ---- the planning thread ---- */

/* The chosen steps as a trace of their own. Frees of blocks allocated before the first chosen
 * step (or in a step between chosen ones) are flagged unmatched, so what lives across the cut
 * (weights, optimizer state, a data batch) stays out of the plan; a block of a chosen step freed
 * between chosen steps is freed at the end of its stretch. */
static stalloc_status_t steady_trace(plan_job* job, stalloc_trace_t** out) {
  const stalloc_event_t* ev = job->events;
  stalloc_trace_t* t;
  stalloc_status_t s = stalloc_trace_create(&t);
  if (s) return s;
  u64map mine;
  u64map_init(&mine);
  uint64_t allocs = 0;
  for (size_t i = job->ranges[0]; i < job->ranges[1]; i++) allocs += ev[i].kind == STALLOC_EVENT_ALLOC;
  uint64_t* first_sizes = malloc((allocs ? allocs : 1) * sizeof *first_sizes);
  if (!first_sizes) s = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "online: no host memory");
  if (!s) s = st_trace_reserve(t, job->count + 1);
  bool use_floor = job->floor && allocs == job->floor_count;
  size_t prev_end = job->ranges[0];
  for (size_t c = 0; !s && c < job->chosen; c++) {
    size_t begin = job->ranges[2 * c], end = job->ranges[2 * c + 1];
    for (size_t i = prev_end; !s && i < begin; i++) { /* between chosen steps: only their frees */
      stalloc_event_t e = ev[i];
      if (e.kind != STALLOC_EVENT_FREE || !e.id || !u64map_get(&mine, e.id)) continue;
      u64map_remove(&mine, e.id, NULL);
      e.size = 0;
      s = stalloc_trace_append(t, &e, 1);
    }
    uint64_t pos = 0; /* alloc index within the step, for the floor */
    for (size_t i = begin; !s && i < end; i++) {
      stalloc_event_t e = ev[i];
      if (e.kind == STALLOC_EVENT_ALLOC) {
        if (pos < allocs) {
          if (c == 0) first_sizes[pos] = e.size;
          else if (first_sizes[pos] != e.size) job->varied = true;
        }
        if (use_floor && pos < job->floor_count && job->floor[pos] > e.size) e.size = job->floor[pos];
        pos++;
        if (e.id && !u64map_put(&mine, e.id, 1)) s = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "online: no host memory");
      } else if (e.kind == STALLOC_EVENT_FREE) {
        if (!e.id || !u64map_get(&mine, e.id)) e.flags |= STALLOC_EVENT_FLAG_UNMATCHED;
        else {
          u64map_remove(&mine, e.id, NULL);
          e.size = 0; /* the trace takes the alloc's size, which the floor may have raised */
        }
      } else if (e.kind != STALLOC_EVENT_STEP) {
        continue; /* failed allocs are not requests */
      }
      if (!s) s = stalloc_trace_append(t, &e, 1);
    }
    prev_end = end;
  }
  if (!s) s = stalloc_trace_append(t, &ev[prev_end], 1); /* the closing marker */
  u64map_destroy(&mine);
  free(first_sizes);
  if (s) {
    stalloc_trace_destroy(t);
    return s;
  }
  *out = t;
  return STALLOC_OK;
}

static void* plan_thread(void* arg) {
  plan_job* job = arg;
  double t0 = st_now();
  stalloc_trace_t* t = NULL;
  job->status = steady_trace(job, &t);
  if (!job->status) job->status = stalloc_plan_create(t, &job->params, &job->plan);
  if (job->status) {
    strncpy(job->message, stalloc_last_error(), sizeof job->message - 1);
    job->message[sizeof job->message - 1] = '\0';
  }
  stalloc_trace_destroy(t);
  job->finished_at = st_now();
  job->seconds = job->finished_at - t0;
  atomic_store_explicit(&job->done, 1, memory_order_release);
  return NULL;
}

static void add_record(st_online* on, const stalloc_online_plan_record_t* r) {
  if (on->record_count == MAX_RECORDS) return;
  if (!on->records && !(on->records = malloc(MAX_RECORDS * sizeof *on->records))) return;
  on->records[on->record_count++] = *r;
}

/* Plans kind k from its last steps in the recording (a copy, from the first of them on) on a
 * planning thread, or right here if no thread can start. False when it has too few steps. */
static bool start_planning(st_online* on, int k) {
  size_t wanted = steps_wanted(on, k);
  size_t* idx = malloc(wanted * sizeof *idx);
  if (!idx) return false;
  size_t c = choose_steps(on, on->kinds[k].allocs, wanted, idx);
  if (c < (on->growable ? 2u : 1u)) { /* no telling yet whether the run repeats */
    free(idx);
    return false;
  }
  plan_job* job = calloc(1, sizeof *job);
  size_t from = on->rs[idx[0]].at;
  if (job) {
    job->events = malloc((on->n - from) * sizeof *job->events);
    job->ranges = malloc(2 * c * sizeof *job->ranges);
  }
  if (!job || !job->events || !job->ranges) {
    free(idx);
    free_job(job);
    return false;
  }
  memcpy(job->events, on->ev + from, (on->n - from) * sizeof *on->ev);
  job->count = on->n - from;
  for (size_t i = 0; i < c; i++) {
    job->ranges[2 * i] = on->rs[idx[i]].at - from;
    job->ranges[2 * i + 1] = on->rs[idx[i] + 1].at - from;
  }
  job->chosen = c;
  job->kind = k;
  free(idx);
  const stalloc_plan* cur = on->kinds[k].current;
  if (cur && cur->iteration_count) {
    job->floor_count = cur->iteration_count;
    job->floor = malloc(job->floor_count * sizeof *job->floor);
    if (job->floor)
      for (size_t i = 0; i < job->floor_count; i++)
        job->floor[i] = cur->iteration[i].cls == PLAN_CLASS_PERIODIC ? cur->iteration[i].size : 0;
    else
      job->floor_count = 0;
  }
  stalloc_plan_params_init(&job->params);
  job->params.time_limit = on->p.time_limit;
  job->params.alignment = on->alignment;
  job->params.tolerate_sizes = 1;
  stalloc_online_plan_record_t r = {.started_step = on->steps, .switched_step = UINT64_MAX,
                                    .recorded_steps = c};
  on->job = job;
  on->job_record = on->record_count;
  on->first_tried = true;
  add_record(on, &r);
  if (pthread_create(&on->thread, NULL, plan_thread, job) == 0) on->thread_live = true;
  else plan_thread(job);
  return true;
}

/* The finished job's plan, ready to offer; NULL if it failed (the run goes on as it is). */
static stalloc_plan* take_result(st_online* on, double now) {
  plan_job* job = on->job;
  join_job(on);
  stalloc_online_plan_record_t* r = on->job_record < on->record_count ? &on->records[on->job_record] : NULL;
  stalloc_plan* plan = job->plan;
  job->plan = NULL;
  if (r) {
    r->plan_seconds = job->seconds;
    r->delay_seconds = now - job->finished_at;
    r->status = job->status;
    if (plan) {
      r->pool_size = plan->pool_size;
      r->plan_peak = plan->plan_peak;
      r->lower_bound = plan->planned_lower_bound;
    }
  }
  free_job(job);
  on->job = NULL;
  return plan;
}

/* Gives up on plans: the growable pool serves the run from now on. */
static void to_pool(st_online* on) {
  on->state = STALLOC_ONLINE_POOL;
  for (int k = 0; k < ST_ONLINE_KINDS; k++) {
    if (on->kinds[k].current) stalloc_plan_destroy(on->kinds[k].current);
    on->kinds[k].current = NULL;
  }
  on->served = -1;
  stop_recording(on);
}

static bool any_plan(const st_online* on) {
  for (int k = 0; k < ST_ONLINE_KINDS; k++)
    if (on->kinds[k].current) return true;
  return false;
}

/* The kind to plan now, or -1: the step that just ended, if its kind has no plan (or drifts,
 * without a growable pool) and enough steps of it are recorded. */
static int kind_to_plan(st_online* on, int done, bool drifted) {
  if (done < 0 || on->job || on->offered || !on->recording) return -1;
  if (!on->first_tried && complete_steps(on) < on->p.record_steps) return -1;
  step_kind* sk = &on->kinds[done];
  if (sk->current && !drifted) return -1;
  /* A kind another kind's plan serves as well (an evaluation pass in the training plan's
   * slots) gets no plan: a plan of its own would hold no less. (Before plans served by turns
   * shared a region, it also moved their idle granules between them at each switch: the
   * eighth GPU session's Llama with an eval pass every 5 steps, 566 moves an eval pass.) */
  if (!sk->current && sk->served_by_other) return -1;
  if (sk->seen < sk->retry_at) return -1;
  return done;
}

const struct stalloc_plan* st_online_step(st_online* on, const stalloc_event_t* marker,
                                          uint64_t step_allocs, uint64_t missed, uint64_t served,
                                          bool* drop, int* kind) {
  *drop = false;
  *kind = -1;
  bool closes = on->steps > 0; /* the first boundary opens the first step */
  on->steps++;
  int done = -1;
  if (closes) { /* kept in pool mode too: the layout hints ask which kind comes next */
    done = note_kind(on, step_allocs);
    push_history(on, done);
    if (done >= 0) {
      on->kinds[done].seen++;
      on->kinds[done].last_seen = on->steps;
    }
  }
  if (on->state == STALLOC_ONLINE_POOL) {
    /* a plan still being made when the pool took over: its record is completed, its plan dropped */
    if (on->job && atomic_load_explicit(&on->job->done, memory_order_acquire))
      stalloc_plan_destroy(take_result(on, st_now()));
    return NULL;
  }
  if (on->recording) record_marker(on, marker);

  /* Drift: only a step of the kind whose plan served it says how well that plan fits. */
  bool drifted = false;
  if (on->served >= 0 && done == on->served) {
    step_kind* sk = &on->kinds[done];
    uint64_t traffic = missed + served;
    bool drift = traffic && (double)missed > on->p.replan_miss_share * (double)traffic;
    sk->drifting = drift ? sk->drifting + 1 : 0;
    if (sk->drifting >= on->p.replan_after) {
      if (on->growable) {
        *drop = true; /* shapes changed: the growable pool serves them better than a re-plan */
        to_pool(on);
        return NULL;
      }
      sk->drifting = 0;
      drifted = true;
    }
  }
  if (done >= 0 && done != on->served) {
    uint64_t traffic = missed + served;
    on->kinds[done].served_by_other =
        on->served >= 0 && traffic && (double)missed <= on->p.replan_miss_share * (double)traffic;
  }
  int k = kind_to_plan(on, done, drifted);
  if (k >= 0 && !start_planning(on, k)) on->kinds[k].retry_at = on->kinds[k].seen + 1;
  if (on->recording) trim_recording(on);

  if (!on->job || on->offered) return NULL;
  bool started_now = on->records && on->job_record < on->record_count &&
                     on->records[on->job_record].started_step == on->steps;
  if (started_now) return NULL; /* a plan is switched to at a later boundary than it began */
  double now = st_now();
  if (!atomic_load_explicit(&on->job->done, memory_order_acquire)) {
    if (!on->p.wait_for_plan) return NULL;
    join_job(on);
  }
  bool varied = on->job->varied;
  int jk = on->job->kind;
  stalloc_plan* plan = take_result(on, now);
  if (plan && varied && on->growable) { /* the recorded steps changed shape */
    on->records[on->job_record].declined = 1;
    stalloc_plan_destroy(plan);
    to_pool(on);
    return NULL;
  }
  if (!plan) { /* tried again after record_steps more steps of that kind */
    on->kinds[jk].retry_at = on->kinds[jk].seen + on->p.record_steps;
    return NULL;
  }
  on->offered = plan;
  on->offered_kind = jk;
  *kind = jk;
  return plan;
}

void st_online_switched(st_online* on, stalloc_status_t status, bool declined, uint64_t pool_size) {
  stalloc_online_plan_record_t* r = on->job_record < on->record_count ? &on->records[on->job_record] : NULL;
  int k = on->offered_kind;
  if (status || declined) {
    if (r) {
      r->status = status;
      r->declined = declined;
    }
    stalloc_plan_destroy(on->offered);
    /* Declined with a growable pool: it serves the run (the allocator dropped any plan it
     * served); no plan is tried again. Without one: that kind is served by the other plans. */
    if (declined && on->growable) to_pool(on);
    else if (k >= 0) on->kinds[k].retry_at = declined ? UINT64_MAX : on->kinds[k].seen + on->p.record_steps;
  } else {
    if (r) {
      r->switched_step = on->steps;
      r->pool_size = pool_size;
    }
    if (on->kinds[k].current) stalloc_plan_destroy(on->kinds[k].current);
    on->kinds[k].current = on->offered;
    on->kinds[k].drifting = 0;
    on->switched++;
    on->state = STALLOC_ONLINE_SERVING;
  }
  on->offered = NULL;
  on->offered_kind = -1;
}

/* The most requests a kind of step tracked makes. */
static uint64_t most_allocs(const st_online* on) {
  uint64_t most = 0;
  for (int k = 0; k < ST_ONLINE_KINDS; k++)
    if (on->kinds[k].used) most = ST_MAX(most, on->kinds[k].allocs);
  return most;
}

int st_online_next_kind(st_online* on) {
  on->served = -1;
  if (!any_plan(on)) return -1;
  /* The step that ended was of a kind with no plan and as many requests as a training step
   * (at least half the most any kind makes: a new batch size, a new phase; an evaluation pass
   * makes far fewer, and the training step after one keeps its plan): another kind's plan
   * served it and it missed into the growable pool, around the space that plan keeps. With a
   * growable pool, the next step goes to it, with the layout hints, until its kind has a plan
   * or a kind with one comes again (bert_ramp at 256x: 14.91 -> 12.91 MiB); without one,
   * cached segments would come on top of the plan's pool. */
  int last = on->history_count ? on->history[on->history_count - 1] : -1;
  if (on->growable && last >= 0 && !on->kinds[last].current && on->kinds[last].allocs * 2 >= most_allocs(on))
    return -1;
  int k = predict(on);
  if (k >= 0 && !on->kinds[k].current) k = -1;
  for (size_t i = on->history_count; i-- > 0 && k < 0;) /* no plan for it: the latest with one */
    if (on->history[i] >= 0 && on->kinds[on->history[i]].current) k = on->history[i];
  if (k < 0) /* never served yet: any kind with a plan */
    for (int j = 0; j < ST_ONLINE_KINDS && k < 0; j++)
      if (on->kinds[j].current) k = j;
  on->served = k;
  return k;
}

uint64_t st_online_expected_allocs(const st_online* on) {
  int k = predict(on);
  return k >= 0 ? on->kinds[k].allocs : 0;
}

void st_online_serving(st_online* on, int k) {
  if (k >= 0 && k < ST_ONLINE_KINDS && on->kinds[k].current) on->served = k;
}

bool st_online_in_pool(const st_online* on) { return on->state == STALLOC_ONLINE_POOL; }

void st_online_info(const st_online* on, stalloc_online_info_t* out) {
  stalloc_online_info_t v;
  stalloc_online_info_init(&v);
  v.state = on->state == STALLOC_ONLINE_RECORDING && on->job ? STALLOC_ONLINE_PLANNING : on->state;
  v.plans_switched = on->switched;
  v.steps = on->steps;
  v.plan_records = on->record_count;
  v.recording = on->recording;
  for (int k = 0; k < ST_ONLINE_KINDS; k++) v.step_kinds += on->kinds[k].current != NULL;
  *out = v;
}

stalloc_status_t st_online_plans(const st_online* on, stalloc_online_plan_record_t* records,
                                 size_t capacity, size_t* count) {
  if (records)
    memcpy(records, on->records, ST_MIN(capacity, on->record_count) * sizeof *records);
  *count = on->record_count;
  return STALLOC_OK;
}
