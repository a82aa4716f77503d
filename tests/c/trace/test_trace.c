/* test_trace.c - the native trace: record mode round trip, checked appends, the summary, and
 * every kind of damaged file giving a clear error rather than a crash. */
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static char dir[256];

static const char* path_in_dir(const char* name) {
  static char buf[512];
  snprintf(buf, sizeof buf, "%s/%s", dir, name);
  return buf;
}

static long file_size(const char* path) {
  FILE* f = fopen(path, "rb");
  CHECK(f);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fclose(f);
  return n;
}

static void copy_prefix(const char* from, const char* to, long n) {
  FILE* in = fopen(from, "rb");
  FILE* out = fopen(to, "wb");
  CHECK(in && out);
  for (long i = 0; i < n; i++) fputc(fgetc(in), out);
  fclose(in);
  fclose(out);
}

static void test_record_round_trip(void) {
  char path[512];
  snprintf(path, sizeof path, "%s", path_in_dir("rec.stalloc"));
  stalloc_options_t o;
  stalloc_options_init(&o);
  stalloc_allocator_t* a;
  CHECK_OK(stalloc_allocator_create(&o, &a));
  void* early;
  CHECK_OK(stalloc_allocator_alloc(a, 777, 0, 0, &early)); /* before recording */
  CHECK_OK(stalloc_allocator_record_start(a, path));
  void* p[10];
  for (uint64_t step = 0; step < 3; step++) {
    CHECK_OK(stalloc_allocator_step_begin(a, step));
    for (int i = 0; i < 10; i++) CHECK_OK(stalloc_allocator_alloc(a, 1000 * (i + 1), 0, 5, &p[i]));
    for (int i = 9; i >= 0; i--) CHECK_OK(stalloc_allocator_free(a, p[i]));
  }
  CHECK_OK(stalloc_allocator_free(a, early));
  CHECK_OK(stalloc_allocator_record_stop(a));
  CHECK_OK(stalloc_allocator_destroy(a));

  stalloc_trace_t* t;
  CHECK_OK(stalloc_trace_load(path, &t));
  const stalloc_event_t* ev;
  size_t n;
  CHECK_OK(stalloc_trace_events(t, &ev, &n));
  CHECK(n == 3 + 3 * 20 + 1);
  CHECK(ev[0].kind == STALLOC_EVENT_STEP && ev[0].id == 0);
  CHECK(ev[1].kind == STALLOC_EVENT_ALLOC && ev[1].size == 1000 && ev[1].stream == 5);
  CHECK(ev[1].address != 0 && ev[1].thread != 0);
  CHECK(ev[n - 1].kind == STALLOC_EVENT_FREE && (ev[n - 1].flags & STALLOC_EVENT_FLAG_UNMATCHED));
  stalloc_trace_summary_t s;
  stalloc_trace_summary_init(&s);
  CHECK_OK(stalloc_trace_summary(t, &s));
  CHECK(s.requests == 30 && s.steps == 3 && s.unmatched_frees == 1 && s.unfreed_requests == 0);
  CHECK(s.distinct_sizes == 10 && s.lower_bound == 55000 && s.max_request == 10000);
  const stalloc_request_t* r;
  CHECK_OK(stalloc_trace_requests(t, &r, &n));
  CHECK(n == 30 && r[0].alloc_event == 1 && r[0].free_event == 20 && r[0].step == 1);

  /* Save and load again: identical events. */
  char copy[512];
  snprintf(copy, sizeof copy, "%s", path_in_dir("copy.stalloc"));
  CHECK_OK(stalloc_trace_save(t, copy));
  stalloc_trace_t* t2;
  CHECK_OK(stalloc_trace_load(copy, &t2));
  const stalloc_event_t* ev2;
  size_t n2;
  CHECK_OK(stalloc_trace_events(t, &ev, &n));
  CHECK_OK(stalloc_trace_events(t2, &ev2, &n2));
  CHECK(n == n2 && memcmp(ev, ev2, n * sizeof *ev) == 0);
  stalloc_trace_destroy(t2);
  stalloc_trace_destroy(t);
}

