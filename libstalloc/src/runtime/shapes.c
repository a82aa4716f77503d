/* shapes.c - each position's size as a function of the step's key (see shapes.h).
 *
 * A kind is the number of allocs in a step, as in online.c and hints.c. For each kind the
 * latest step's sizes are kept, and per position a rule: the same size whatever the shape
 * (weights' gradients, optimizer scratch), proportional to the key (activations: batch x
 * tokens), or to its square (eager attention scores), or none seen. A rule is learned from
 * two steps whose keys differ and kept while later steps agree with it. */
#include <stdlib.h>
#include <string.h>

#include "runtime/shapes.h"

#define KINDS 4

enum { SAME = 0, LINEAR = 1, SQUARE = 2, NO_RULE = 3 };

typedef struct kind_shape {
  size_t n;            /* allocs; 0: unused */
  uint64_t* size;      /* the kind's latest step, by position */
  uint8_t* rule;       /* by position */
  size_t key;          /* key position, or ST_SHAPE_NONE */
  bool explained;      /* the rules explained the kind's latest change of shape */
  uint64_t seen;       /* when it was last learned from (the oldest gives its place) */
} kind_shape;

struct st_shapes {
  kind_shape kinds[KINDS];
  uint64_t clock;
};

st_shapes* st_shapes_create(void) { return calloc(1, sizeof(st_shapes)); }

static void clear(kind_shape* k) {
  free(k->size);
  free(k->rule);
  *k = (kind_shape){0};
}

void st_shapes_destroy(st_shapes* s) {
  if (!s) return;
  for (int i = 0; i < KINDS; i++) clear(&s->kinds[i]);
  free(s);
}

static const kind_shape* find(const st_shapes* s, size_t n) {
  for (int i = 0; s && n && i < KINDS; i++)
    if (s->kinds[i].n == n) return &s->kinds[i];
  return NULL;
}

/* Which rule takes `was` at key `from` to `now` at key `to` exactly. */
static uint8_t rule_of(uint64_t was, uint64_t now, uint64_t from, uint64_t to) {
  if (was == now) return SAME;
  unsigned __int128 a = (unsigned __int128)now * from, b = (unsigned __int128)was * to;
  if (a == b) return LINEAR;
  if (from < (1ull << 32) && to < (1ull << 32) && a * from == b * to) return SQUARE;
  return NO_RULE;
}

void st_shapes_learn(st_shapes* s, const uint64_t* sizes, size_t n) {
  if (!s || !n) return;
  kind_shape* k = (kind_shape*)find(s, n);
  s->clock++;
  if (!k) { /* a kind not seen (or given up): its first step, no rules yet */
    k = &s->kinds[0];
    for (int i = 1; i < KINDS && k->n; i++)
      if (!s->kinds[i].n || s->kinds[i].seen < k->seen) k = &s->kinds[i];
    clear(k);
    k->size = malloc(n * sizeof *k->size);
    k->rule = malloc(n * sizeof *k->rule);
    if (!k->size || !k->rule) {
      clear(k);
      return;
    }
    memcpy(k->size, sizes, n * sizeof *sizes);
    memset(k->rule, NO_RULE, n);
    k->n = n;
    k->key = ST_SHAPE_NONE;
    k->seen = s->clock;
    return;
  }
  k->seen = s->clock;
  size_t key = k->key;
  if (key == ST_SHAPE_NONE || sizes[key] == k->size[key]) { /* the first position that changed */
    key = 0;
    while (key < n && sizes[key] == k->size[key]) key++;
    if (key == n) return; /* the same shape: nothing to learn */
  }
  uint64_t from = k->size[key], to = sizes[key];
  if (from && to) {
    size_t unexplained = 0;
    for (size_t j = 0; j < n; j++) unexplained += (k->rule[j] = rule_of(k->size[j], sizes[j], from, to)) == NO_RULE;
    k->key = key;
    /* More than a quarter changed with no rule (sizes an MoE gate routes, a second
     * micro-batch of its own length): the kind's next shape is not foretold, as the hints
     * stop when more than a quarter of them miss. */
    k->explained = unexplained <= n / 4;
  }
  memcpy(k->size, sizes, n * sizeof *sizes);
}

size_t st_shapes_key_position(const st_shapes* s, size_t n) {
  const kind_shape* k = find(s, n);
  return k && k->explained ? k->key : ST_SHAPE_NONE;
}

bool st_shapes_predict(const st_shapes* s, size_t n, uint64_t key, uint64_t* out) {
  const kind_shape* k = find(s, n);
  if (!k || k->key == ST_SHAPE_NONE || !k->explained || !key) return false;
  uint64_t from = k->size[k->key];
  for (size_t j = 0; j < n; j++) {
    unsigned __int128 x = k->size[j], d = from;
    if (k->rule[j] == LINEAR || k->rule[j] == SQUARE) x *= key;
    if (k->rule[j] == SQUARE) {
      x *= key;
      d *= from;
    }
    if (k->rule[j] == LINEAR || k->rule[j] == SQUARE) x = (x + d - 1) / d; /* rounded up */
    out[j] = x > UINT64_MAX / 2 ? k->size[j] : (uint64_t)x;
  }
  return true;
}
