/*
 * lttng_tp.h — the LTTng-UST tracepoint provider tc_bench, for the comparison
 * in tc_bench_client (only built when pkg-config finds lttng-ust). Two events
 * carrying what a libtracectl entry carries: op, step, start, duration,
 * output bytes; entry_shapes adds the output shape and up to two input shapes
 * as sequences of dimensions.
 */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER tc_bench

#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./lttng_tp.h"

#if !defined(TC_BENCH_LTTNG_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define TC_BENCH_LTTNG_TP_H

#include <stdint.h>

#include <lttng/tracepoint.h>

#include "tracectl.h"

LTTNG_UST_TRACEPOINT_EVENT(
    tc_bench, entry,
    LTTNG_UST_TP_ARGS(uint32_t, op, uint64_t, step, uint64_t, start, uint64_t, dur, uint64_t, mem),
    LTTNG_UST_TP_FIELDS(lttng_ust_field_integer(uint32_t, op, op)
                            lttng_ust_field_integer(uint64_t, step, step)
                                lttng_ust_field_integer(uint64_t, start, start)
                                    lttng_ust_field_integer(uint64_t, dur, dur)
                                        lttng_ust_field_integer(uint64_t, mem, mem)))

LTTNG_UST_TRACEPOINT_EVENT(
    tc_bench, entry_shapes,
    LTTNG_UST_TP_ARGS(uint32_t, op, uint64_t, step, uint64_t, start, uint64_t, dur, uint64_t, mem,
                      const tc_shape *, out, const tc_shape *, in),
    LTTNG_UST_TP_FIELDS(
        lttng_ust_field_integer(uint32_t, op, op) lttng_ust_field_integer(uint64_t, step, step)
            lttng_ust_field_integer(uint64_t, start, start) lttng_ust_field_integer(
                uint64_t, dur, dur) lttng_ust_field_integer(uint64_t, mem, mem)
                lttng_ust_field_sequence(uint64_t, out_shape, out->dims, uint32_t, out->ndim)
                    lttng_ust_field_sequence(uint64_t, in0_shape, in[0].dims, uint32_t, in[0].ndim)
                        lttng_ust_field_sequence(uint64_t, in1_shape, in[1].dims, uint32_t,
                                                 in[1].ndim)))

#endif

#include <lttng/tracepoint-event.h>
