/*
 * cli_export_perfetto — Perfetto .pftrace (see cli_export_perfetto.h).
 */
#include "cli_export_perfetto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cli_export_lanes.h"
#include "map.h"
#include "cli_pb.h"

#define PF_FLUSH_AT ((size_t)64 << 10)
#define PF_SEQ_ID   1
#define PF_SHAPE    4096 /* 8 inputs of 16 dims of 20 digits fit */

/* Field numbers and enum values of tests/data/perfetto/perfetto_trace.proto. */
enum {
    PF_TRACE_PACKET = 1, /* Trace.packet */

    PF_PACKET_TIMESTAMP = 8, /* TracePacket */
    PF_PACKET_SEQ_ID = 10,   /* trusted_packet_sequence_id */
    PF_PACKET_TRACK_EVENT = 11,
    PF_PACKET_INTERNED = 12,
    PF_PACKET_SEQ_FLAGS = 13,
    PF_PACKET_TRACK_DESC = 60,

    PF_SEQ_INCREMENTAL_STATE_CLEARED = 1, /* TracePacket.SequenceFlags */
    PF_SEQ_NEEDS_INCREMENTAL_STATE = 2,

    PF_TRACK_UUID = 1, /* TrackDescriptor */
    PF_TRACK_NAME = 2,
    PF_TRACK_PROCESS = 3,
    PF_TRACK_PARENT = 5,

    PF_PROCESS_PID = 1, /* ProcessDescriptor */
    PF_PROCESS_NAME = 6,

    PF_EVENT_ANNOTATION = 4, /* TrackEvent */
    PF_EVENT_TYPE = 9,
    PF_EVENT_NAME_IID = 10,
    PF_EVENT_TRACK_UUID = 11,
    PF_EVENT_CATEGORY = 22,

    PF_TYPE_SLICE_BEGIN = 1, /* TrackEvent.Type */
    PF_TYPE_SLICE_END = 2,
    PF_TYPE_INSTANT = 3,

    PF_ANNOT_NAME_IID = 1, /* DebugAnnotation */
    PF_ANNOT_UINT = 3,
    PF_ANNOT_STRING = 6,

    PF_INTERNED_EVENT_NAMES = 2, /* InternedData */
    PF_INTERNED_ANNOT_NAMES = 3,

    PF_NAME_IID = 1, /* EventName and DebugAnnotationName alike */
    PF_NAME_NAME = 2,
};

/* The debug annotations of a slice; their names are interned with iids 1..N. */
enum { PF_A_STEP = 1, PF_A_ELEMENTS, PF_A_MEM, PF_A_OUT_SHAPE, PF_A_IN_SHAPES, PF_A_COUNT };

static const char *const pf_annot_names[PF_A_COUNT] = {
    [PF_A_STEP] = "step",           [PF_A_ELEMENTS] = "elements",   [PF_A_MEM] = "mem_bytes",
    [PF_A_OUT_SHAPE] = "out_shape", [PF_A_IN_SHAPES] = "in_shapes",
};

struct pf_state {
    struct cli_pb pb;
    FILE *out;
    struct cli_export_lanes lanes; /* the slice tracks: one per lane, uuid in the lane's id */
    struct pairmap procs;          /* view pid → the uuid of its process track */
    struct pairmap names;          /* op index → interned iid */
    uint64_t next_uuid, next_iid;
    bool cleared;         /* the SEQ_INCREMENTAL_STATE_CLEARED packet is written */
    bool annots_interned; /* the annotation names are */
};

static size_t pf_packet_begin(struct pf_state *st, uint64_t ts, uint32_t flags)
{
    size_t pkt = cli_pb_begin(&st->pb, PF_TRACE_PACKET);

    cli_pb_uint(&st->pb, PF_PACKET_TIMESTAMP, ts);
    cli_pb_uint(&st->pb, PF_PACKET_SEQ_ID, PF_SEQ_ID);
    if (!st->cleared)
        flags |= PF_SEQ_INCREMENTAL_STATE_CLEARED;
    st->cleared = true;
    if (flags != 0)
        cli_pb_uint(&st->pb, PF_PACKET_SEQ_FLAGS, flags);
    return pkt;
}

/* Ends a packet; writes the buffer out once it is large. Returns 0 or a negative errno. */
static int pf_packet_end(struct pf_state *st, size_t pkt, FILE *out)
{
    int rc;

    cli_pb_end(&st->pb, pkt);
    if ((rc = cli_pb_error(&st->pb)) != 0)
        return rc;
    if (st->pb.len < PF_FLUSH_AT)
        return 0;
    if (fwrite(st->pb.buf, 1, st->pb.len, out) != st->pb.len)
        return -EIO;
    cli_pb_reset(&st->pb);
    return 0;
}

