/* online.c - the online lifecycle (see online.h, docs/online.md).
 *
 * Recording keeps the raw events in a growable array (the hot path only appends 40 bytes);
 * the planning thread turns them into a trace, keeps the trailing steps of one kind (the same
 * alloc count between markers, whatever their sizes), and plans those with sizes tolerated:
 * every position at the largest size it reached. A re-plan made from steps of the kind the
 * current plan serves never shrinks a position: its recorded sizes are raised to the current
 * plan's first, so a run that once reached a shape keeps room for it.
 *
 * Drift: once a plan is served, the recording rolls on, keeping the last replan_steps steps.
 * A step whose bytes missing the plan pass replan_miss_share of its planned traffic counts as
 * drifting; replan_after of them in a row hand a copy of those steps to a planning thread, so
 * a new shape is planned for from the step that first showed it. The thread never touches the allocator: it owns its job until `done` is set, and the
 * allocator reads the result under its lock at a step boundary. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/struct_size.h"
#include "base/u64map.h"
#include "plan/planner.h"
#include "runtime/online.h"
#include "trace/trace.h"

#define MAX_RECORDS 4096 /* plan records kept (a run re-planning more often stops keeping them) */

typedef struct plan_job {
  stalloc_event_t* events;    /* the recording, owned by the job */
  size_t count;
  uint64_t steps_wanted;      /* trailing steps to plan */
  uint64_t* floor;            /* the current plan's iteration sizes (NULL: none) */
  size_t floor_count;
  stalloc_plan_params_t params;
  stalloc_plan* plan;         /* result */
  stalloc_status_t status;
  char message[256];
  uint64_t steps_used;
  bool need_repeat;           /* refuse to plan from fewer than 2 steps of one kind */
  bool varied;                /* some position's size differed between the planned steps */
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

  bool recording;
  bool rolling;              /* serving a plan: the recording keeps the last replan_steps steps */
  stalloc_event_t marker;    /* the last boundary's marker */
  uint32_t rec_number;
  uint64_t rec_markers;      /* step markers in the current recording */
  uint64_t rec_wanted;       /* complete steps it needs */
  stalloc_event_t* ev;
  size_t n, cap;

  plan_job* job;             /* non-NULL while a plan is being made or waits to be used */
  pthread_t thread;
  bool thread_live;
  size_t job_record;         /* its index in records */

  stalloc_plan* current;     /* the plan in use (its sizes are the next plan's floor) */
  stalloc_plan* offered;     /* handed to the allocator, not yet confirmed */
  uint32_t drifting;

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
  st_online* on = calloc(1, sizeof *on);
  if (!on) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "online_start: no host memory");
  on->p = p;
  on->alignment = alignment;
  on->growable = growable;
  on->state = STALLOC_ONLINE_RECORDING;
  on->recording = true;
  on->rec_number = 1;
  on->rec_wanted = p.record_steps;
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
  free(job->floor);
  if (job->plan) stalloc_plan_destroy(job->plan);
  free(job);
}

void st_online_destroy(st_online* on) {
  if (!on) return;
  join_job(on);
  free_job(on->job);
  if (on->offered && on->offered != on->current) stalloc_plan_destroy(on->offered);
  if (on->current) stalloc_plan_destroy(on->current);
  free(on->ev);
  free(on->records);
  free(on);
}

bool st_online_recording(const st_online* on) { return on->recording; }

uint32_t st_online_recording_number(const st_online* on) { return on->recording ? on->rec_number : 0; }

static void stop_recording(st_online* on) {
  on->recording = false;
  free(on->ev);
  on->ev = NULL;
  on->n = on->cap = 0;
}

void st_online_event(st_online* on, const stalloc_event_t* e) {
  if (!on->recording) return;
  if (on->n == on->cap) {
    size_t cap = on->cap ? 2 * on->cap : 4096;
    stalloc_event_t* ev = realloc(on->ev, cap * sizeof *ev);
    if (!ev) {
      stop_recording(on);
      return;
    }
    on->ev = ev;
    on->cap = cap;
  }
  on->ev[on->n++] = *e;
}

/* A new recording that this boundary's marker opens. */
static void start_recording(st_online* on, const stalloc_event_t* marker, uint64_t steps) {
  on->recording = true;
  on->rec_number++;
  on->rec_markers = 1;
  on->rec_wanted = steps;
  st_online_event(on, marker);
}

/* Drops what lies before the last rec_wanted complete steps of a rolling recording. */
static void keep_last_steps(st_online* on) {
  if (on->rec_markers <= on->rec_wanted + 1) return;
  size_t i = on->n, seen = 0;
  while (i > 0 && seen < on->rec_wanted + 1) seen += on->ev[--i].kind == STALLOC_EVENT_STEP;
  memmove(on->ev, on->ev + i, (on->n - i) * sizeof *on->ev);
  on->n -= i;
  on->rec_markers = on->rec_wanted + 1;
}

