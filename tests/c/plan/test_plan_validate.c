/* test_plan_validate.c - one set of plan rules on every path: a plan read from a file and the
 * same plan handed to an allocator get the same answer. Each case below was accepted on one of
 * the two paths and refused on the other before the rules were one function. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "hand_plan.h"
#include "plan/plan_validate.h"

/* Iteration: A (periodic at 0), D (dynamic, window 0), B (periodic at 4096); window 0 reuses
 * [8192, 16384). A valid plan; each case breaks one thing. */
typedef struct small_plan {
  stalloc_plan p;
  st_plan_entry iter[3];
  st_reuse_window win;
  st_reuse_range range;
} small_plan;

static void make(small_plan* s) {
  memset(s, 0, sizeof *s);
  s->iter[0] = (st_plan_entry){4096, 0, PLAN_CLASS_PERIODIC, UINT32_MAX};
  s->iter[1] = (st_plan_entry){3000, PLAN_NO_OFFSET, PLAN_CLASS_DYNAMIC, 0};
  s->iter[2] = (st_plan_entry){4096, 4096, PLAN_CLASS_PERIODIC, UINT32_MAX};
  s->win = (st_reuse_window){0, 3, 0, 1};
  s->range = (st_reuse_range){8192, 8192};
  s->p = (stalloc_plan){.pool_size = 16384, .alignment = 512, .iteration = s->iter,
                        .iteration_count = 3, .windows = &s->win, .window_count = 1,
                        .ranges = &s->range, .range_count = 1};
  seal_plan(&s->p);
}

static char dir[] = "/tmp/stalloc-planvalidate-XXXXXX";

/* The status of the plan on each path: the rules alone, a file round trip, an allocator. */
static void expect_everywhere(const stalloc_plan* p, stalloc_status_t want, const char* detail) {
  CHECK_STATUS(st_plan_validate(p, "test"), want);
  if (detail) CHECK(strstr(stalloc_last_error(), detail) != NULL);

  char path[256];
  snprintf(path, sizeof path, "%s/p.plan", dir);
  CHECK_OK(stalloc_plan_save(p, path)); /* writes what it is given */
  stalloc_plan_t* loaded = NULL;
  CHECK_STATUS(stalloc_plan_load(path, &loaded), want);
  if (detail) CHECK(strstr(stalloc_last_error(), detail) != NULL);
  stalloc_plan_destroy(loaded);
  unlink(path);

  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(NULL, &a));
  CHECK_STATUS(stalloc_allocator_load_plan(a, p), want);
  if (detail) CHECK(strstr(stalloc_last_error(), detail) != NULL);
  CHECK_OK(stalloc_allocator_destroy(a));
}

int main(void) {
  CHECK(mkdtemp(dir));
  small_plan s;
  make(&s);
  expect_everywhere(&s.p, STALLOC_OK, NULL);

  /* Once refused only when loaded into an allocator: a window starting past the iteration. */
  make(&s);
  s.win = (st_reuse_window){4, 5, 0, 1};
  expect_everywhere(&s.p, STALLOC_ERR_BAD_FORMAT, "reuse window 0");

  /* Once refused only when built or read: */
  make(&s); /* an empty reuse range */
  s.range.size = 0;
  expect_everywhere(&s.p, STALLOC_ERR_BAD_FORMAT, "reuse range 0");
  make(&s); /* an empty window */
  s.win.end = s.win.begin;
  expect_everywhere(&s.p, STALLOC_ERR_BAD_FORMAT, "reuse window 0");
  make(&s); /* a periodic entry that names a window */
  s.iter[0].window = 0;
  expect_everywhere(&s.p, STALLOC_ERR_BAD_FORMAT, "iteration entry 0");
  make(&s); /* a plan peak that is not its entries' */
  s.p.plan_peak = 4096;
  expect_everywhere(&s.p, STALLOC_ERR_BAD_FORMAT, "plan peak");
  make(&s); /* a fingerprint that is not its entries' */
  s.p.fingerprint ^= 1;
  expect_everywhere(&s.p, STALLOC_ERR_BAD_FORMAT, "fingerprint");

  /* Once refused on both paths with different statuses (the allocator said PLAN_MISMATCH): an
   * offset off the plan's own alignment. */
  make(&s); /* an offset off the plan's own alignment */
  s.iter[2].offset = 4096 + 8;
  seal_plan(&s.p);
  expect_everywhere(&s.p, STALLOC_ERR_BAD_FORMAT, "iteration entry 2");

  rmdir(dir);
  puts("test_plan_validate: ok");
  return 0;
}