static void pf_name(struct cli_pb *pb, uint32_t field, uint64_t iid, const char *name)
{
    size_t m = cli_pb_begin(pb, field);

    cli_pb_uint(pb, PF_NAME_IID, iid);
    cli_pb_bytes(pb, PF_NAME_NAME, name, strlen(name));
    cli_pb_end(pb, m);
}

/* A TrackDescriptor packet: a process track (proc != NULL) or a device track under parent. */
static int pf_track_packet(struct pf_state *st, FILE *out, uint64_t ts, uint64_t uuid,
                           const struct cli_export_proc *proc, uint64_t parent, const char *name)
{
    size_t pkt = pf_packet_begin(st, ts, 0), td, pd;

    td = cli_pb_begin(&st->pb, PF_PACKET_TRACK_DESC);
    cli_pb_uint(&st->pb, PF_TRACK_UUID, uuid);
    if (proc != NULL) {
        pd = cli_pb_begin(&st->pb, PF_TRACK_PROCESS);
        cli_pb_int(&st->pb, PF_PROCESS_PID, (int32_t)(proc->view_pid + 1));
        cli_pb_bytes(&st->pb, PF_PROCESS_NAME, proc->label, strlen(proc->label));
        cli_pb_end(&st->pb, pd);
    } else if (name != NULL) { /* lanes are always named: the test quiets -O2's nonnull check */
        cli_pb_uint(&st->pb, PF_TRACK_PARENT, parent);
        cli_pb_bytes(&st->pb, PF_TRACK_NAME, name, strlen(name));
    }
    cli_pb_end(&st->pb, td);
    return pf_packet_end(st, pkt, out);
}

/*
 * Describes a new lane of track tr (and, first, the process track it goes
 * under when that is new) and gives the lane its uuid. Returns 0 or -errno.
 */
static int pf_lane(struct pf_state *st, const struct cli_export_lanes_track *tr,
                   struct cli_export_lane *lane, uint64_t ts)
{
    uint64_t *proc_uuid;
    char name[256];
    bool created;
    int rc;

    proc_uuid = pairmap_upsert(&st->procs, (uint64_t)tr->proc->view_pid, 0, &created);
    if (proc_uuid == NULL)
        return -ENOMEM;
    if (created) {
        *proc_uuid = ++st->next_uuid;
        if ((rc = pf_track_packet(st, st->out, ts, *proc_uuid, tr->proc, 0, NULL)) != 0)
            return rc;
    }
    lane->id = ++st->next_uuid;
    cli_export_lanes_name(tr, (size_t)(lane - tr->lanes), name, sizeof(name));
    return pf_track_packet(st, st->out, ts, lane->id, NULL, *proc_uuid, name);
}

/* The op's name iid; *fresh tells whether it must be sent in this packet's interned data. */
static int pf_name_iid(struct pf_state *st, size_t op_index, uint64_t *iid, bool *fresh)
{
    uint64_t *slot = pairmap_upsert(&st->names, op_index, 0, fresh);

    if (slot == NULL)
        return -ENOMEM;
    if (*fresh)
        *slot = ++st->next_iid;
    *iid = *slot;
    return 0;
}

static void pf_interned(struct pf_state *st, const struct cli_export_row *r, uint64_t iid,
                        bool fresh)
{
    size_t m;

    if (!fresh && st->annots_interned)
        return;
    m = cli_pb_begin(&st->pb, PF_PACKET_INTERNED);
    if (fresh)
        pf_name(&st->pb, PF_INTERNED_EVENT_NAMES, iid, r->op->name);
    for (int a = 1; !st->annots_interned && a < PF_A_COUNT; a++)
        pf_name(&st->pb, PF_INTERNED_ANNOT_NAMES, (uint64_t)a, pf_annot_names[a]);
    st->annots_interned = true;
    cli_pb_end(&st->pb, m);
}

static void pf_annot_uint(struct cli_pb *pb, int name, uint64_t v)
{
    size_t m = cli_pb_begin(pb, PF_EVENT_ANNOTATION);

    cli_pb_uint(pb, PF_ANNOT_NAME_IID, (uint64_t)name);
    cli_pb_uint(pb, PF_ANNOT_UINT, v);
    cli_pb_end(pb, m);
}

/* A shape annotation, as text; left out when the entry has no such shape. */
static void pf_annot_shape(struct cli_pb *pb, int name, const msgpack_object *shape)
{
    char text[PF_SHAPE];
    size_t m;

    cli_export_shape_text(shape, text, sizeof(text));
    if (text[0] == '\0')
        return;
    m = cli_pb_begin(pb, PF_EVENT_ANNOTATION);
    cli_pb_uint(pb, PF_ANNOT_NAME_IID, (uint64_t)name);
    cli_pb_bytes(pb, PF_ANNOT_STRING, text, strlen(text));
    cli_pb_end(pb, m);
}

