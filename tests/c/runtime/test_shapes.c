/* test_shapes.c - each position's size as a function of the step's keys: rules learned from two
 * steps whose shapes differ (same, linear, square, a product of two keys, none), key positions
 * (one per micro-batch padded to its own length), exact predictions for a shape never seen, a
 * kind's first rules learned from the step before of another kind (the warm-up) or from its
 * own micro-batches, kinds whose changes no rule explains, and the oldest kind giving its
 * place. */
#include <string.h>

#include "check.h"
#include "runtime/shapes.h"

#define N 20 /* keys are among the first 16 positions */

/* A step of the kind under test at `tokens`: positions that keep their size (weights'
 * gradients), others proportional to the tokens, one to their square (attention scores). */
static void step_at(uint64_t tokens, uint64_t* sizes) {
  for (int j = 0; j < N; j++) sizes[j] = j % 3 == 0 ? 4096 * (uint64_t)(j + 1) : 512 * tokens * (uint64_t)(j + 1);
  sizes[6] = 4 * tokens * tokens;
}

static void learns_and_predicts(void) {
  st_shapes* s = st_shapes_create();
  CHECK(s);
  uint64_t a[N], b[N], want[N], got[N];
  step_at(64, a);
  CHECK(!st_shapes_repeats(s, a, N)); /* no step of the kind yet */
  st_shapes_learn(s, a, N);
  CHECK(st_shapes_key_position(s, N) == ST_SHAPE_NONE); /* one step: nothing known */
  CHECK(!st_shapes_predict(s, N, a, got));
  CHECK(st_shapes_repeats(s, a, N) && !st_shapes_repeats(s, a, N - 1));
  st_shapes_learn(s, a, N); /* the same shape again: still nothing */
  CHECK(st_shapes_key_position(s, N) == ST_SHAPE_NONE);
  step_at(40, b);
  CHECK(!st_shapes_repeats(s, b, N));
  st_shapes_learn(s, b, N);
  CHECK(st_shapes_repeats(s, b, N) && !st_shapes_repeats(s, a, N));
  CHECK(st_shapes_key_position(s, N) == 1); /* the first position whose size changed */
  step_at(128, want); /* longer than any step so far */
  CHECK(st_shapes_predict(s, N, want, got));
  CHECK(memcmp(got, want, sizeof got) == 0);
  /* an unknown kind, or one of another length, is not predicted */
  CHECK(st_shapes_key_position(s, N + 1) == ST_SHAPE_NONE && !st_shapes_predict(s, N + 1, want, got));
  /* a position that follows no rule keeps its latest size */
  step_at(48, a);
  a[17] = 12345; /* past the first 16: not a key */
  st_shapes_learn(s, a, N);
  step_at(80, want);
  CHECK(st_shapes_predict(s, N, want, got));
  CHECK(got[17] == 12345 && got[2] == want[2] && got[6] == want[6] && got[3] == want[3]);
  st_shapes_destroy(s);
}

/* Gradient accumulation over two micro-batches padded each on its own: both input ids come
 * first (positions 0 and 1), and each micro-batch's activations follow its own. */
static void accumulation_at(uint64_t first, uint64_t second, uint64_t* sizes) {
  sizes[0] = 8 * first;
  sizes[1] = 8 * second;
  sizes[2] = 2048 * first;
  sizes[3] = 1 << 20; /* a gradient */
  sizes[4] = 4096 * first;
  sizes[5] = 2048 * second;
  sizes[6] = 4096 * second;
  sizes[7] = 512 * second * second;
  for (int j = 8; j < N; j++) sizes[j] = j % 2 ? 1024 * (uint64_t)j : 256 * first * (uint64_t)j;
}

static void one_key_per_micro_batch(void) {
  st_shapes* s = st_shapes_create();
  uint64_t a[N], want[N], got[N];
  accumulation_at(64, 32, a);
  st_shapes_learn(s, a, N);
  accumulation_at(64, 48, a); /* only the second changed: it is the first key */
  st_shapes_learn(s, a, N);
  CHECK(st_shapes_key_position(s, N) == 1);
  accumulation_at(40, 48, a); /* then only the first: a second key, before it */
  st_shapes_learn(s, a, N);
  CHECK(st_shapes_key_position(s, N) == 0 || st_shapes_key_position(s, N) == 1);
  accumulation_at(96, 20, a); /* both: the rules hold */
  st_shapes_learn(s, a, N);
  accumulation_at(128, 100, want);
  CHECK(st_shapes_predict(s, N, want, got));
  CHECK(memcmp(got, want, sizeof got) == 0);
  st_shapes_destroy(s);
}

