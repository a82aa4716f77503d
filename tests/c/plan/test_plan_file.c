/* test_plan_file.c - the plan file: a round trip keeps everything; every truncation, every
 * flipped byte, random bytes, a newer version and a foreign file are rejected with
 * STALLOC_ERR_BAD_FORMAT / _TRUNCATED / _VERSION, never accepted and never a crash. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#include "check.h"
#include "planner_traces.h"
#include "stalloc/stalloc.h"

static char dir[] = "/tmp/stalloc-planfile-XXXXXX";

static char* path_of(const char* name) {
  static char buf[256];
  snprintf(buf, sizeof buf, "%s/%s", dir, name);
  return buf;
}

static uint8_t* read_all(const char* path, size_t* len) {
  FILE* f = fopen(path, "rb");
  CHECK(f);
  fseek(f, 0, SEEK_END);
  *len = (size_t)ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t* b = malloc(*len ? *len : 1);
  CHECK(fread(b, 1, *len, f) == *len);
  fclose(f);
  return b;
}

static void write_all(const char* path, const uint8_t* b, size_t len) {
  FILE* f = fopen(path, "wb");
  CHECK(f);
  CHECK(fwrite(b, 1, len, f) == len);
  fclose(f);
}

static int is_file_error(stalloc_status_t s) {
  return s == STALLOC_ERR_BAD_FORMAT || s == STALLOC_ERR_TRUNCATED || s == STALLOC_ERR_VERSION;
}

static stalloc_status_t load_bytes(const uint8_t* b, size_t len) {
  char* p = path_of("damaged.plan");
  write_all(p, b, len);
  stalloc_plan_t* plan = NULL;
  stalloc_status_t s = stalloc_plan_load(p, &plan);
  if (s == STALLOC_OK) stalloc_plan_destroy(plan);
  else CHECK(plan == NULL && stalloc_last_error()[0]);
  return s;
}

static void same_entries(const stalloc_plan_t* a, const stalloc_plan_t* b) {
  for (int which = 0; which < 2; which++) {
    const stalloc_plan_entry_t *x, *y;
    size_t nx, ny;
    CHECK_OK(stalloc_plan_entries(a, which, &x, &nx));
    CHECK_OK(stalloc_plan_entries(b, which, &y, &ny));
    CHECK(nx == ny && (nx == 0 || memcmp(x, y, nx * sizeof *x) == 0));
  }
  const stalloc_reuse_window_t *wa, *wb;
  const stalloc_reuse_range_t *ra, *rb;
  size_t wna, wnb, rna, rnb;
  CHECK_OK(stalloc_plan_reuse(a, &wa, &wna, &ra, &rna));
  CHECK_OK(stalloc_plan_reuse(b, &wb, &wnb, &rb, &rnb));
  CHECK(wna == wnb && rna == rnb);
  CHECK(wna == 0 || memcmp(wa, wb, wna * sizeof *wa) == 0);
  CHECK(rna == 0 || memcmp(ra, rb, rna * sizeof *ra) == 0);
  stalloc_plan_info_t ia, ib;
  stalloc_plan_info_init(&ia);
  stalloc_plan_info_init(&ib);
  CHECK_OK(stalloc_plan_info(a, &ia));
  CHECK_OK(stalloc_plan_info(b, &ib));
  CHECK(memcmp(&ia, &ib, sizeof ia) == 0);
}

static stalloc_plan_t* small_plan_tolerating(stalloc_trace_t** trace, int32_t tolerate_sizes) {
  stalloc_trace_t* t = make_training_trace(1, 1, 3); /* MoE: has a reuse table */
  stalloc_plan_params_t p;
  stalloc_plan_params_init(&p);
  p.time_limit = 0;
  p.tolerate_sizes = tolerate_sizes;
  stalloc_plan_t* plan;
  CHECK_OK(stalloc_plan_create(t, &p, &plan));
  *trace = t;
  return plan;
}

static stalloc_plan_t* small_plan(stalloc_trace_t** trace) { return small_plan_tolerating(trace, 0); }

/* Both ways, with sizes tolerated too: the flag survives the file, and a plan whose entries
 * hold each position's largest size still checks against the trace it came from. */
static void test_round_trip(void) {
  for (int32_t tolerate = 0; tolerate < 2; tolerate++) {
    stalloc_trace_t* t;
    stalloc_plan_t* plan = small_plan_tolerating(&t, tolerate);
    CHECK_OK(stalloc_plan_check(plan, t));
    CHECK_OK(stalloc_plan_save(plan, path_of("a.plan")));
    stalloc_plan_t* back;
    CHECK_OK(stalloc_plan_load(path_of("a.plan"), &back));
    same_entries(plan, back);
    stalloc_plan_info_t info;
    stalloc_plan_info_init(&info);
    CHECK_OK(stalloc_plan_info(back, &info));
    CHECK(info.sizes_tolerated == (uint64_t)tolerate);
    CHECK_OK(stalloc_plan_check(back, t));
    stalloc_plan_destroy(back);
    stalloc_plan_destroy(plan);
    stalloc_trace_destroy(t);
  }
}