static int pf_slice_begin(struct pf_state *st, FILE *out, const struct cli_export_row *r,
                          uint64_t uuid)
{
    uint64_t iid;
    bool fresh;
    size_t pkt, ev;
    int rc;

    if ((rc = pf_name_iid(st, r->op_index, &iid, &fresh)) != 0)
        return rc;
    pkt = pf_packet_begin(st, r->start_ns, PF_SEQ_NEEDS_INCREMENTAL_STATE);
    pf_interned(st, r, iid, fresh);
    ev = cli_pb_begin(&st->pb, PF_PACKET_TRACK_EVENT);
    /* an entry of length 0 is a moment: an instant, never a BEGIN without a later END */
    cli_pb_uint(&st->pb, PF_EVENT_TYPE, r->span_ns > 0 ? PF_TYPE_SLICE_BEGIN : PF_TYPE_INSTANT);
    cli_pb_uint(&st->pb, PF_EVENT_TRACK_UUID, uuid);
    cli_pb_uint(&st->pb, PF_EVENT_NAME_IID, iid);
    if (r->op->category[0] != '\0')
        cli_pb_bytes(&st->pb, PF_EVENT_CATEGORY, r->op->category, strlen(r->op->category));
    pf_annot_uint(&st->pb, PF_A_STEP, r->step);
    pf_annot_uint(&st->pb, PF_A_ELEMENTS, r->elements);
    pf_annot_uint(&st->pb, PF_A_MEM, r->mem_bytes);
    pf_annot_shape(&st->pb, PF_A_OUT_SHAPE, r->out_shape);
    pf_annot_shape(&st->pb, PF_A_IN_SHAPES, r->in_shapes);
    cli_pb_end(&st->pb, ev);
    return pf_packet_end(st, pkt, out);
}

/* The END of a slice on a lane, at end_ns: the cli_export_lanes_end_cb of this format. */
static int pf_slice_end(void *arg, const struct cli_export_lanes_track *tr,
                        const struct cli_export_lane *lane, uint64_t end_ns)
{
    struct pf_state *st = arg;
    size_t pkt = pf_packet_begin(st, end_ns, 0), ev;

    (void)tr;
    ev = cli_pb_begin(&st->pb, PF_PACKET_TRACK_EVENT);
    cli_pb_uint(&st->pb, PF_EVENT_TYPE, PF_TYPE_SLICE_END);
    cli_pb_uint(&st->pb, PF_EVENT_TRACK_UUID, lane->id);
    cli_pb_end(&st->pb, ev);
    return pf_packet_end(st, pkt, st->out);
}

static int cli_export_perfetto_begin(struct cli_export *x)
{
    struct pf_state *st = calloc(1, sizeof(*st));

    if (st == NULL)
        return -ENOMEM;
    cli_pb_init(&st->pb);
    st->out = x->out;
    cli_export_lanes_init(&st->lanes);
    pairmap_init(&st->procs);
    pairmap_init(&st->names);
    x->state = st;
    return 0;
}

static int cli_export_perfetto_row(struct cli_export *x, const struct cli_export_row *r)
{
    struct pf_state *st = x->state;
    struct cli_export_lanes_track *tr;
    struct cli_export_lane *lane;
    int rc;

    /* the slices of r's track that end by its start get their END first */
    if ((rc = cli_export_lanes_place(&st->lanes, r, pf_slice_end, st, &tr, &lane)) != 0)
        return rc;
    if (lane->id == 0 && (rc = pf_lane(st, tr, lane, r->start_ns)) != 0)
        return rc;
    return pf_slice_begin(st, x->out, r, lane->id);
}

static int cli_export_perfetto_end(struct cli_export *x)
{
    struct pf_state *st = x->state;
    int rc;

    if ((rc = cli_export_lanes_close_all(&st->lanes, pf_slice_end, st)) != 0)
        return rc;
    if (st->pb.len > 0 && fwrite(st->pb.buf, 1, st->pb.len, x->out) != st->pb.len)
        return -EIO;
    cli_pb_reset(&st->pb);
    return ferror(x->out) ? -EIO : 0;
}

static void cli_export_perfetto_free(struct cli_export *x)
{
    struct pf_state *st = x->state;

    if (st != NULL) {
        cli_pb_deinit(&st->pb);
        cli_export_lanes_deinit(&st->lanes);
        pairmap_deinit(&st->procs);
        pairmap_deinit(&st->names);
    }
    free(st);
    x->state = NULL;
}

const struct cli_export_format cli_export_perfetto = {
    .name = "perfetto",
    .binary = true,
    .by_start = true,
    .begin = cli_export_perfetto_begin,
    .row = cli_export_perfetto_row,
    .end = cli_export_perfetto_end,
    .free = cli_export_perfetto_free,
};
