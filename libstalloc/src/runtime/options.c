/* options.c - option defaults and their STALLOC_<NAME> environment overrides, in one table. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/internal.h"

/* Parses "123", "4k", "512MiB", "2g", ...; false on anything else. */
static bool parse_bytes(const char* text, uint64_t* out) {
  errno = 0;
  char* end;
  unsigned long long v = strtoull(text, &end, 10);
  if (end == text || errno) return false;
  while (*end == ' ') end++;
  uint64_t mult = 1;
  switch (*end) {
    case '\0': break;
    case 'k': case 'K': mult = 1ull << 10; end++; break;
    case 'm': case 'M': mult = 1ull << 20; end++; break;
    case 'g': case 'G': mult = 1ull << 30; end++; break;
    case 't': case 'T': mult = 1ull << 40; end++; break;
    default: return false;
  }
  if (mult > 1 && (*end == 'i' || *end == 'I')) end++;
  if (mult > 1 && (*end == 'b' || *end == 'B')) end++;
  if (*end != '\0' || (v && mult > UINT64_MAX / v)) return false;
  *out = v * mult;
  return true;
}

typedef enum option_kind { OPT_BYTES, OPT_INT, OPT_BACKEND, OPT_STRING } option_kind;

typedef struct option_desc {
  const char* env;     /* environment variable */
  option_kind kind;
  size_t offset;       /* field in stalloc_options_t */
} option_desc;

static const option_desc OPTIONS[] = {
    {"STALLOC_BACKEND", OPT_BACKEND, offsetof(stalloc_options_t, backend)},
    {"STALLOC_DEVICE", OPT_INT, offsetof(stalloc_options_t, device)},
    {"STALLOC_ALIGNMENT", OPT_BYTES, offsetof(stalloc_options_t, alignment)},
    {"STALLOC_MEMORY_LIMIT", OPT_BYTES, offsetof(stalloc_options_t, memory_limit)},
    {"STALLOC_VIRTUAL_CAPACITY", OPT_BYTES, offsetof(stalloc_options_t, virtual_capacity)},
    {"STALLOC_RECORD_PATH", OPT_STRING, offsetof(stalloc_options_t, record_path)},
    {"STALLOC_TINY_ALIGNMENT", OPT_BYTES, offsetof(stalloc_options_t, tiny_alignment)},
    {"STALLOC_GROWABLE_POOL", OPT_INT, offsetof(stalloc_options_t, growable_pool)},
    {"STALLOC_VIRTUAL_LAG", OPT_INT, offsetof(stalloc_options_t, virtual_lag)},
};

void stalloc_options_init(stalloc_options_t* o) {
  if (!o) return;
  memset(o, 0, sizeof *o);
  o->struct_size = sizeof *o;
  o->backend = STALLOC_BACKEND_HOST;
  o->device = 0;
  o->alignment = 512;
  o->memory_limit = 0;
  o->virtual_capacity = 1ull << 40;
  o->record_path = NULL;
  o->tiny_alignment = 16;
  o->growable_pool = 1;
  for (size_t i = 0; i < sizeof OPTIONS / sizeof OPTIONS[0]; i++) {
    const char* v = getenv(OPTIONS[i].env);
    if (!v || !*v) continue;
    char* field = (char*)o + OPTIONS[i].offset;
    bool ok = true;
    switch (OPTIONS[i].kind) {
      case OPT_BYTES: ok = parse_bytes(v, (uint64_t*)field); break;
      case OPT_INT: {
        char* end;
        long n = strtol(v, &end, 10);
        ok = *end == '\0' && n >= 0 && n < 1 << 15;
        if (ok) *(int32_t*)field = (int32_t)n;
        break;
      }
      case OPT_BACKEND: ok = stalloc_backend_parse(v, (stalloc_backend_kind_t*)field) == STALLOC_OK; break;
      case OPT_STRING: *(const char**)field = v; break;
    }
    /* A bad value keeps the default; say so once on stderr rather than fail silently. */
    if (!ok) fprintf(stderr, "stalloc: ignoring %s=%s (not a valid value)\n", OPTIONS[i].env, v);
  }
  st_clear_error();
}