/* ---- the planning thread ---- */

/* The trailing steps of one kind (the last complete step's alloc count), at most `wanted`,
 * as a trace of their own: frees of blocks allocated before are flagged unmatched, so what
 * lives across the cut (weights, optimizer state, a data batch) stays out of the plan. */
static stalloc_status_t steady_trace(plan_job* job, stalloc_trace_t** out) {
  const stalloc_event_t* ev = job->events;
  size_t n = job->count, markers = 0;
  for (size_t i = 0; i < n; i++) markers += ev[i].kind == STALLOC_EVENT_STEP;
  if (markers < 2) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "online: the recording holds no complete step");
  size_t* at = malloc(markers * sizeof *at);
  uint64_t* allocs = calloc(markers, sizeof *allocs);
  if (!at || !allocs) {
    free(at);
    free(allocs);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "online: no host memory");
  }
  for (size_t i = 0, m = 0; i < n; i++) {
    if (ev[i].kind == STALLOC_EVENT_STEP) at[m++] = i;
    else if (ev[i].kind == STALLOC_EVENT_ALLOC && m) allocs[m - 1]++;
  }
  /* complete steps are [at[k], at[k+1]) for k < markers - 1 */
  size_t last = markers - 2, first = last;
  while (first > 0 && allocs[first - 1] == allocs[last] && last - first + 1 < job->steps_wanted) first--;
  job->steps_used = last - first + 1;
  if (job->need_repeat && job->steps_used < 2) {
    free(at);
    free(allocs);
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "online: fewer than 2 recorded steps of one kind: "
                   "no telling yet whether the run repeats");
  }
  /* steps of the kind the current plan serves keep at least its sizes */
  bool use_floor = job->floor && allocs[last] == job->floor_count;
  uint64_t allocs_last = allocs[last];
  size_t begin = at[first], end = at[last + 1] + 1; /* the closing marker too */
  free(at);
  free(allocs);

  stalloc_trace_t* t;
  stalloc_status_t s = stalloc_trace_create(&t);
  if (s) return s;
  u64map mine;
  u64map_init(&mine);
  s = st_trace_reserve(t, end - begin);
  uint64_t pos = 0; /* alloc index within the step, for the floor */
  uint64_t* first_sizes = malloc((allocs_last ? allocs_last : 1) * sizeof *first_sizes);
  size_t step_no = 0;
  if (!first_sizes) s = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "online: no host memory");
  for (size_t i = begin; !s && i < end; i++) {
    stalloc_event_t e = ev[i];
    if (e.kind == STALLOC_EVENT_STEP) {
      if (i != begin) step_no++;
      pos = 0;
    } else if (e.kind == STALLOC_EVENT_ALLOC) {
      if (pos < allocs_last) {
        if (step_no == 0) first_sizes[pos] = e.size;
        else if (first_sizes[pos] != e.size) job->varied = true;
      }
      if (use_floor && pos < job->floor_count && job->floor[pos] > e.size)
        e.size = job->floor[pos];
      pos++;
      if (e.id && !u64map_put(&mine, e.id, 1)) s = st_fail(STALLOC_ERR_OUT_OF_MEMORY, "online: no host memory");
    } else if (e.kind == STALLOC_EVENT_FREE) {
      if (!e.id || !u64map_get(&mine, e.id)) e.flags |= STALLOC_EVENT_FLAG_UNMATCHED;
      else {
        u64map_remove(&mine, e.id, NULL);
        e.size = 0; /* the trace takes the alloc's size, which the floor may have raised */
      }
    } else {
      continue; /* failed allocs are not requests */
    }
    if (!s) s = stalloc_trace_append(t, &e, 1);
  }
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

/* Hands the recording (a copy, when it rolls on) to a planning thread, or plans right here if
 * no thread can start. */
static void start_planning(st_online* on) {
  plan_job* job = calloc(1, sizeof *job);
  if (!job) return;
  job->steps_wanted = on->rec_wanted;
  job->need_repeat = on->growable;
  if (on->rolling) {
    job->events = malloc((on->n ? on->n : 1) * sizeof *job->events);
    if (!job->events) {
      free(job);
      return;
    }
    memcpy(job->events, on->ev, on->n * sizeof *on->ev);
    job->count = on->n;
  } else {
    job->events = on->ev;
    job->count = on->n;
    on->ev = NULL;
    on->n = on->cap = 0;
    on->recording = false;
  }
  if (on->current && on->current->iteration_count) {
    job->floor_count = on->current->iteration_count;
    job->floor = malloc(job->floor_count * sizeof *job->floor);
    if (job->floor)
      for (size_t i = 0; i < job->floor_count; i++)
        job->floor[i] = on->current->iteration[i].cls == PLAN_CLASS_PERIODIC ? on->current->iteration[i].size : 0;
    else
      job->floor_count = 0;
  }
  stalloc_plan_params_init(&job->params);
  job->params.time_limit = on->p.time_limit;
  job->params.alignment = on->alignment;
  job->params.tolerate_sizes = 1;
  stalloc_online_plan_record_t r = {.started_step = on->steps, .switched_step = UINT64_MAX};
  on->job = job;
  on->job_record = on->record_count;
  add_record(on, &r);
  if (pthread_create(&on->thread, NULL, plan_thread, job) == 0) on->thread_live = true;
  else plan_thread(job);
}

