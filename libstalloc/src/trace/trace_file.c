/* trace_file.c - the native trace file (docs/trace-format.md): a streaming writer with bounded
 * memory, an atomic save, and a reader that checks every byte it trusts.
 *
 * Layout, little-endian:
 *   header  32 B: magic "STALTRCE", u32 version, u32 header_bytes (32), u32 event_bytes (40),
 *                 u32 flags (0), u32 crc32 of the previous 24 bytes, u32 reserved (0)
 *   chunks:       u32 tag "EVTS", u32 count (1..CHUNK_EVENTS), u32 crc32 of payload,
 *                 u32 reserved (0), then count * 40 B events
 *   end     16 B: u32 tag "TEND", u32 crc32 of the next 8 bytes, u64 total events
 *   and nothing after it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/crc32.h"
#include "trace/trace.h"

_Static_assert(sizeof(stalloc_event_t) == 40, "the event is 40 bytes on disk");
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the trace format is little-endian");

#define TRACE_VERSION 1u
#define CHUNK_EVENTS 4096u
static const char MAGIC[8] = {'S', 'T', 'A', 'L', 'T', 'R', 'C', 'E'};
static const uint32_t TAG_EVENTS = 0x53545645u; /* "EVTS" */
static const uint32_t TAG_END = 0x444E4554u;    /* "TEND" */

typedef struct file_header {
  char magic[8];
  uint32_t version, header_bytes, event_bytes, flags, crc, reserved;
} file_header;
_Static_assert(sizeof(file_header) == 32, "header is 32 bytes");

typedef struct chunk_header {
  uint32_t tag, count, crc, reserved;
} chunk_header;

typedef struct end_marker {
  uint32_t tag, crc;
  uint64_t total;
} end_marker;

struct stalloc_trace_writer {
  FILE* file;
  char* path;
  stalloc_event_t buffer[CHUNK_EVENTS];
  uint32_t buffered;
  uint64_t total;
  bool failed;
};

static stalloc_status_t write_all(stalloc_trace_writer_t* w, const void* p, size_t n) {
  if (fwrite(p, 1, n, w->file) != n) {
    w->failed = true;
    return st_fail(STALLOC_ERR_IO, "%s: write failed: %s", w->path, strerror(errno));
  }
  return STALLOC_OK;
}

static stalloc_status_t flush_chunk(stalloc_trace_writer_t* w) {
  if (!w->buffered) return STALLOC_OK;
  chunk_header h = {TAG_EVENTS, w->buffered, 0, 0};
  h.crc = st_crc32(0, w->buffer, w->buffered * sizeof(stalloc_event_t));
  stalloc_status_t s = write_all(w, &h, sizeof h);
  if (!s) s = write_all(w, w->buffer, w->buffered * sizeof(stalloc_event_t));
  w->buffered = 0;
  return s;
}

stalloc_status_t stalloc_trace_writer_open(const char* path, stalloc_trace_writer_t** out) {
  if (!path || !out) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "trace_writer_open: NULL argument");
  *out = NULL;
  stalloc_trace_writer_t* w = calloc(1, sizeof *w);
  char* copy = w ? strdup(path) : NULL;
  if (!copy) {
    free(w);
    return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "trace_writer_open: no host memory");
  }
  w->path = copy;
  w->file = fopen(path, "wb");
  if (!w->file) {
    stalloc_status_t s = st_fail(STALLOC_ERR_IO, "%s: cannot open for writing: %s", path, strerror(errno));
    free(w->path);
    free(w);
    return s;
  }
  file_header h = {{0}, TRACE_VERSION, sizeof(file_header), sizeof(stalloc_event_t), 0, 0, 0};
  memcpy(h.magic, MAGIC, sizeof MAGIC);
  h.crc = st_crc32(0, &h, 24);
  stalloc_status_t s = write_all(w, &h, sizeof h);
  if (s) {
    fclose(w->file);
    free(w->path);
    free(w);
    return s;
  }
  *out = w;
  return STALLOC_OK;
}

