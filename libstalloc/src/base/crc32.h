/* crc32.h - CRC-32 for file checksums (crc32.c). */
#ifndef STALLOC_CRC32_H
#define STALLOC_CRC32_H

#include "base/internal.h"

uint32_t st_crc32(uint32_t crc, const void* data, size_t len);

#endif