/* The finished job's plan, ready to offer; NULL if it failed (the run goes on as it is). */
static stalloc_plan* take_result(st_online* on, double now) {
  plan_job* job = on->job;
  join_job(on);
  stalloc_online_plan_record_t* r = on->job_record < on->record_count ? &on->records[on->job_record] : NULL;
  stalloc_plan* plan = job->plan;
  job->plan = NULL;
  if (r) {
    r->recorded_steps = job->steps_used;
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
  if (on->current) stalloc_plan_destroy(on->current);
  on->current = NULL;
  on->rolling = false;
  stop_recording(on);
}

const struct stalloc_plan* st_online_step(st_online* on, const stalloc_event_t* marker,
                                          uint64_t missed, uint64_t served, bool* drop) {
  *drop = false;
  on->steps++;
  on->marker = *marker;
  if (on->recording) {
    st_online_event(on, marker);
    on->rec_markers++;
    /* the markers close rec_markers - 1 complete steps */
    if (!on->rolling && on->rec_markers >= on->rec_wanted + 1) start_planning(on);
  }
  if (on->state == STALLOC_ONLINE_SERVING && !on->job) {
    uint64_t traffic = missed + served;
    bool drift = traffic && (double)missed > on->p.replan_miss_share * (double)traffic;
    on->drifting = drift ? on->drifting + 1 : 0;
    if (on->drifting >= on->p.replan_after && on->growable) {
      *drop = true; /* shapes changed: the growable pool serves them better than a re-plan */
      to_pool(on);
      return NULL;
    } else if (on->drifting >= on->p.replan_after && on->recording && on->rec_markers >= 2) {
      on->drifting = 0;
      start_planning(on);
    }
  }
  if (on->rolling && on->recording) keep_last_steps(on);
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
  stalloc_plan* plan = take_result(on, now);
  if (plan && varied && on->growable) { /* the recorded steps changed shape */
    on->records[on->job_record].declined = 1;
    stalloc_plan_destroy(plan);
    to_pool(on);
    return NULL;
  }
  if (!plan) {
    if (on->state != STALLOC_ONLINE_SERVING) on->state = STALLOC_ONLINE_RECORDING; /* try again */
    if (!on->current) start_recording(on, marker, on->p.record_steps);
    return NULL;
  }
  on->offered = plan;
  return plan;
}

void st_online_switched(st_online* on, stalloc_status_t status, bool declined, uint64_t pool_size) {
  stalloc_online_plan_record_t* r = on->job_record < on->record_count ? &on->records[on->job_record] : NULL;
  if (status || declined) {
    if (r) {
      r->status = status;
      r->declined = declined;
    }
    stalloc_plan_destroy(on->offered);
    /* Declined: the growable pool serves the run (the allocator dropped any plan it served);
     * no plan is tried again. */
    if (declined) to_pool(on);
  } else {
    if (r) {
      r->switched_step = on->steps;
      r->pool_size = pool_size;
    }
    if (on->current) stalloc_plan_destroy(on->current);
    on->current = on->offered;
    on->switched++;
    on->state = STALLOC_ONLINE_SERVING;
    if (!on->rolling || !on->recording) {
      on->rolling = true;
      start_recording(on, &on->marker, on->p.replan_steps);
    }
  }
  on->offered = NULL;
}

stalloc_status_t st_online_info(const st_online* on, stalloc_online_info_t* info) {
  stalloc_online_info_t v;
  stalloc_online_info_init(&v);
  v.state = on->state == STALLOC_ONLINE_RECORDING && on->job ? STALLOC_ONLINE_PLANNING : on->state;
  v.plans_switched = on->switched;
  v.steps = on->steps;
  v.plan_records = on->record_count;
  v.recording = on->recording;
  st_struct_write(info, &v, sizeof v);
  return STALLOC_OK;
}

stalloc_status_t st_online_plans(const st_online* on, stalloc_online_plan_record_t* records,
                                 size_t capacity, size_t* count) {
  if (records)
    memcpy(records, on->records, ST_MIN(capacity, on->record_count) * sizeof *records);
  *count = on->record_count;
  return STALLOC_OK;
}
