"""check_trace.py — what a timeline viewer needs of an export, checked without the exporter.

Reads a Chrome trace-event JSON file (`tracectl export --format chrome`) or the
text protoc prints of a Perfetto trace (`protoc --decode=perfetto.protos.Trace
perfetto_trace.proto < FILE.pftrace`) with nothing of tracectl's, and turns
each into tracks of slices (begin and end in integer nanoseconds). Of Perfetto
it reads what a TrackEvent trace of explicit tracks needs, strictly: every
event on a track described once, before it (so not a trace that relies on
default tracks, as Perfetto's own track_event_tracks.pftrace does). Then:

- every slice of a track lies inside or wholly outside every other one (no
  partial overlap), so a viewer that keeps one stack per track draws each with
  its own duration; a parent's duration is at least the sum of its children's;
- no slice has a zero length (a moment is an instant event, "ph":"i" or
  TYPE_INSTANT), and every event has a name without the args' JSON in it;
- the pairs a test knows (`nested(doc, child, parent)`) are nested: each
  slice named child lies inside a slice named parent on its track.

Used by test_viewers.py; `python3 check_trace.py [perfetto_trace.proto] FILE...` checks
files (.pftrace: Perfetto, else Chrome JSON) and prints what is wrong.
"""

import decimal
import json
import re
import subprocess
import sys
from typing import Dict, List, Optional, Tuple


class Slice:
    __slots__ = ("name", "start", "end", "args", "parent", "children")

    def __init__(self, name: str, start: int, end: int, args: Optional[dict] = None):
        self.name, self.start, self.end, self.args = name, start, end, args or {}
        self.parent: Optional["Slice"] = None
        self.children: List["Slice"] = []

    def __repr__(self) -> str:
        return "%s[%d, %d)" % (self.name, self.start, self.end)


class Trace:
    """tracks: (pid, tid) or a Perfetto track uuid → its slices, begin order; instants."""

    def __init__(self) -> None:
        self.tracks: Dict[object, List[Slice]] = {}
        self.instants: List[Tuple[object, str, int]] = []
        self.names: Dict[object, str] = {}  # track → its thread or track name
        self.errors: List[str] = []

    def slices(self, name: Optional[str] = None) -> List[Slice]:
        return [s for t in self.tracks.values() for s in t if name is None or s.name == name]


def _ns(us: decimal.Decimal) -> int:
    """A Chrome trace time (µs, decimals) as integer ns; exact for the export's 3 decimals."""
    ns = us * 1000
    if ns != ns.to_integral_value():
        raise ValueError("time %s µs is not a whole number of ns" % us)
    return int(ns)


def read_chrome(path: str) -> Trace:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f, parse_float=decimal.Decimal)
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    tr = Trace()
    pnames = set()
    for i, e in enumerate(events):
        ph, name = e.get("ph"), e.get("name")
        if not isinstance(name, str) or name == "":
            tr.errors.append("event %d has no name: %r" % (i, e))
            continue
        key = (e.get("pid"), e.get("tid"))
        if ph == "M":
            if name == "thread_name":
                tr.names[key] = e["args"]["name"]
            elif name == "process_name":
                pnames.add(e.get("pid"))
            continue
        if "{" in name and name.endswith("}"):
            tr.errors.append("event %d has its args in its name: %r" % (i, name))
        if not isinstance(e.get("pid"), int) or not isinstance(e.get("tid"), int):
            tr.errors.append("event %d has no integer pid/tid: %r" % (i, e))
        if "args" in e and not isinstance(e["args"], dict):
            tr.errors.append("event %d: args is not an object" % i)
        if ph == "X":
            start, dur = _ns(decimal.Decimal(e["ts"])), _ns(decimal.Decimal(e["dur"]))
            if dur <= 0:
                tr.errors.append("event %d %r: a complete event of duration %d ns (an "
                                 "instant must be \"ph\":\"i\")" % (i, name, dur))
            tr.tracks.setdefault(key, []).append(Slice(name, start, start + dur, e.get("args")))
        elif ph == "i" or ph == "I":
            if e.get("s", "t") not in ("t", "p", "g"):
                tr.errors.append("event %d: instant scope %r" % (i, e.get("s")))
            tr.instants.append((key, name, _ns(decimal.Decimal(e["ts"]))))
        else:
            tr.errors.append("event %d: phase %r (the export writes X, i and M)" % (i, ph))
    for key in tr.tracks:
        if key not in tr.names:
            tr.errors.append("track pid %s tid %s has no thread_name" % key)
        if key[0] not in pnames:
            tr.errors.append("pid %s has no process_name" % key[0])
    for key in tr.tracks:
        tr.tracks[key].sort(key=lambda s: (s.start, -s.end))
    return tr


# ---- Perfetto: protoc's text format ----------------------------------------------------

_TOKEN = re.compile(r'\s*(?:(\})|([A-Za-z_][A-Za-z0-9_]*)\s*(\{|:\s*("(?:[^"\\]|\\.)*"|\S+)))')


def _parse_text(text: str) -> dict:
    """protoc --decode's text format as nested dicts of lists (every field repeated)."""
    root: dict = {}
    stack = [root]
    pos = 0
    end = len(text.rstrip())
    while pos < end:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise ValueError("protoc text: cannot read at %r" % text[pos:pos + 40])
        pos = m.end()
        if m.group(1):
            stack.pop()
        elif m.group(3) == "{":
            child: dict = {}
            stack[-1].setdefault(m.group(2), []).append(child)
            stack.append(child)
        else:
            v = m.group(4)
            stack[-1].setdefault(m.group(2), []).append(
                v[1:-1].encode("latin-1").decode("unicode_escape").encode("latin-1").decode(
                    "utf-8") if v.startswith('"') else v)
    return root