static void test_checked_append(void) {
  stalloc_trace_t* t;
  CHECK_OK(stalloc_trace_create(&t));
  stalloc_event_t good[2] = {{.id = 1, .size = 10, .kind = STALLOC_EVENT_ALLOC},
                             {.id = 1, .size = 0, .kind = STALLOC_EVENT_FREE}};
  CHECK_OK(stalloc_trace_append(t, good, 2));
  stalloc_event_t bad[3] = {{.id = 2, .size = 10, .kind = STALLOC_EVENT_ALLOC},
                            {.id = 2, .size = 10, .kind = STALLOC_EVENT_ALLOC},
                            {.id = 2, .kind = STALLOC_EVENT_FREE}};
  CHECK_STATUS(stalloc_trace_append(t, bad, 3), STALLOC_ERR_BAD_FORMAT);
  CHECK(strstr(stalloc_last_error(), "event 3") != NULL);
  size_t n;
  const stalloc_event_t* ev;
  CHECK_OK(stalloc_trace_events(t, &ev, &n));
  CHECK(n == 2); /* nothing of the bad batch stayed */
  CHECK(ev[1].size == 10); /* the free carries its alloc's size */
  stalloc_event_t stray = {.id = 9, .kind = STALLOC_EVENT_FREE};
  CHECK_STATUS(stalloc_trace_append(t, &stray, 1), STALLOC_ERR_BAD_FORMAT);
  stalloc_event_t wrong_size[2] = {{.id = 3, .size = 10, .kind = STALLOC_EVENT_ALLOC},
                                   {.id = 3, .size = 11, .kind = STALLOC_EVENT_FREE}};
  CHECK_STATUS(stalloc_trace_append(t, wrong_size, 2), STALLOC_ERR_BAD_FORMAT);
  /* A free of request id 0 (the id map's empty key) is refused, not paired with a request. */
  stalloc_event_t free0[6] = {{.id = 1, .size = 64, .kind = STALLOC_EVENT_ALLOC},
                              {.id = 0, .kind = STALLOC_EVENT_FREE},
                              {.id = 0, .kind = STALLOC_EVENT_FREE},
                              {.id = 2, .size = 64, .kind = STALLOC_EVENT_ALLOC},
                              {.id = 3, .size = 64, .kind = STALLOC_EVENT_ALLOC},
                              {.id = 1, .kind = STALLOC_EVENT_FREE}};
  stalloc_trace_t* t0;
  CHECK_OK(stalloc_trace_create(&t0));
  CHECK_STATUS(stalloc_trace_append(t0, free0, 6), STALLOC_ERR_BAD_FORMAT);
  CHECK(strstr(stalloc_last_error(), "request id 0") != NULL);
  CHECK_OK(stalloc_trace_append(t0, free0, 1));
  CHECK_STATUS(stalloc_trace_append(t0, free0 + 1, 1), STALLOC_ERR_BAD_FORMAT);
  CHECK_OK(stalloc_trace_append(t0, free0 + 3, 3));
  stalloc_trace_summary_t sum;
  stalloc_trace_summary_init(&sum);
  CHECK_OK(stalloc_trace_summary(t0, &sum));
  CHECK(sum.lower_bound == 192);
  stalloc_trace_destroy(t0);
  /* Two live requests of 2^63 bytes: totals saturate, never wrap (issue 13 item 4). */
  stalloc_event_t wide[4] = {{.id = 1, .size = 1ull << 63, .kind = STALLOC_EVENT_ALLOC},
                             {.id = 2, .size = 1ull << 63, .kind = STALLOC_EVENT_ALLOC},
                             {.id = 1, .kind = STALLOC_EVENT_FREE},
                             {.id = 3, .size = 8, .kind = STALLOC_EVENT_ALLOC}};
  CHECK_OK(stalloc_trace_create(&t0));
  CHECK_OK(stalloc_trace_append(t0, wide, 4));
  stalloc_trace_summary_init(&sum);
  CHECK_OK(stalloc_trace_summary(t0, &sum));
  CHECK(sum.total_bytes == UINT64_MAX);
  CHECK(sum.lower_bound == UINT64_MAX && sum.lower_bound_event == 1);
  stalloc_trace_destroy(t0);
  stalloc_event_t kind = {.id = 4, .kind = 99};
  CHECK_STATUS(stalloc_trace_append(t, &kind, 1), STALLOC_ERR_BAD_FORMAT);
  /* The map still knows id 2 is not live: a fresh alloc of it is fine. */
  CHECK_OK(stalloc_trace_append(t, bad, 1));
  stalloc_trace_destroy(t);
}

