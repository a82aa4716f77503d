/* planner_traces.h - synthetic training-shaped traces for the planner's C tests: a set-up step
 * (weights, never freed), a first optimizer step (optimizer state, never freed, plus its own
 * temporaries), then identical steady steps: a forward that stacks activations, a backward that
 * frees them in reverse with gradient temporaries, tiny scalars, and a "loss" that lives
 * across the step boundary. moe != 0 makes some expert inputs vary in size between steps. */
#ifndef STALLOC_PLANNER_TRACES_H
#define STALLOC_PLANNER_TRACES_H

#include <string.h>

#include "check.h"

typedef struct tb {
  stalloc_event_t* ev;
  size_t n, cap;
  uint64_t next_id;
  int markers;
} tb;

static void tb_push(tb* b, uint8_t kind, uint64_t id, uint64_t size) {
  if (b->n == b->cap) {
    b->cap = b->cap ? b->cap * 2 : 1024;
    b->ev = realloc(b->ev, b->cap * sizeof *b->ev);
    CHECK(b->ev);
  }
  stalloc_event_t e;
  memset(&e, 0, sizeof e);
  e.id = id;
  e.size = size;
  e.kind = kind;
  b->ev[b->n++] = e;
}
static uint64_t tb_alloc(tb* b, uint64_t size) {
  uint64_t id = ++b->next_id;
  tb_push(b, STALLOC_EVENT_ALLOC, id, size);
  return id;
}
static void tb_free(tb* b, uint64_t id, uint64_t size) { tb_push(b, STALLOC_EVENT_FREE, id, size); }
static void tb_step(tb* b, uint64_t step) {
  if (b->markers) tb_push(b, STALLOC_EVENT_STEP, step, 0);
}

/* Sizes deliberately not multiples of 512 in places, so alignment matters. */
static stalloc_trace_t* make_training_trace(int markers, int moe, int steady_steps) {
  tb b = {0};
  b.markers = markers;
  enum { LAYERS = 6 };
  uint64_t weights[LAYERS];
  tb_step(&b, 0);
  for (int l = 0; l < LAYERS; l++) weights[l] = tb_alloc(&b, 65536 + 1000 * l);
  (void)weights;
  uint64_t carried = 0, carried_size = 4096; /* lives across the step boundary */
  for (int step = 1; step <= steady_steps + 1; step++) {
    tb_step(&b, (uint64_t)step);
    uint64_t act[LAYERS], act_size[LAYERS], ex[LAYERS], ex_size[LAYERS];
    for (int l = 0; l < LAYERS; l++) {
      act_size[l] = 32768 + 3000 * (uint64_t)l;
      act[l] = tb_alloc(&b, act_size[l]);
      if (l == 0 && carried) tb_free(&b, carried, carried_size);
      uint64_t tmp = tb_alloc(&b, 20000 + 100 * (uint64_t)l);
      uint64_t scalar = tb_alloc(&b, 4);
      tb_free(&b, scalar, 4);
      ex_size[l] = moe ? 8192 + 512 * (uint64_t)((step * 7 + l * 3) % 5) : 8192;
      ex[l] = tb_alloc(&b, ex_size[l]);
      tb_free(&b, tmp, 20000 + 100 * (uint64_t)l);
    }
    carried = tb_alloc(&b, carried_size);
    for (int l = LAYERS - 1; l >= 0; l--) {
      uint64_t g = tb_alloc(&b, 40000 + 10 * (uint64_t)l);
      tb_free(&b, ex[l], ex_size[l]);
      tb_free(&b, act[l], act_size[l]);
      tb_free(&b, g, 40000 + 10 * (uint64_t)l);
    }
    if (step == 1) /* the first optimizer step allocates the optimizer state */
      for (int l = 0; l < LAYERS; l++) tb_alloc(&b, 2 * (65536 + 1000 * (uint64_t)l));
    /* the optimizer update's temporary is the largest request: the peak is outside the
     * forward/backward, so the expert window has reusable space */
    uint64_t upd = tb_alloc(&b, 2000000);
    tb_free(&b, upd, 2000000);
  }
  stalloc_trace_t* t;
  CHECK_OK(stalloc_trace_create(&t));
  CHECK_OK(stalloc_trace_append(t, b.ev, b.n));
  free(b.ev);
  return t;
}

#endif