/* An encoder-decoder padded on each side to its own length: source ids (position 0, S tokens)
 * and target ids (position 1, T tokens) come first; self-attention scores follow S^2 or T^2,
 * cross-attention's S x T. */
static void seq2seq_at(uint64_t src, uint64_t tgt, uint64_t* sizes) {
  sizes[0] = 8 * src;
  sizes[1] = 8 * tgt;
  sizes[2] = 1 << 20; /* a gradient */
  sizes[3] = 512 * src;
  sizes[4] = 512 * tgt;
  sizes[5] = 64 * src * src;
  sizes[6] = 64 * tgt * tgt;
  sizes[7] = 64 * src * tgt;
  for (int j = 8; j < N; j++) sizes[j] = j % 2 ? 2048 * (uint64_t)j : 128 * src * tgt * (uint64_t)j;
}

static void cross_attention_follows_the_product_of_two_keys(void) {
  st_shapes* s = st_shapes_create();
  uint64_t a[N], want[N], got[N];
  seq2seq_at(64, 32, a);
  st_shapes_learn(s, a, N);
  seq2seq_at(64, 48, a); /* only the target: position 1 is the first key, and S x T follows it */
  CHECK(st_shapes_learn(s, a, N) == 0);
  /* then only the source: S x T now follows the source too, and the one rule that explains
   * both changes is the product (proportional to the source alone explains only this one) */
  seq2seq_at(40, 48, a);
  CHECK(st_shapes_learn(s, a, N) == 0);
  CHECK(st_shapes_key_position(s, N) == 1);
  seq2seq_at(128, 100, want); /* both, by other factors */
  CHECK(st_shapes_predict(s, N, want, got));
  CHECK(memcmp(got, want, sizeof got) == 0);
  seq2seq_at(96, 20, a); /* the rules hold on */
  CHECK(st_shapes_learn(s, a, N) == 0);
  seq2seq_at(17, 250, want);
  CHECK(st_shapes_predict(s, N, want, got) && memcmp(got, want, sizeof got) == 0);
  st_shapes_destroy(s);
}

/* The warm-up step is the training step with the optimizer's state made at its end (more
 * allocs: another kind). The first training step learns its rules from what the two share, so
 * the second, of a shape neither had, is foretold; a step before that shares nothing with it
 * teaches nothing. */
static void the_first_step_of_a_kind_learns_from_the_step_before(void) {
  st_shapes* s = st_shapes_create();
  uint64_t warm[N + 5], a[N], want[N], got[N];
  step_at(64, warm);
  for (int j = N; j < N + 5; j++) warm[j] = 8192 * (uint64_t)j; /* the optimizer's state */
  st_shapes_learn(s, warm, N + 5);
  step_at(40, a);
  st_shapes_learn(s, a, N);
  CHECK(st_shapes_key_position(s, N) == 1);
  step_at(128, want);
  CHECK(st_shapes_predict(s, N, want, got) && memcmp(got, want, sizeof got) == 0);
  st_shapes_destroy(s);

  /* a step before of unrelated sizes: most positions change with no rule */
  s = st_shapes_create();
  uint32_t rng = 5;
  for (int j = 0; j < N + 5; j++) {
    rng = rng * 1103515245u + 12345u;
    warm[j] = 4096 * (1 + (rng >> 16) % 97);
  }
  st_shapes_learn(s, warm, N + 5);
  st_shapes_learn(s, a, N);
  CHECK(st_shapes_key_position(s, N) == ST_SHAPE_NONE && !st_shapes_predict(s, N, want, got));
  st_shapes_destroy(s);

  /* a step before with far more allocs (a training step before an evaluation pass) teaches
   * nothing, even where the two begin alike */
  s = st_shapes_create();
  uint64_t train[4 * N];
  step_at(64, train);
  for (int j = N; j < 4 * N; j++) train[j] = 1024 * (uint64_t)j;
  st_shapes_learn(s, train, 4 * N);
  st_shapes_learn(s, a, N);
  CHECK(st_shapes_key_position(s, N) == ST_SHAPE_NONE && !st_shapes_predict(s, N, want, got));
  st_shapes_destroy(s);
}

/* A warm-up step under gradient accumulation over two micro-batches padded each on its own:
 * both input ids first, then each micro-batch's requests at its own length (a stretch of
 * STRETCH), then the optimizer's state. */