def read_perfetto(path: str, proto: str) -> Trace:
    """Decodes path with protoc and pairs each track's SLICE_BEGIN and SLICE_END."""
    import os
    with open(path, "rb") as f:
        text = subprocess.run(["protoc", "--proto_path=" + os.path.dirname(proto),
                               "--decode=perfetto.protos.Trace", os.path.basename(proto)],
                              stdin=f, capture_output=True, check=True).stdout.decode()
    doc = _parse_text(text)
    tr = Trace()
    names: Dict[str, str] = {}  # event name iid → name (one sequence in tracectl's exports)
    known: Dict[str, Optional[str]] = {}  # track uuid → parent uuid
    open_: Dict[str, List[Slice]] = {}
    last: Dict[str, int] = {}
    for i, p in enumerate(doc.get("packet", [])):
        ts = int(p.get("timestamp", ["0"])[0])
        for d in p.get("track_descriptor", []):
            uuid = d["uuid"][0]
            if uuid in known:
                tr.errors.append("track %s described twice" % uuid)
            parent = d.get("parent_uuid", [None])[0]
            if parent is not None and parent not in known:
                tr.errors.append("track %s: its parent %s is not described before" % (uuid, parent))
            known[uuid] = parent
            tr.names[uuid] = d.get("name", [""])[0] or (
                d["process"][0].get("process_name", [""])[0] if "process" in d else "")
        for it in p.get("interned_data", []):
            for n in it.get("event_names", []):
                names[n["iid"][0]] = n["name"][0]
        for ev in p.get("track_event", []):
            uuid = ev.get("track_uuid", [None])[0]
            if uuid not in known:
                tr.errors.append("packet %d: event on undescribed track %s" % (i, uuid))
                continue
            if ts < last.get(uuid, 0):
                tr.errors.append("packet %d: time goes back on track %s" % (i, uuid))
            last[uuid] = ts
            typ = ev.get("type", [""])[0]
            name = names.get(ev.get("name_iid", [None])[0], ev.get("name", [None])[0])
            stack = open_.setdefault(uuid, [])
            if typ == "TYPE_SLICE_BEGIN":
                if name is None:
                    tr.errors.append("packet %d: a slice without a name" % i)
                s = Slice(name or "", ts, -1)
                stack.append(s)
                tr.tracks.setdefault(uuid, []).append(s)
            elif typ == "TYPE_SLICE_END":
                if not stack:
                    tr.errors.append("packet %d: SLICE_END with no open slice on track %s" %
                                     (i, uuid))
                    continue
                s = stack.pop()
                s.end = ts
                if s.end <= s.start:
                    tr.errors.append("slice %r on track %s has length %d ns (an instant must "
                                     "be TYPE_INSTANT)" % (s.name, uuid, s.end - s.start))
            elif typ == "TYPE_INSTANT":
                tr.instants.append((uuid, name or "", ts))
            else:
                tr.errors.append("packet %d: event type %r" % (i, typ))
    for uuid, stack in open_.items():
        if stack:
            tr.errors.append("track %s: %d slices never end" % (uuid, len(stack)))
    for key in tr.tracks:
        tr.tracks[key].sort(key=lambda s: (s.start, -s.end))
    return tr


# ---- the checks ------------------------------------------------------------------------

def nest(tr: Trace) -> List[str]:
    """Links each slice to its parent on its track; returns the errors (partial overlaps)."""
    errors = list(tr.errors)
    for key, slices in tr.tracks.items():
        stack: List[Slice] = []
        for s in slices:
            while stack and stack[-1].end <= s.start:
                stack.pop()
            if stack and s.end > stack[-1].end:
                errors.append("track %s (%s): %r overlaps %r partially" %
                              (key, tr.names.get(key, "?"), s, stack[-1]))
                continue
            if stack:
                s.parent = stack[-1]
                stack[-1].children.append(s)
            stack.append(s)
        for s in slices:
            inner = sum(c.end - c.start for c in s.children)
            if inner > s.end - s.start:
                errors.append("%r: children last %d ns, more than it" % (s, inner))
    return errors


def inside(s: Slice, parent: str) -> bool:
    p = s.parent
    while p is not None:
        if p.name == parent:
            return True
        p = p.parent
    return False


def nested(tr: Trace, child: str, parent: str, direct: bool = False) -> List[str]:
    """Errors unless every slice named child lies inside one named parent (its direct
    parent with direct) on its track, and there is at least one."""
    got = tr.slices(child)
    if not got:
        return ["no slice named %r" % child]
    def ok(s: Slice) -> bool:
        return s.parent is not None and s.parent.name == parent if direct else inside(s, parent)

    bad = [s for s in got if not ok(s)]
    return ["%d of %d %r are not inside %r, e.g. %r (parent %r)" %
            (len(bad), len(got), child, parent, bad[0], bad[0].parent)] if bad else []


def main(argv: List[str]) -> int:
    errors: List[str] = []
    for path in argv[1:]:
        tr = read_perfetto(path, argv[0]) if path.endswith(".pftrace") else read_chrome(path)
        errors += ["%s: %s" % (path, e) for e in nest(tr)]
    for e in errors[:50]:
        print(e)
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:] if len(sys.argv) > 1 and sys.argv[1].endswith(".proto")
                  else ["perfetto_trace.proto"] + sys.argv[1:]))
