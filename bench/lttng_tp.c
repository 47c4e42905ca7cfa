/* lttng_tp.c — instantiates the tc_bench tracepoint provider (lttng_tp.h). */
#define LTTNG_UST_TRACEPOINT_CREATE_PROBES
#define LTTNG_UST_TRACEPOINT_DEFINE
#include "lttng_tp.h"
