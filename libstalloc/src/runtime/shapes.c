/* shapes.c - each position's size as a function of the step's keys (see shapes.h).
 *
 * A kind is the number of allocs in a step, as in online.c and hints.c. For each kind the
 * latest step's sizes are kept, and per position its rules: the same size whatever the shape
 * (weights' gradients, optimizer scratch), proportional to a key position's size (activations:
 * batch x tokens), to its square (eager attention scores) or to the product of two keys'
 * (cross-attention: source x target tokens), or none seen. A key is a position whose size
 * changed where no key before it explains the change: the first micro-batch's input ids, the
 * second's when they are padded each to its own length, an encoder-decoder's target ids. Rules
 * are learned from two steps whose sizes differ and kept while later steps agree with them. */
#include <stdlib.h>
#include <string.h>

#include "runtime/shapes.h"

#define KINDS 4
#define KEYS 4
#define EARLY 16 /* keys are among a step's first requests: its inputs set its shape */

/* A position's rules, one bit each: proportional to key m's size (LINEAR + m), to its square
 * (SQUARE + m), or to the product of two keys' sizes (PRODUCT + pair: a query length times a
 * key length, as in an encoder-decoder's cross-attention where source and target are padded
 * each to its own length). Every rule that explained each change so far is kept, so where two
 * keys moved together at first (source and target lengths in step) the step that tells them
 * apart keeps the right one, rather than relearning after a miss. SAME_RULE: the same size
 * whatever the shape; 0: no rule. */
enum { LINEAR = 0, SQUARE = KEYS, PRODUCT = 2 * KEYS, RULES = 2 * KEYS + KEYS * (KEYS - 1) / 2 };
#define SAME_RULE ((uint16_t)1 << 15)
_Static_assert(RULES < 15, "a position's rules fit below SAME_RULE");
static const uint8_t PAIR[KEYS * (KEYS - 1) / 2][2] = {{0, 1}, {0, 2}, {0, 3}, {1, 2}, {1, 3}, {2, 3}};

