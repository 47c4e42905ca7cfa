#!/usr/bin/env python3
"""top_lists.py — what the report's two top-entry lists cost in each storage format (not a test).

The report's `slowest` and `hotspots` sections on files without info.top
(schema/report_slowest_agg_rowids.sql, schema/report_hotspots_agg_rowids.sql;
files with it read the fields from top_slow and top_mem alone) join the 1000
kept rowids of top_slow and top_mem with `entries`: a B-tree lookup each in the row format, a block's
restart interval each in the blocks format. This runs both on a new connection
each time (as the daemon's report does), interleaved, for a session file of
each format built from the same workload, and, for the blocks file, once per
build of the extension given (e.g. before and after a change):

  /usr/bin/python3 bench/top_lists.py ROWS.db BLOCKS.db DIR/tracectl_blocks.so [DIR2/...] [--runs N]

The files come from two daemons, `--storage-format rows` and `--storage-format
blocks`, each fed by `tc_bench_ingest --attach SOCK --session S --producers 16
--entries 62500` (1 M entries). Debian's python3 (its sqlite3 module loads
extensions; some other builds do not). Prints the medians of CPU time
(time.process_time) and wall time per run, and the CPU ratio to the row format;
the answers must be the same for every case.
"""

import argparse
import os
import sqlite3
import statistics
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rows_db")
    ap.add_argument("blocks_db")
    ap.add_argument("so", nargs="+", help="tracectl_blocks.so builds to compare")
    ap.add_argument("--runs", type=int, default=31)
    a = ap.parse_args()
    slowest = open(os.path.join(HERE, "..", "schema", "report_slowest_agg_rowids.sql")).read()
    hotspots = open(os.path.join(HERE, "..", "schema", "report_hotspots_agg_rowids.sql")).read()
    cases = [("rows", a.rows_db, None)] + [("blocks %s" % so, a.blocks_db, so) for so in a.so]
    res = {name: [] for name, _, _ in cases}
    answers = {}
    for _ in range(a.runs):
        for name, path, so in cases:
            c0, w0 = time.process_time(), time.perf_counter()
            db = sqlite3.connect("file:%s?mode=ro" % path, uri=True)
            if so is not None:
                db.enable_load_extension(True)
                db.load_extension(so)
            got = (db.execute(slowest, (10,)).fetchall(), db.execute(hotspots, (10, 0)).fetchall())
            db.close()
            res[name].append((time.process_time() - c0, time.perf_counter() - w0))
            answers.setdefault(name, got)
    rows_cpu = statistics.median(c for c, _ in res["rows"])
    for name, _, _ in cases:
        cpu = statistics.median(c for c, _ in res[name])
        wall = statistics.median(w for _, w in res[name])
        print("%-60s CPU %7.2f ms (min %6.2f)  wall %7.2f ms  CPU / rows %.2f" %
              (name, cpu * 1e3, min(c for c, _ in res[name]) * 1e3, wall * 1e3, cpu / rows_cpu))
        if answers[name] != answers["rows"]:
            raise SystemExit("top_lists.py: %s answers differently from rows" % name)


if __name__ == "__main__":
    main()
