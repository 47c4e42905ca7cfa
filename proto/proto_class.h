/*
 * proto_class — the one list of words that make an op name communication
 * (PROTOCOL.md "Analysis rules" and Part 3 "classification"), shared by the
 * daemon (an op sent without a category: analysis_classify), the importer
 * (`tracectl import`: kineto_category) and the Python bridge (COMM_WORDS in
 * client/python/tracectl/torch.py, which tests/python/test_comm_words.py
 * checks word for word against PROTO_COMM_WORDS). Pure; any thread.
 *
 * A name is communication when it contains one of the words, compared
 * ASCII lower-cased, or starts with "mpi_". A word marked PROTO_COMM_LOOSE
 * also occurs in compute names: "broadcast" in elementwise kernels and
 * aten::broadcast_tensors, "send" in "descend", "comm" in "commit". The
 * importer, which sees every kernel and operator of a trace, matches the
 * other words only (NCCL's broadcast kernels say nccl, gloo's gloo, c10d's
 * c10d::); the daemon and the Python bridge match them all.
 */
#ifndef TRACECTL_PROTO_CLASS_H
#define TRACECTL_PROTO_CLASS_H

#include <stdbool.h>

#define PROTO_COMM_STRICT 0
#define PROTO_COMM_LOOSE  1

/* X(word, PROTO_COMM_STRICT or PROTO_COMM_LOOSE) for every word, lower case. */
#define PROTO_COMM_WORDS(X)                                                                        \
    X("allreduce", PROTO_COMM_STRICT)                                                              \
    X("all_reduce", PROTO_COMM_STRICT)                                                             \
    X("all_gather", PROTO_COMM_STRICT)                                                             \
    X("allgather", PROTO_COMM_STRICT)                                                              \
    X("reduce_scatter", PROTO_COMM_STRICT)                                                         \
    X("reducescatter", PROTO_COMM_STRICT)                                                          \
    X("alltoall", PROTO_COMM_STRICT)                                                               \
    X("all_to_all", PROTO_COMM_STRICT)                                                             \
    X("broadcast", PROTO_COMM_LOOSE)                                                               \
    X("send", PROTO_COMM_LOOSE)                                                                    \
    X("recv", PROTO_COMM_LOOSE)                                                                    \
    X("sendrecv", PROTO_COMM_STRICT)                                                               \
    X("barrier", PROTO_COMM_LOOSE)                                                                 \
    X("nccl", PROTO_COMM_STRICT)                                                                   \
    X("comm", PROTO_COMM_LOOSE)                                                                    \
    X("record_param_comms", PROTO_COMM_STRICT) /* PyTorch's annotation of a collective */          \
    X("cross_device_reduce", PROTO_COMM_STRICT)                                                    \
    /* extensions (PROTOCOL.md Part 3, "classification") */                                        \
    X("ep::internode::", PROTO_COMM_STRICT) /* DeepEP: dispatch, combine, notify kernels */        \
    X("ep::intranode::", PROTO_COMM_STRICT)                                                        \
    X("deep_ep", PROTO_COMM_STRICT)                                                                \
    X("gloo", PROTO_COMM_STRICT)                                                                   \
    X("c10d", PROTO_COMM_STRICT)                                                                   \
    X("rccl", PROTO_COMM_STRICT)                                                                   \
    X("msccl", PROTO_COMM_STRICT)                                                                  \
    X("nvshmem", PROTO_COMM_STRICT)

/* The prefix that makes a name communication too (MPI's calls), lower case. */
#define PROTO_COMM_PREFIX "mpi_"

/*
 * True when name (NUL-terminated, any case; NULL: false) is communication by
 * the words above: all of them, or with strict the PROTO_COMM_STRICT ones.
 */
bool proto_class_comm(const char *name, bool strict);
/* True when word (lower case) occurs in name, compared ASCII lower-cased. */
bool proto_class_contains(const char *name, const char *word);

#endif
