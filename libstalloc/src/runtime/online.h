/* online.h - the online lifecycle (online.c): record the first steps in memory, plan them on a
 * background thread, switch to the plan at a step boundary, watch each step's fit and re-plan
 * when the run drifts. Called by allocator.c with the allocator's lock held. */
#ifndef STALLOC_ONLINE_H
#define STALLOC_ONLINE_H

#include "base/internal.h"

typedef struct st_online st_online;

/* Kinds of step (train, evaluation, ...) that each get a plan; the allocator keeps one
 * runtime per kind. */
#define ST_ONLINE_KINDS 4

/* growable: the allocator has a growable pool, which serves runs whose shapes change at least
 * as well as a plan would: plans then come only from steps that repeated exactly, and a plan
 * that stops fitting is dropped rather than re-planned. */
stalloc_status_t st_online_create(const stalloc_online_params_t* params, uint64_t alignment,
                                  bool growable, st_online** out);
/* Waits for a planning thread still running and frees everything. */
void st_online_destroy(st_online* on);

/* Its parameters (the caller's, defaults filled in). */
const stalloc_online_params_t* st_online_params(const st_online* on);

/* True while steps are being recorded (alloc/free events are wanted). */
bool st_online_recording(const st_online* on);
/* The number of the current recording (0: none); a block remembers it to tell, at its free,
 * whether its alloc is in the same recording. */
uint32_t st_online_recording_number(const st_online* on);
/* Appends one event to the recording. A failure (no host memory) ends the recording quietly:
 * the allocator goes on without a new plan. */
void st_online_event(st_online* on, const stalloc_event_t* event);

/* A step boundary (`marker`: its STEP event, which a recording keeps). `step_allocs` is the
 * number of allocs in the step that just ended (its kind), `missed` and `served` the bytes that
 * missed and hit the plan in it (0, 0 without a plan). Returns a plan to switch to now for kind
 * *kind (an index below ST_ONLINE_KINDS), or NULL; the caller loads it and reports back with
 * st_online_switched. *drop: the plans no longer fit and the growable pool takes over (the
 * caller drops every kind's plan). */
const struct stalloc_plan* st_online_step(st_online* on, const stalloc_event_t* marker,
                                          uint64_t step_allocs, uint64_t missed, uint64_t served,
                                          bool* drop, int* kind);
/* The plan st_online_step returned was loaded (status OK) or refused; declined: not loaded
 * because it would not lower the memory reserved. */
void st_online_switched(st_online* on, stalloc_status_t status, bool declined, uint64_t pool_size);

/* The growable pool serves for good (a plan was declined, or dropped after a drift). */
bool st_online_in_pool(const st_online* on);

/* After each boundary: the kind whose plan serves the next step (predicted from the kinds seen
 * so far), or -1 for none. */
int st_online_next_kind(st_online* on);

/* The number of allocs of the kind of step expected next (from the kinds seen so far, with a
 * plan or not), or 0. */
uint64_t st_online_expected_allocs(const st_online* on);

/* The step under way turned out to be of kind k (its first requests are that kind's plan's):
 * that plan serves it, and only it says how well that plan fits. */
void st_online_serving(st_online* on, int k);

/* Fills a whole stalloc_online_info_t (the caller copies what its struct_size holds). */
void st_online_info(const st_online* on, stalloc_online_info_t* info);
stalloc_status_t st_online_plans(const st_online* on, stalloc_online_plan_record_t* records,
                                 size_t capacity, size_t* count);

#endif
