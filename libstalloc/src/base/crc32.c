/* crc32.c - CRC-32 (IEEE 802.3, reflected, as zlib) for file checksums. */
#include <pthread.h>

#include "base/crc32.h"

static uint32_t table[256];
static pthread_once_t table_once = PTHREAD_ONCE_INIT;

static void build_table(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    table[i] = c;
  }
}

uint32_t st_crc32(uint32_t crc, const void* data, size_t len) {
  pthread_once(&table_once, build_table);
  const uint8_t* p = data;
  crc = ~crc;
  for (size_t i = 0; i < len; i++) crc = table[(crc ^ p[i]) & 0xFF] ^ (crc >> 8);
  return ~crc;
}