stalloc_status_t stalloc_trace_writer_append(stalloc_trace_writer_t* w,
                                             const stalloc_event_t* events, size_t count) {
  if (!w || (!events && count))
    return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "trace_writer_append: NULL argument");
  if (w->failed) return st_fail(STALLOC_ERR_IO, "%s: an earlier write failed", w->path);
  for (size_t i = 0; i < count; i++) {
    w->buffer[w->buffered++] = events[i];
    w->total++;
    if (w->buffered == CHUNK_EVENTS) {
      stalloc_status_t s = flush_chunk(w);
      if (s) return s;
    }
  }
  return STALLOC_OK;
}

stalloc_status_t stalloc_trace_writer_close(stalloc_trace_writer_t* w) {
  if (!w) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "trace_writer_close: NULL writer");
  stalloc_status_t s = w->failed ? st_fail(STALLOC_ERR_IO, "%s: an earlier write failed", w->path)
                                 : flush_chunk(w);
  if (!s) {
    end_marker e = {TAG_END, 0, w->total};
    e.crc = st_crc32(0, &e.total, sizeof e.total);
    s = write_all(w, &e, sizeof e);
  }
  if (fclose(w->file) != 0 && !s)
    s = st_fail(STALLOC_ERR_IO, "%s: close failed: %s", w->path, strerror(errno));
  free(w->path);
  free(w);
  return s;
}

stalloc_status_t stalloc_trace_save(const stalloc_trace_t* t, const char* path) {
  if (!t || !path) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "trace_save: NULL argument");
  size_t n = strlen(path);
  char* tmp = malloc(n + 16);
  if (!tmp) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "trace_save: no host memory");
  snprintf(tmp, n + 16, "%s.tmp", path);
  stalloc_trace_writer_t* w;
  stalloc_status_t s = stalloc_trace_writer_open(tmp, &w);
  if (!s) {
    s = stalloc_trace_writer_append(w, t->events, t->event_count);
    stalloc_status_t c = stalloc_trace_writer_close(w);
    if (!s) s = c;
  }
  if (!s && rename(tmp, path) != 0)
    s = st_fail(STALLOC_ERR_IO, "%s: cannot rename into place: %s", path, strerror(errno));
  if (s) remove(tmp);
  free(tmp);
  return s;
}

/* Reads exactly n bytes; a short read at EOF is truncation, anything else an I/O error. */
static stalloc_status_t read_exact(FILE* f, const char* path, void* p, size_t n, const char* what) {
  size_t got = fread(p, 1, n, f);
  if (got == n) return STALLOC_OK;
  if (ferror(f)) return st_fail(STALLOC_ERR_IO, "%s: read error in %s: %s", path, what, strerror(errno));
  return st_fail(STALLOC_ERR_TRUNCATED, "%s: file ends inside %s (%zu of %zu bytes)", path, what, got, n);
}