typedef struct kind_shape {
  size_t n;            /* allocs; 0: unused */
  uint64_t* size;      /* the kind's latest step, by position */
  uint64_t* prior;     /* the step before its latest change (has_prior: one of this kind) */
  bool has_prior;
  uint16_t* rules;     /* by position: the rules that explained every change since it had one */
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
  free(k->prior);
  free(k->rules);
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

/* The two keys (the same one twice for a square, -1 for the second of a linear rule) of rule r. */
static void rule_keys(int r, int* a, int* b) {
  if (r < SQUARE) *a = r - LINEAR, *b = -1;
  else if (r < PRODUCT) *a = *b = r - SQUARE;
  else *a = PAIR[r - PRODUCT][0], *b = PAIR[r - PRODUCT][1];
}

/* The rules of k that take `was` (where the keys were `from`, a step's sizes by position) to
 * `now` (where they are `to`) exactly. A product needs its keys below 2^32 (as a square). */
static uint16_t rules_holding(const kind_shape* k, uint64_t was, uint64_t now, const uint64_t* from, const uint64_t* to) {
  uint16_t out = 0;
  for (int r = 0; r < RULES; r++) {
    int a, b;
    rule_keys(r, &a, &b);
    if (a >= k->keys || b >= k->keys) continue;
    unsigned __int128 x = now, y = was;
    x *= from[k->key[a]];
    y *= to[k->key[a]];
    if (b >= 0) {
      uint64_t fb = from[k->key[b]], tb = to[k->key[b]];
      if (from[k->key[a]] >> 32 || to[k->key[a]] >> 32 || fb >> 32 || tb >> 32) continue;
      x *= fb;
      y *= tb;
    }
    if (x == y) out |= (uint16_t)(1u << r);
  }
  return out;
}

/* A kind not seen (or given up): its first step, no rules yet. NULL: no host memory. */
static kind_shape* add_kind(st_shapes* s, const uint64_t* sizes, size_t n) {
  kind_shape* k = &s->kinds[0];
  for (int i = 1; i < KINDS && k->n; i++)
    if (!s->kinds[i].n || s->kinds[i].seen < k->seen) k = &s->kinds[i];
  clear(k);
  k->size = malloc(n * sizeof *k->size);
  k->prior = malloc(n * sizeof *k->prior);
  k->rules = calloc(n, sizeof *k->rules);
  if (!k->size || !k->prior || !k->rules) {
    clear(k);
    return NULL;
  }
  memcpy(k->size, sizes, n * sizeof *sizes);
  k->n = n;
  return k;
}

/* Learns the rules of kind k (n allocs) from a step whose sizes by position were `was_sizes` to
 * one where they are `sizes`, over the first `common` positions (the others are unexplained). */
static size_t learn_change(kind_shape* k, const uint64_t* was_sizes, const uint64_t* sizes, size_t n, size_t common) {
  size_t unexplained = n - common;
  for (size_t j = 0; j < common; j++) {
    uint64_t was = was_sizes[j], now = sizes[j];
    uint16_t had = k->rules[j];
    if (had == SAME_RULE && was == now) continue;
    /* the rules it had that still hold; else those that explain this change and, if some
     * do, the change before it too (a position that followed the target length alone, then
     * the source length alone, follows their product) */
    bool has_rules = had && had != SAME_RULE;
    uint16_t holding = has_rules || was != now ? rules_holding(k, was, now, was_sizes, sizes) : 0;
    uint16_t rules = has_rules ? had & holding : 0;
    if (!rules && was == now) rules = SAME_RULE;
    if (!rules) {
      rules = holding;
      uint16_t both = k->has_prior ? rules & rules_holding(k, k->prior[j], was, k->prior, was_sizes) : 0;
      if (both) rules = both;
    }
    if (!rules && k->keys < KEYS && j < EARLY) { /* a key: what follows may follow it */
      k->key[k->keys] = j;
      rules = (uint16_t)(1u << (LINEAR + k->keys++));
    }
    unexplained += !rules;
    k->rules[j] = rules;
  }
  /* More than a quarter changed with no rule (sizes an MoE gate routes): the kind's next shape
   * is not foretold, as the hints stop when more than a quarter of them miss. */
  k->explained = unexplained <= n / 4;
  k->has_prior = was_sizes == k->size; /* a change within the kind, not from the step before */
  if (k->has_prior) {
    uint64_t* t = k->prior;
    k->prior = k->size;
    k->size = t;
  }
  memcpy(k->size, sizes, n * sizeof *sizes);
  return unexplained;
}

/* How a micro-batch's request of size a relates to its like of size b in the next micro-batch,
 * whose input ids are ka and kb bytes: the same size (0), proportional (1), to the square (2),
 * or none (-1). */
static int mirrored(uint64_t a, uint64_t b, uint64_t ka, uint64_t kb) {
  if (a == b) return 0;
  unsigned __int128 x = (unsigned __int128)a * kb, y = (unsigned __int128)b * ka;
  if (x == y) return 1;
  if (ka >> 32 || kb >> 32) return -1;
  return x * kb == y * ka ? 2 : -1;
}

#define MIRROR_PROBE 8      /* requests after the keys a shift must explain before it is weighed */
#define MIRROR_MAX 16384    /* allocs of a step searched for micro-batches */
#define MIRROR_WEIGHED 256  /* shifts weighed in full, at most: the search stays linear */

/* A step seen once may already teach its kind's rules: under gradient accumulation each
 * micro-batch makes the requests of the one before it, at its own length (the warm-up step's
 * micro-batches, padded each on its own). Two positions among the first requests whose sizes
 * differ (the micro-batches' input ids, made first) and a stretch after them repeated a fixed
 * number of positions on, each request the same size or scaled as the two keys are, give each
 * position of the two stretches its rule against its own micro-batch's key; the others keep
 * their size. Taken only where the stretches hold a quarter of the step or more, explain at
 * least 7/8 of their positions and some of them scale (equal micro-batches teach nothing). */
static void learn_within(kind_shape* k, const uint64_t* w, size_t n) {
  if (n > MIRROR_MAX) return;
  size_t best_p = 0, best_q = 0, best_d = 0, best_matched = 0, weighed = 0;
  for (size_t p = 0; p < EARLY && p < n; p++)
    for (size_t q = p + 1; q < EARLY && q < n; q++) {
      if (w[p] == w[q] || !w[p] || !w[q]) continue;
      size_t from = q + 1;
      if (from + 2 * MIRROR_PROBE > n) continue;
      /* the sizes b for which mirrored(w[from], b, w[p], w[q]) is not -1, worked out once per
       * pair of keys: comparing each shift's request with them rejects most shifts before the
       * probe, whose 128-bit products per shift cost three times the search (bench_shapes) */
      uint64_t same = w[from], linear = 0, square = 0;
      unsigned __int128 x = (unsigned __int128)same * w[q];
      if (x % w[p] == 0 && x / w[p] <= UINT64_MAX) linear = (uint64_t)(x / w[p]);
      if (!(w[p] >> 32 || w[q] >> 32) && (x *= w[q]) % ((unsigned __int128)w[p] * w[p]) == 0 &&
          x / ((unsigned __int128)w[p] * w[p]) <= UINT64_MAX)
        square = (uint64_t)(x / ((unsigned __int128)w[p] * w[p]));
      /* the two stretches hold a quarter of the step or more (the rest keeps its size) */
      for (size_t d = ST_MAX((size_t)MIRROR_PROBE, (n + 7) / 8); from + 2 * d <= n; d++) {
        uint64_t b = w[from + d];
        if (b != same && (b != linear || !linear) && (b != square || !square)) continue;
        int probe = 0; /* the first requests after the keys all match, and some scale */
        for (size_t j = from; j < from + MIRROR_PROBE && probe >= 0; j++) {
          int m = mirrored(w[j], w[j + d], w[p], w[q]);
          probe = m < 0 ? -1 : probe + (m > 0);
        }
        if (probe <= 0) continue;
        if (++weighed > MIRROR_WEIGHED) goto chosen;
        size_t matched = 0, scaled = 0;
        for (size_t j = from; j < from + d; j++) {
          int m = mirrored(w[j], w[j + d], w[p], w[q]);
          matched += m >= 0;
          scaled += m > 0;
        }
        if (8 * matched >= 7 * d && scaled >= MIRROR_PROBE && matched > best_matched)
          best_p = p, best_q = q, best_d = d, best_matched = matched;
      }
    }
chosen:
  if (!best_d) return;
  size_t from = best_q + 1;
  k->keys = 2;
  k->key[0] = best_p;
  k->key[1] = best_q;
  for (size_t j = 0; j < n; j++) k->rules[j] = SAME_RULE;
  k->rules[best_p] = (uint16_t)(1u << LINEAR);
  k->rules[best_q] = (uint16_t)(1u << (LINEAR + 1));
  for (size_t j = from; j < from + best_d; j++) {
    int m = mirrored(w[j], w[j + best_d], w[best_p], w[best_q]);
    uint16_t first = m == 1 ? (uint16_t)(1u << LINEAR) : m == 2 ? (uint16_t)(1u << SQUARE) : m == 0 ? SAME_RULE : 0;
    uint16_t second = m == 1 ? (uint16_t)(1u << (LINEAR + 1)) : m == 2 ? (uint16_t)(1u << (SQUARE + 1)) : first;
    k->rules[j] = first;
    k->rules[j + best_d] = second;
  }
  /* at most 1/8 of the stretches, so of the step, changed with no rule: under the quarter */
  k->explained = true;
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
    if (!k->explained || !k->keys) learn_within(k, sizes, n);
    return -1;
  }
  k->seen = s->clock;
  if (memcmp(sizes, k->size, n * sizeof *sizes) == 0) return 0; /* the same shape: nothing to learn */
  return (ptrdiff_t)learn_change(k, k->size, sizes, n, n);
}

