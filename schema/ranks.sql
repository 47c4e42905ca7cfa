-- The rank aggregates (daemon/writer/ranks.c): who is late and who waits, kept up
-- to date by the writer in the same transaction as the entries, so that the
-- report's Ranks, Steps, Collectives and Categories sections read these and
-- never the entries. Created when the writer opens a session file (with
-- info.ranks absent they are empty: `tracectl classify` builds them from the
-- entries). Categories are folded in as the entries arrive
-- (cat: 0 compute, 1 comm, 2 memory, 3 wait, 4 other), which is why
-- re-classifying a session rebuilds these tables.
--
-- Keys: rk_devsteps, rk_steps and rk_coll_ranks start with the step, so that
-- the rows a commit adds (the steps just run, of every process) land near the
-- end of their B-tree instead of in one place per process (or per op and
-- process): ~20 % less of SQLite's work per rk_coll_ranks row, ~10 % per
-- rk_steps and rk_devsteps row.
-- rk_coll stays keyed by op first: a commit's rows go to one place per
-- collective op (a few), and the report sums it per op.
CREATE TABLE IF NOT EXISTS rk_ops (       -- per process, device and op (every step)
    process_id  INTEGER NOT NULL,
    device_id   INTEGER NOT NULL,         -- 0: no device
    op_id       INTEGER NOT NULL,
    calls       INTEGER NOT NULL,
    total_ns    INTEGER NOT NULL,
    elements    INTEGER NOT NULL,
    exposed_ns  INTEGER NOT NULL,         -- comm time not overlapped by compute on the device
    begin_ns    INTEGER NOT NULL,
    end_ns      INTEGER NOT NULL,
    PRIMARY KEY (process_id, device_id, op_id)
) WITHOUT ROWID;
-- Per process, step and device: what `report --device D` needs per step, and
-- the rowids of the first and last entry there, which bound the entries a
-- figure per op restricted to steps has to read (ranks_query.c).
CREATE TABLE IF NOT EXISTS rk_devsteps (
    process_id  INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    device_id   INTEGER NOT NULL,
    begin_ns    INTEGER NOT NULL,
    end_ns      INTEGER NOT NULL,
    compute_ns  INTEGER NOT NULL,
    comm_ns     INTEGER NOT NULL,
    memory_ns   INTEGER NOT NULL,
    wait_ns     INTEGER NOT NULL,
    other_ns    INTEGER NOT NULL,
    exposed_ns  INTEGER NOT NULL,
    first_row   INTEGER NOT NULL,
    last_row    INTEGER NOT NULL,
    PRIMARY KEY (step, process_id, device_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rk_steps (     -- per process and step
    process_id  INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    begin_ns    INTEGER NOT NULL,
    end_ns      INTEGER NOT NULL,
    compute_ns  INTEGER NOT NULL,
    comm_ns     INTEGER NOT NULL,
    memory_ns   INTEGER NOT NULL,
    wait_ns     INTEGER NOT NULL,         -- entries of category wait (MPI_Wait, ...)
    other_ns    INTEGER NOT NULL,
    exposed_ns  INTEGER NOT NULL,
    coll        INTEGER NOT NULL,         -- collective instances it took part in
    waited_ns   INTEGER NOT NULL,         -- time lost waiting for the last arrival
    last_count  INTEGER NOT NULL,         -- instances it arrived last at
    caused_ns   INTEGER NOT NULL,         -- skew of the instances it arrived last at
    covered_ns  INTEGER,                  -- length of the union of its top-level entries (no
                                          -- ext parent)
    cpu_wait_ns INTEGER NOT NULL,         -- run-queue delay of its step thread (meta
                                          -- tracectl.cpu_wait), 0 when none was reported
    PRIMARY KEY (step, process_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rk_coll (      -- per collective op and step (of the last arrival)
    op_id       INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    instances   INTEGER NOT NULL,
    partial     INTEGER NOT NULL,         -- instances some rank of their communicator never reached
    skew_ns     INTEGER NOT NULL,         -- sum of (last arrival - first arrival)
    skew_max_ns INTEGER NOT NULL,
    PRIMARY KEY (op_id, step)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rk_coll_ranks ( -- per step, collective op and process
    op_id       INTEGER NOT NULL,
    process_id  INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    instances   INTEGER NOT NULL,
    waited_ns   INTEGER NOT NULL,
    last_count  INTEGER NOT NULL,
    PRIMARY KEY (step, op_id, process_id)
) WITHOUT ROWID;
-- What the writer holds in memory between entries, saved at each commit, so
-- that a writer opening the file again mid-session (the daemon restarted
-- after a crash, or closed the file to open others) goes on exactly where
-- the last commit left off (info.ranks_state = 1; 2 when some intervals
-- were too many to save, and a reopen marks the aggregates inexact).
CREATE TABLE IF NOT EXISTS rk_open (      -- arrivals at the collective instances still open
    kind        INTEGER NOT NULL,         -- the instance's key (ranks.c, struct rk_ikey)
    k1          INTEGER NOT NULL,
    k2          INTEGER NOT NULL,
    k3          INTEGER NOT NULL,
    process_id  INTEGER NOT NULL,
    arrival     INTEGER NOT NULL,         -- its order among the instance's arrivals
    op_id       INTEGER NOT NULL,
    opened      INTEGER NOT NULL,         -- order of opening
    step        INTEGER NOT NULL,
    start_ns    INTEGER NOT NULL,
    dur_ns      INTEGER NOT NULL,
    comm_size   INTEGER,                  -- the instance's expected arrivals when saved (ext
                                          -- comm_size), 0 the world
    flags       INTEGER,                  -- 1 a non-blocking collective's, + 2 its completion
                                          -- came (rk.h RK_A_*)
    wait_b_ns   INTEGER,                  -- flags 3: its completion call's start and end
    wait_e_ns   INTEGER,
    PRIMARY KEY (kind, k1, k2, k3, process_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rk_occ (       -- collectives matched by occurrence: count so far
    process_id  INTEGER NOT NULL,
    op_id       INTEGER NOT NULL,
    grp         INTEGER NOT NULL,         -- hash of the process_group metadata, 0 none
    count       INTEGER NOT NULL,
    PRIMARY KEY (process_id, op_id, grp)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rk_devstate (  -- exposure bookkeeping per process and device
    process_id  INTEGER NOT NULL,
    device_id   INTEGER NOT NULL,
    max_start   INTEGER NOT NULL,
    disorder    INTEGER NOT NULL,
    fin_end     INTEGER NOT NULL,
    drop_end    INTEGER NOT NULL,
    PRIMARY KEY (process_id, device_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS rk_pend (      -- intervals the exposure still needs
    process_id  INTEGER NOT NULL,
    device_id   INTEGER NOT NULL,
    comm        INTEGER NOT NULL,         -- 0: a merged compute interval; 1: a comm entry
    i           INTEGER NOT NULL,
    begin_ns    INTEGER NOT NULL,
    end_ns      INTEGER NOT NULL,
    step        INTEGER NOT NULL,
    op_id       INTEGER NOT NULL,
    PRIMARY KEY (process_id, device_id, comm, i)
) WITHOUT ROWID;
