/* thread.h - a small number per thread, stable for the thread's life (for trace events).
 * Defined in thread.c. */
#ifndef STALLOC_THREAD_H
#define STALLOC_THREAD_H

#include "base/internal.h"

uint32_t st_thread_number(void);

#endif