bool st_shapes_repeats(const st_shapes* s, const uint64_t* sizes, size_t n) {
  const kind_shape* k = find(s, n);
  return k && memcmp(sizes, k->size, n * sizeof *sizes) == 0;
}

bool st_shapes_same_at(const st_shapes* s, size_t n, size_t position, uint64_t size) {
  const kind_shape* k = find(s, n);
  return k && k->size && position < n && k->size[position] == size;
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
    out[j] = k->size[j];
    uint16_t rules = k->rules[j];
    if (!rules || rules == SAME_RULE) continue;
    int a, b;
    rule_keys(__builtin_ctz(rules), &a, &b); /* the first that held throughout */
    uint64_t fa = k->size[k->key[a]], ta = asked[k->key[a]];
    uint64_t fb = b < 0 ? 1 : k->size[k->key[b]], tb = b < 0 ? 1 : asked[k->key[b]];
    if (!fa || !ta || !fb || !tb) continue;
    if (b >= 0 && (fa >> 32 || ta >> 32 || fb >> 32 || tb >> 32)) continue; /* as rules_holding */
    /* below 2^128: size < 2^64 and, with two keys, ta * tb < 2^64 */
    unsigned __int128 x = (unsigned __int128)k->size[j] * ta * tb, d = (unsigned __int128)fa * fb;
    x = (x + d - 1) / d; /* rounded up */
    if (x <= UINT64_MAX / 2) out[j] = (uint64_t)x;
  }
  return true;
}
