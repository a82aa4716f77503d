/* shapes.c - each position's size as a function of the step's keys (see shapes.h).
 *
 * A kind is the number of allocs in a step, as in online.c and hints.c. For each kind the
 * latest step's sizes are kept, and per position a rule: the same size whatever the shape
 * (weights' gradients, optimizer scratch), proportional to a key position's size (activations:
 * batch x tokens), or to its square (eager attention scores), or none seen. A key is a position
 * whose size changed where no key before it explains the change: the first micro-batch's input
 * ids, the second's when they are padded each to its own length. Rules are learned from two
 * steps whose sizes differ and kept while later steps agree with them. */
#include <stdlib.h>
#include <string.h>

#include "runtime/shapes.h"

#define KINDS 4
#define KEYS 4
#define EARLY 16 /* keys are among a step's first requests: its inputs set its shape */

enum { SAME = 0, LINEAR = 1, SQUARE = 2, NO_RULE = 3 };

typedef struct kind_shape {
  size_t n;            /* allocs; 0: unused */
  uint64_t* size;      /* the kind's latest step, by position */
  uint8_t* rule;       /* by position: the rule, and (bits 2-3) the key it follows */
  size_t key[KEYS];    /* key positions, in the order they were found */
  int keys;
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

/* Whether `rule` takes `was` at key `from` to `now` at key `to` exactly. */
static bool holds(uint8_t rule, uint64_t was, uint64_t now, uint64_t from, uint64_t to) {
  unsigned __int128 a = (unsigned __int128)now * from, b = (unsigned __int128)was * to;
  switch (rule) {
    case SAME: return was == now;
    case LINEAR: return a == b;
    case SQUARE: return from < (1ull << 32) && to < (1ull << 32) && a * from == b * to;
    default: return false;
  }
}

/* A kind not seen (or given up): its first step, no rules yet. NULL: no host memory. */
static kind_shape* add_kind(st_shapes* s, const uint64_t* sizes, size_t n) {
  kind_shape* k = &s->kinds[0];
  for (int i = 1; i < KINDS && k->n; i++)
    if (!s->kinds[i].n || s->kinds[i].seen < k->seen) k = &s->kinds[i];
  clear(k);
  k->size = malloc(n * sizeof *k->size);
  k->rule = malloc(n * sizeof *k->rule);
  if (!k->size || !k->rule) {
    clear(k);
    return NULL;
  }
  memcpy(k->size, sizes, n * sizeof *sizes);
  memset(k->rule, NO_RULE, n);
  k->n = n;
  return k;
}

/* Learns the rules of kind k (n allocs) from a step whose sizes by position were `was_sizes` to
 * one where they are `sizes`, over the first `common` positions (the others are unexplained). */
static size_t learn_change(kind_shape* k, const uint64_t* was_sizes, const uint64_t* sizes, size_t n, size_t common) {
  size_t unexplained = n - common;
  for (size_t j = 0; j < common; j++) {
    uint64_t was = was_sizes[j], now = sizes[j];
    uint8_t rule = k->rule[j] & 3, key = k->rule[j] >> 2;
    if (rule == LINEAR || rule == SQUARE) { /* still the rule it had? */
      size_t at = k->key[key];
      if (holds(rule, was, now, was_sizes[at], sizes[at])) continue;
    } else if (rule == SAME && was == now) {
      continue;
    }
    /* a rule against the first key that changed and explains it */
    rule = NO_RULE;
    for (int m = 0; m < k->keys && rule == NO_RULE && was != now; m++) {
      size_t at = k->key[m];
      if (was_sizes[at] == sizes[at]) continue;
      for (uint8_t r = LINEAR; r <= SQUARE && rule == NO_RULE; r++)
        if (holds(r, was, now, was_sizes[at], sizes[at])) rule = r, key = (uint8_t)m;
    }
    if (rule == NO_RULE && was == now) rule = SAME;
    if (rule == NO_RULE && k->keys < KEYS && j < EARLY) { /* a key: what follows may follow it */
      key = (uint8_t)k->keys;
      k->key[k->keys++] = j;
      rule = LINEAR;
    }
    unexplained += rule == NO_RULE;
    k->rule[j] = (uint8_t)(rule | key << 2);
  }
  /* More than a quarter changed with no rule (sizes an MoE gate routes): the kind's next shape
   * is not foretold, as the hints stop when more than a quarter of them miss. */
  k->explained = unexplained <= n / 4;
  memcpy(k->size, sizes, n * sizeof *sizes);
  return unexplained;
}

ptrdiff_t st_shapes_learn(st_shapes* s, const uint64_t* sizes, size_t n) {
  if (!s || !n) return -1;
  s->clock++;
  kind_shape* k = (kind_shape*)find(s, n);
  if (!k) {
    /* The step before, of another kind with nearly as many allocs, may be this one but for a
     * few (the warm-up step: the optimizer creates its state): what they share by position
     * teaches the new kind's first rules, so its second step can already be foretold. An
     * evaluation pass, far fewer allocs than a training step, teaches nothing. */
    const kind_shape* before = NULL;
    for (int i = 0; i < KINDS; i++)
      if (s->kinds[i].n && s->kinds[i].seen + 1 == s->clock) before = &s->kinds[i];
    if (before && !st_shapes_near(n, before->n)) before = NULL;
    size_t common = before ? ST_MIN(n, before->n) : 0;
    /* add_kind gives the place of the kind seen longest ago: never the one seen last */
    if (!(k = add_kind(s, sizes, n))) return -1;
    k->seen = s->clock;
    if (before) learn_change(k, before->size, sizes, n, common);
    return -1;
  }
  k->seen = s->clock;
  if (memcmp(sizes, k->size, n * sizeof *sizes) == 0) return 0; /* the same shape: nothing to learn */
  return (ptrdiff_t)learn_change(k, k->size, sizes, n, n);
}

size_t st_shapes_key_position(const st_shapes* s, size_t n) {
  const kind_shape* k = find(s, n);
  if (!k || !k->explained || !k->keys) return ST_SHAPE_NONE;
  size_t last = 0; /* keys are made in the order they are found, not of position */
  for (int m = 0; m < k->keys; m++) last = ST_MAX(last, k->key[m]);
  return last;
}

bool st_shapes_predict(const st_shapes* s, size_t n, const uint64_t* asked, uint64_t* out) {
  const kind_shape* k = find(s, n);
  if (!k || !k->explained || !k->keys) return false;
  for (size_t j = 0; j < n; j++) {
    uint8_t rule = k->rule[j] & 3;
    size_t at = k->key[k->rule[j] >> 2];
    out[j] = k->size[j];
    uint64_t from = k->size[at], to = asked[at];
    if ((rule != LINEAR && rule != SQUARE) || !from || !to) continue;
    if (rule == SQUARE && (from >= (1ull << 32) || to >= (1ull << 32))) continue; /* as holds() */
    unsigned __int128 x = (unsigned __int128)k->size[j] * to, d = from;
    if (rule == SQUARE) { /* below 2^128: size < 2^64, to^2 < 2^64, and d < 2^64 */
      x *= to;
      d *= from;
    }
    x = (x + d - 1) / d; /* rounded up */
    if (x <= UINT64_MAX / 2) out[j] = (uint64_t)x;
  }
  return true;
}