static void test_damaged_files(void) {
  char good[512];
  snprintf(good, sizeof good, "%s", path_in_dir("good.stalloc"));
  stalloc_trace_writer_t* w;
  CHECK_OK(stalloc_trace_writer_open(good, &w));
  for (uint64_t i = 1; i <= 10000; i++) {
    stalloc_event_t e[2] = {{.id = i, .size = i, .kind = STALLOC_EVENT_ALLOC},
                            {.id = i, .size = i, .kind = STALLOC_EVENT_FREE}};
    CHECK_OK(stalloc_trace_writer_append(w, e, 2));
  }
  CHECK_OK(stalloc_trace_writer_close(w));
  stalloc_trace_t* t;
  CHECK_OK(stalloc_trace_load(good, &t));
  stalloc_trace_destroy(t);

  long size = file_size(good);
  char bad[512];
  snprintf(bad, sizeof bad, "%s", path_in_dir("bad.stalloc"));
  /* Every truncation point is an error, never a crash. */
  const long cuts[] = {0, 1, 8, 31, 32, 35, 36, 100, 4096 * 40 + 47, size / 2, size - 16, size - 9, size - 1};
  for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
    copy_prefix(good, bad, cuts[i]);
    t = (stalloc_trace_t*)1;
    stalloc_status_t s = stalloc_trace_load(bad, &t);
    CHECK(s == STALLOC_ERR_TRUNCATED || s == STALLOC_ERR_BAD_FORMAT);
    CHECK(t == NULL && stalloc_last_error()[0] != '\0');
  }
  copy_prefix(good, bad, 50);
  CHECK_STATUS(stalloc_trace_load(bad, &t), STALLOC_ERR_TRUNCATED);

  /* Flipped bytes anywhere: header, chunk header, payload, end marker. */
  FILE* f;
  unsigned char buf[1];
  const long spots[] = {0, 9, 20, 33, 40, 60, 1000, 100000, size - 12, size - 3};
  for (size_t i = 0; i < sizeof spots / sizeof spots[0]; i++) {
    copy_prefix(good, bad, size);
    f = fopen(bad, "r+b");
    fseek(f, spots[i], SEEK_SET);
    CHECK(fread(buf, 1, 1, f) == 1);
    buf[0] ^= 0x5A;
    fseek(f, spots[i], SEEK_SET);
    fwrite(buf, 1, 1, f);
    fclose(f);
    stalloc_status_t s = stalloc_trace_load(bad, &t);
    CHECK(s == STALLOC_ERR_BAD_FORMAT || s == STALLOC_ERR_VERSION || s == STALLOC_ERR_TRUNCATED);
  }

  /* Trailing garbage. */
  copy_prefix(good, bad, size);
  f = fopen(bad, "ab");
  fputc('x', f);
  fclose(f);
  CHECK_STATUS(stalloc_trace_load(bad, &t), STALLOC_ERR_BAD_FORMAT);

  /* A future version with a valid header checksum says so. */
  copy_prefix(good, bad, size);
  f = fopen(bad, "r+b");
  unsigned char header[32];
  CHECK(fread(header, 1, 32, f) == 32);
  header[8] = 2;
  /* Recompute the CRC-32 of the first 24 bytes (bitwise, independent of the library's). */
  uint32_t crc = 0xFFFFFFFFu;
  for (int i = 0; i < 24; i++) {
    crc ^= header[i];
    for (int k = 0; k < 8; k++) crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
  }
  crc = ~crc;
  memcpy(header + 24, &crc, 4);
  fseek(f, 0, SEEK_SET);
  fwrite(header, 1, 32, f);
  fclose(f);
  CHECK_STATUS(stalloc_trace_load(bad, &t), STALLOC_ERR_VERSION);
  CHECK(strstr(stalloc_last_error(), "version 2") != NULL);

  /* Reserved fields must be zero (issue 13): the header's flags (inside its checksum), its
   * reserved word (outside it) and a chunk header's reserved word. Each was accepted. */
  const struct { long at; int header_crc; } reserved[] = {{20, 1}, {28, 0}, {44, 0}};
  for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
    copy_prefix(good, bad, size);
    f = fopen(bad, "r+b");
    CHECK(fread(header, 1, 32, f) == 32);
    unsigned char word[4] = {1, 0, 0, 0};
    if (reserved[i].at < 32) memcpy(header + reserved[i].at, word, 4);
    if (reserved[i].header_crc) {
      crc = 0xFFFFFFFFu;
      for (int j = 0; j < 24; j++) {
        crc ^= header[j];
        for (int k = 0; k < 8; k++) crc = (crc & 1) ? 0xEDB88320u ^ (crc >> 1) : crc >> 1;
      }
      crc = ~crc;
      memcpy(header + 24, &crc, 4);
    }
    fseek(f, 0, SEEK_SET);
    fwrite(header, 1, 32, f);
    if (reserved[i].at >= 32) {
      fseek(f, reserved[i].at, SEEK_SET);
      fwrite(word, 1, 4, f);
    }
    fclose(f);
    CHECK_STATUS(stalloc_trace_load(bad, &t), STALLOC_ERR_BAD_FORMAT);
    CHECK(strstr(stalloc_last_error(), "reserved") != NULL);
  }

  /* 1..31 bytes of a trace are a truncated trace; as many bytes of anything else are not a
   * trace at all; an empty file says it is empty. */
  for (long n = 0; n < 32; n++) {
    copy_prefix(good, bad, n);
    CHECK_STATUS(stalloc_trace_load(bad, &t), STALLOC_ERR_TRUNCATED);
    CHECK(strstr(stalloc_last_error(), n ? "ends inside the header" : "empty file") != NULL);
  }
  f = fopen(bad, "wb");
  fputs("STALX", f);
  fclose(f);
  CHECK_STATUS(stalloc_trace_load(bad, &t), STALLOC_ERR_BAD_FORMAT);
  CHECK(strstr(stalloc_last_error(), "bad magic") != NULL);

  /* Random bytes of many lengths. */
  uint32_t rng = 99;
  for (int round = 0; round < 200; round++) {
    f = fopen(bad, "wb");
    int len = round * 13;
    for (int i = 0; i < len; i++) {
      rng = rng * 1103515245u + 12345u;
      fputc((int)(rng >> 16) & 0xFF, f);
    }
    fclose(f);
    stalloc_status_t s = stalloc_trace_load(bad, &t);
    CHECK(s == STALLOC_ERR_BAD_FORMAT || s == STALLOC_ERR_TRUNCATED);
  }
  CHECK_STATUS(stalloc_trace_load(path_in_dir("missing.stalloc"), &t), STALLOC_ERR_IO);
}

static int callback_calls;
static void on_error(stalloc_status_t s, const char* message, void* arg) {
  (void)s;
  (void)message;
  *(int*)arg += 1;
}

static void test_error_callback(void) {
  stalloc_set_error_callback(on_error, &callback_calls);
  stalloc_trace_t* t;
  CHECK_STATUS(stalloc_trace_load(path_in_dir("missing.stalloc"), &t), STALLOC_ERR_IO);
  CHECK(callback_calls == 1);
  stalloc_set_error_callback(NULL, NULL);
  CHECK_STATUS(stalloc_trace_load(path_in_dir("missing.stalloc"), &t), STALLOC_ERR_IO);
  CHECK(callback_calls == 1);
  CHECK(strcmp(stalloc_status_string(STALLOC_ERR_DOUBLE_FREE), "double free") == 0);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/stalloc_test_trace_XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  RUN(test_record_round_trip);
  RUN(test_checked_append);
  RUN(test_damaged_files);
  RUN(test_error_callback);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK(system(cmd) == 0);
  return 0;
}