static void test_truncations_and_flips(void) {
  stalloc_trace_t* t;
  stalloc_plan_t* plan = small_plan(&t);
  CHECK_OK(stalloc_plan_save(plan, path_of("b.plan")));
  size_t len;
  uint8_t* good = read_all(path_of("b.plan"), &len);
  uint8_t* bad = malloc(len + 64);
  for (size_t cut = 0; cut < len; cut++) {
    stalloc_status_t s = load_bytes(good, cut);
    CHECK(is_file_error(s));
    if (cut >= 128) CHECK(s == STALLOC_ERR_TRUNCATED); /* header intact: counts say more */
  }
  memcpy(bad, good, len);
  memset(bad + len, 0, 64);
  CHECK(load_bytes(bad, len + 1) == STALLOC_ERR_BAD_FORMAT); /* trailing byte */
  for (size_t i = 0; i < len; i++) { /* one bit of every byte, cycling through the bits */
    memcpy(bad, good, len);
    bad[i] ^= (uint8_t)(1u << (i % 8));
    CHECK(is_file_error(load_bytes(bad, len)));
  }
  free(bad);
  free(good);
  stalloc_plan_destroy(plan);
  stalloc_trace_destroy(t);
}

static void test_version_random_foreign(void) {
  stalloc_trace_t* t;
  stalloc_plan_t* plan = small_plan(&t);
  CHECK_OK(stalloc_plan_save(plan, path_of("c.plan")));
  size_t len;
  uint8_t* b = read_all(path_of("c.plan"), &len);
  b[8] = 2; /* version 2: a newer writer */
  CHECK(load_bytes(b, len) == STALLOC_ERR_VERSION);
  CHECK(strstr(stalloc_last_error(), "version") != NULL);
  free(b);

  srand(7);
  for (int k = 0; k < 200; k++) {
    size_t n = (size_t)(rand() % 4096);
    uint8_t* r = malloc(n + 1);
    for (size_t i = 0; i < n; i++) r[i] = (uint8_t)rand();
    if (k % 2 && n >= 8) memcpy(r, "STALPLAN", 8); /* right magic, random rest */
    CHECK(is_file_error(load_bytes(r, n)));
    free(r);
  }
  /* a trace file is not a plan file */
  CHECK_OK(stalloc_trace_save(t, path_of("t.trace")));
  stalloc_plan_t* p2 = NULL;
  CHECK_STATUS(stalloc_plan_load(path_of("t.trace"), &p2), STALLOC_ERR_BAD_FORMAT);
  CHECK_STATUS(stalloc_plan_load(path_of("missing.plan"), &p2), STALLOC_ERR_IO);
  CHECK_STATUS(stalloc_plan_save(plan, "/nonexistent-dir/x.plan"), STALLOC_ERR_IO);
  stalloc_plan_destroy(plan);
  stalloc_trace_destroy(t);
}

/* A non-plan is refused from its header, before the rest is read (issue 13 item 6): the
 * loader reads from a pipe whose writer sent one header's worth and then waits. A loader that
 * reads to the end returns only once the writer gives up (5 s) and closes. */
static atomic_int loaded, writer_closed;
static void* slow_writer(void* arg) {
  int fd = open((const char*)arg, O_WRONLY);
  if (fd < 0) return NULL;
  char junk[256];
  memset(junk, 'x', sizeof junk);
  memcpy(junk, "NOTAPLAN", 8);
  if (write(fd, junk, sizeof junk) != (ssize_t)sizeof junk) perror("write");
  for (int i = 0; i < 500 && !atomic_load(&loaded); i++) nanosleep(&(struct timespec){0, 10000000}, NULL);
  atomic_store(&writer_closed, 1);
  close(fd);
  return NULL;
}

static void test_header_before_body(void) {
  const char* fifo = path_of("pipe.plan");
  CHECK(mkfifo(fifo, 0600) == 0);
  pthread_t th;
  CHECK(pthread_create(&th, NULL, slow_writer, (void*)fifo) == 0);
  stalloc_plan_t* p = NULL;
  CHECK_STATUS(stalloc_plan_load(fifo, &p), STALLOC_ERR_BAD_FORMAT);
  CHECK(strstr(stalloc_last_error(), "bad magic"));
  CHECK(!atomic_load(&writer_closed)); /* refused while more bytes could still come */
  atomic_store(&loaded, 1);
  pthread_join(th, NULL);
}

int main(void) {
  CHECK(mkdtemp(dir));
  RUN(test_header_before_body);
  RUN(test_round_trip);
  RUN(test_truncations_and_flips);
  RUN(test_version_random_foreign);
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
  CHECK(system(cmd) == 0);
  return 0;
}
