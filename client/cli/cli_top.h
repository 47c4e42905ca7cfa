/*
 * cli_top — `tracectl top [<id|name>]`: a live view of a running session,
 * redrawn every --interval seconds (default 1): its processes (ranks) with
 * their current step, steps per second and entries per second, the entries
 * per second coming in and dropped, the hottest ops over the last
 * interval and since the start, and the late-arriving rank.
 *
 * DESIGN. Each refresh sends one ["live", {"session": S}] request
 * (proto/PROTOCOL.md Part 3), which the daemon answers from counters it keeps
 * in memory as batches arrive, so a refresh costs no disk I/O however big
 * the session. The reply is copied into an owned snapshot; rates and
 * "last interval" figures are the difference of two snapshots divided by the
 * daemon's monotonic time between them. Without a session argument, the
 * newest live session (by `sessions`) is shown.
 *
 * The late rank is not in the live counters: the collective matching is the
 * storage writer's (daemon/writer/ranks.c), so it comes from a `report` with
 * "late" on (PROTOCOL.md Part 3, "report option late"), read by the daemon
 * from two rank aggregate tables on a worker thread: the rank that arrived
 * last at the most collective instances, as the verdict names it, with its
 * share since the start and between the two latest asks, and the other
 * ranks' waited_ns. That costs the daemon 14-20 ms of CPU and under 1 KB on
 * 16 ranks x 2,500 steps (it grows with ranks x steps, not entries). A
 * daemon before "late" ignores the key and answers with the whole report
 * and its analysis (top asks with "analysis" on and the v1 part cut to one
 * row), 0.1-0.3 s and 250 KB on a 10 M-entry session, from which the same
 * figures are read. So the live view asks again only once ten times what
 * the last ask took has passed (every refresh with "late"); --once asks
 * with both samples. A failed ask (a daemon without the analysis) leaves
 * the line out, silently.
 *
 * The terminal: plain ANSI escapes, no curses. Input is read unbuffered and
 * unechoed (termios, ISIG kept); `q` quits, Ctrl-C (SIGINT) and SIGTERM quit
 * too, and the terminal's modes and cursor are restored on every exit path.
 * A frame is written in one write: cursor home, each line cut to the width
 * and cleared to its end, the rest of the screen cleared, so the view does
 * not flicker; SIGWINCH redraws at the new size at once. --once prints one
 * snapshot (two samples --interval apart, for the rates) as plain text or
 * --json and exits: for scripts and tests.
 *
 * Runs on the CLI's only thread; signal handlers only set flags.
 */
#ifndef TRACECTL_CLI_TOP_H
#define TRACECTL_CLI_TOP_H

#include "cli.h"

extern const char cli_top_usage[];

int cli_top_run(struct cli_ctx *ctx, int argc, char **argv);

#endif
