/*
 * cli_export_perfetto — the `perfetto` export format: a binary .pftrace, a
 * perfetto.protos.Trace (repeated TracePacket, field 1) written with cli_pb
 * and the field numbers of Perfetto's perfetto_trace.proto.
 *
 * Layout, all on one packet sequence (trusted_packet_sequence_id 1):
 *   - per process (processes of one rank share one) a process
 *     TrackDescriptor {uuid, process {pid, process_name: the label of
 *     cli_export_dict, "rank N (host, pid P)"}}; pid is the view pid + 1,
 *     because pid 0 is the idle task in Perfetto's process model;
 *   - per lane of a (process, device, stream) track (cli_export_lanes) a
 *     child TrackDescriptor {uuid, parent_uuid, name: the lane's name, e.g.
 *     "gpu:0", "gpu:0 stream 7", "gpu:0 #2", "no device"};
 *   - per entry a TYPE_SLICE_BEGIN TrackEvent at start_ns on its lane, and a
 *     TYPE_SLICE_END at start_ns + dur_ns written once the rows have passed
 *     that time (or at the end), so that each lane's BEGIN/END sequence is
 *     properly nested and in time order: rows come by start time (the format
 *     asks for "order": "start"), and cli_export_lanes keeps partially
 *     overlapping entries on separate lanes. The op name is
 *     interned (InternedData.event_names, TrackEvent.name_iid), the category
 *     is TrackEvent.categories, and step, elements, mem_bytes, out_shape and
 *     in_shapes (shapes as text) are debug annotations with interned names.
 * Descriptors are written just before their track's first slice. The first
 * packet carries SEQ_INCREMENTAL_STATE_CLEARED; packets that use interned
 * names carry SEQ_NEEDS_INCREMENTAL_STATE. Timestamps keep the default trace
 * clock: start_ns is already per-host monotonic nanoseconds.
 *
 * Each packet is encoded in a buffer and written out once the buffer holds
 * 64 KiB; memory is the buffer, the maps of tracks and interned names and
 * the slices open at once (cli_export_lanes).
 */
#ifndef TRACECTL_CLI_EXPORT_PERFETTO_H
#define TRACECTL_CLI_EXPORT_PERFETTO_H

#include "cli_export.h"

extern const struct cli_export_format cli_export_perfetto;

#endif