#define STRETCH 24
#define ACCUM (2 + 2 * STRETCH + 6)
static void accumulating_step(uint64_t first, uint64_t second, uint64_t* sizes) {
  sizes[0] = 8 * first;
  sizes[1] = 8 * second;
  for (int m = 0; m < 2; m++) {
    uint64_t t = m ? second : first;
    for (int j = 0; j < STRETCH; j++) {
      uint64_t* at = &sizes[2 + m * STRETCH + j];
      *at = j % 4 == 3 ? 65536 * (uint64_t)(j + 1) : 512 * t * (uint64_t)(j + 1); /* gradients, activations */
      if (j == 5) *at = 4 * t * t;                                              /* attention scores */
    }
  }
  for (int j = 0; j < 6; j++) sizes[2 + 2 * STRETCH + j] = 8192 * (uint64_t)(j + 1); /* state */
}

/* Its first step already teaches the kind's rules: the second micro-batch repeats the first's
 * requests at its own length, so a step of that kind at other lengths is foretold. Micro-batches
 * of one length teach nothing (nothing tells a size that follows the length from one that does
 * not). */
static void micro_batches_of_one_step_teach_its_rules(void) {
  st_shapes* s = st_shapes_create();
  uint64_t warm[ACCUM], want[ACCUM], got[ACCUM];
  accumulating_step(56, 54, warm);
  CHECK(st_shapes_learn(s, warm, ACCUM) == -1);
  CHECK(st_shapes_key_position(s, ACCUM) == 1);
  accumulating_step(28, 64, want);
  CHECK(st_shapes_predict(s, ACCUM, want, got) && memcmp(got, want, sizeof got) == 0);
  st_shapes_destroy(s);

  s = st_shapes_create();
  accumulating_step(56, 56, warm);
  st_shapes_learn(s, warm, ACCUM);
  CHECK(st_shapes_key_position(s, ACCUM) == ST_SHAPE_NONE && !st_shapes_predict(s, ACCUM, want, got));
  st_shapes_destroy(s);
}

/* An MoE gate routes other sizes at most positions each step: no rule explains the change, so
 * the kind's next shape is not foretold. */
static void unexplained_kinds_are_not_predicted(void) {
  st_shapes* s = st_shapes_create();
  uint64_t a[N], b[N], got[N];
  uint32_t rng = 3;
  for (int step = 0; step < 4; step++) {
    for (int j = 0; j < N; j++) {
      rng = rng * 1103515245u + 12345u;
      a[j] = 4096 * (1 + (rng >> 16) % 97);
    }
    st_shapes_learn(s, a, N);
  }
  CHECK(st_shapes_key_position(s, N) == ST_SHAPE_NONE && !st_shapes_predict(s, N, a, got));
  /* once a change is explained again, it is predicted again */
  step_at(10, a);
  st_shapes_learn(s, a, N);
  step_at(20, b);
  st_shapes_learn(s, b, N);
  CHECK(st_shapes_key_position(s, N) != ST_SHAPE_NONE);
  step_at(30, a);
  CHECK(st_shapes_predict(s, N, a, got) && memcmp(got, a, sizeof got) == 0);
  st_shapes_destroy(s);
}

/* Four kinds are kept; a fifth takes the place of the one learned from longest ago. */
static void the_oldest_kind_gives_its_place(void) {
  st_shapes* s = st_shapes_create();
  uint64_t a[N + 4], b[N + 4];
  for (int j = 0; j < N + 4; j++) a[j] = b[j] = 1024 * (uint64_t)(j + 1);
  b[0] *= 2;
  for (size_t n = 1; n <= 4; n++) { /* kinds of 1..4 allocs, each with a key */
    st_shapes_learn(s, a, n);
    st_shapes_learn(s, b, n);
    CHECK(st_shapes_key_position(s, n) == 0);
  }
  st_shapes_learn(s, a, 2); /* kind 2 seen again: kind 1 is now the oldest */
  st_shapes_learn(s, a, 9);
  CHECK(st_shapes_key_position(s, 1) == ST_SHAPE_NONE);
  for (size_t n = 2; n <= 4; n++) CHECK(st_shapes_key_position(s, n) == 0);
  st_shapes_destroy(s);
  st_shapes_destroy(NULL); /* what create returns without host memory */
  uint64_t out[1];
  CHECK(st_shapes_key_position(NULL, 1) == ST_SHAPE_NONE && !st_shapes_predict(NULL, 1, out, out));
  st_shapes_learn(NULL, a, 1);
}

int main(void) {
  learns_and_predicts();
  one_key_per_micro_batch();
  cross_attention_follows_the_product_of_two_keys();
  the_first_step_of_a_kind_learns_from_the_step_before();
  micro_batches_of_one_step_teach_its_rules();
  unexplained_kinds_are_not_predicted();
  the_oldest_kind_gives_its_place();
  return 0;
}
