/* plan_validate.h - the one set of rules every plan meets (plan_validate.c), whether it was
 * just built (planner.c), read from a file (plan_file.c) or handed to an allocator (runtime.c). */
#ifndef STALLOC_PLAN_VALIDATE_H
#define STALLOC_PLAN_VALIDATE_H

#include "plan/plan.h"

/* STALLOC_OK, or STALLOC_ERR_BAD_FORMAT with a message that starts with `what` (the plan's
 * origin: "planner", a file's path, "load_plan") and names the broken part. Does not check that
 * planned entries live apart (the runtime and replay stay safe when they do not). */
stalloc_status_t st_plan_validate(const stalloc_plan* plan, const char* what);

#endif