static stalloc_status_t read_trace(FILE* f, const char* path, stalloc_trace_t* t) {
  file_header h;
  /* The magic first: a short file that is no trace is "not a trace", not "truncated". */
  size_t got = fread(&h, 1, sizeof h, f);
  if (ferror(f)) return st_fail(STALLOC_ERR_IO, "%s: read error in the header: %s", path, strerror(errno));
  if (got == 0) return st_fail(STALLOC_ERR_TRUNCATED, "%s: empty file (no trace header)", path);
  if (memcmp(h.magic, MAGIC, got < sizeof MAGIC ? got : sizeof MAGIC) != 0)
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: not a stalloc trace (bad magic)", path);
  if (got < sizeof h)
    return st_fail(STALLOC_ERR_TRUNCATED, "%s: file ends inside the header (%zu of %zu bytes)", path,
                   got, sizeof h);
  stalloc_status_t s = STALLOC_OK;
  if (h.crc != st_crc32(0, &h, 24))
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: header checksum mismatch", path);
  if (h.version > TRACE_VERSION)
    return st_fail(STALLOC_ERR_VERSION,
                   "%s: written by trace format version %u; this stalloc reads up to %u", path,
                   h.version, TRACE_VERSION);
  if (h.version == 0 || h.header_bytes != sizeof h || h.event_bytes != sizeof(stalloc_event_t))
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: header has version %u, %u-byte header, %u-byte events",
                   path, h.version, h.header_bytes, h.event_bytes);
  if (h.flags != 0 || h.reserved != 0)
    return st_fail(STALLOC_ERR_BAD_FORMAT, "%s: header's flags (0x%x) and reserved field (0x%x) must be 0",
                   path, h.flags, h.reserved);

  stalloc_event_t* chunk = malloc(CHUNK_EVENTS * sizeof *chunk);
  if (!chunk) return st_fail(STALLOC_ERR_OUT_OF_MEMORY, "trace_load: no host memory");
  for (uint64_t index = 0;; index++) {
    chunk_header c;
    size_t got = fread(&c, 1, 4, f);
    if (got != 4) {
      s = ferror(f) ? st_fail(STALLOC_ERR_IO, "%s: read error: %s", path, strerror(errno))
                    : st_fail(STALLOC_ERR_TRUNCATED,
                              "%s: no end marker after %zu events (the recording did not finish?)",
                              path, t->event_count);
      break;
    }
    if (c.tag == TAG_END) {
      end_marker e;
      e.tag = c.tag;
      if ((s = read_exact(f, path, (char*)&e + 4, sizeof e - 4, "the end marker"))) break;
      if (e.crc != st_crc32(0, &e.total, sizeof e.total) || e.total != t->event_count) {
        s = st_fail(STALLOC_ERR_BAD_FORMAT, "%s: end marker counts %llu events, the file holds %zu",
                    path, (unsigned long long)e.total, t->event_count);
        break;
      }
      if (fgetc(f) != EOF) {
        s = st_fail(STALLOC_ERR_BAD_FORMAT, "%s: bytes after the end marker", path);
        break;
      }
      break;
    }
    if (c.tag != TAG_EVENTS) {
      s = st_fail(STALLOC_ERR_BAD_FORMAT, "%s: chunk %llu: unknown tag 0x%08x", path,
                  (unsigned long long)index, c.tag);
      break;
    }
    if ((s = read_exact(f, path, (char*)&c + 4, sizeof c - 4, "a chunk header"))) break;
    if (c.reserved != 0) {
      s = st_fail(STALLOC_ERR_BAD_FORMAT, "%s: chunk %llu: reserved field 0x%x is not 0", path,
                  (unsigned long long)index, c.reserved);
      break;
    }
    if (c.count == 0 || c.count > CHUNK_EVENTS) {
      s = st_fail(STALLOC_ERR_BAD_FORMAT, "%s: chunk %llu: bad event count %u", path,
                  (unsigned long long)index, c.count);
      break;
    }
    if ((s = read_exact(f, path, chunk, c.count * sizeof *chunk, "a chunk's events"))) break;
    if (c.crc != st_crc32(0, chunk, c.count * sizeof *chunk)) {
      s = st_fail(STALLOC_ERR_BAD_FORMAT, "%s: chunk %llu: checksum mismatch", path,
                  (unsigned long long)index);
      break;
    }
    if ((s = stalloc_trace_append(t, chunk, c.count))) {
      char detail[1024];
      snprintf(detail, sizeof detail, "%s", stalloc_last_error());
      st_clear_error();
      s = st_fail(s, "%s: %s", path, detail);
      break;
    }
  }
  free(chunk);
  return s;
}

stalloc_status_t stalloc_trace_load(const char* path, stalloc_trace_t** out) {
  if (!path || !out) return st_fail(STALLOC_ERR_INVALID_ARGUMENT, "trace_load: NULL argument");
  *out = NULL;
  FILE* f = fopen(path, "rb");
  if (!f) return st_fail(STALLOC_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
  stalloc_trace_t* t;
  stalloc_status_t s = stalloc_trace_create(&t);
  if (!s) {
    s = read_trace(f, path, t);
    if (s) stalloc_trace_destroy(t);
    else *out = t;
  }
  fclose(f);
  return s;
}
