/*
 * tracectl report --html: draws the report embedded in #report (the map
 * `report --json` prints). Written for this page, no library, no network.
 * Heatmap cells and bar segments carry their exact figures in data-*
 * attributes (tests read them back from the DOM).
 */
(function () {
    'use strict';
    var t0 = performance.now();
    var R = JSON.parse(document.getElementById('report').textContent);
    var main = document.getElementById('main');

    function el(tag, cls, text) {
        var e = document.createElement(tag);
        if (cls) e.className = cls;
        if (text !== undefined && text !== null) e.textContent = text;
        return e;
    }
    function esc(s) {
        return String(s).replace(/[&<>"']/g, function (c) {
            return '&#' + c.charCodeAt(0) + ';';
        });
    }
    function num(v) { return typeof v === 'number' ? v : 0; }
    function p3(x) { return x >= 100 ? x.toFixed(0) : x >= 10 ? x.toFixed(1) : x.toFixed(2); }
    function dur(ns) {
        if (typeof ns !== 'number') return '-';
        if (ns < 1e3) return ns + ' ns';
        if (ns < 1e6) return p3(ns / 1e3) + ' \u00b5s';
        if (ns < 1e9) return p3(ns / 1e6) + ' ms';
        return p3(ns / 1e9) + ' s';
    }
    function bytes(b) {
        if (typeof b !== 'number') return '-';
        var u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'], i = 0;
        while (b >= 1024 && i < 4) { b /= 1024; i++; }
        return i ? p3(b) + ' ' + u[i] : b + ' B';
    }
    function share(x) { return typeof x === 'number' ? (100 * x).toFixed(1) + '%' : '-'; }
    function show(v, kind) {
        if (v === null || v === undefined) return '-';
        if (kind === 'dur') return dur(v);
        if (kind === 'bytes') return bytes(v);
        if (kind === 'share') return share(v);
        if (kind === 'float') return typeof v === 'number' ? v.toFixed(1) : String(v);
        return typeof v === 'object' ? JSON.stringify(v) : String(v);
    }
    function section(id, title, note) {
        var s = el('section');
        s.id = id;
        s.appendChild(el('h2', null, title));
        if (note) s.appendChild(el('p', 'note', note));
        main.appendChild(s);
        return s;
    }
    /* light yellow (f = 0) to dark red (f = 1) */
    function heat(f) {
        return 'hsl(' + (55 - 55 * f).toFixed(0) + ',90%,' + (88 - 50 * f).toFixed(0) + '%)';
    }
    /* The heatmap's 16 shades as classes h0..h15: 64,000 cells share 16 rules instead of
     * each parsing a style of its own (3 times faster to draw at 1,000 steps x 64 ranks). */
    var SHADES = 16;
    (function () {
        var css = [];
        for (var i = 0; i < SHADES; i++)
            css.push('.hr i.h' + i + '{background:' + heat(i / (SHADES - 1)) + '}');
        document.head.appendChild(el('style', null, css.join('\n')));
    })();

    /* ---- the session header ------------------------------------------------ */
    (function () {
        var s = R.session || {}, dl = document.getElementById('session');
        [['state', s.state, ''], ['processes', s.processes, ''], ['devices', s.devices, ''],
         ['entries', s.entries, ''], ['dropped', s.dropped, ''], ['total', s.total_ns, 'dur'],
         ['span', s.span_ns, 'dur']].forEach(function (f) {
            var d = el('div');
            d.appendChild(el('dt', null, f[0]));
            d.appendChild(el('dd', null, show(f[1], f[2])));
            dl.appendChild(d);
        });
        if (R.filter) document.getElementById('filter').textContent =
            'Filter: ' + JSON.stringify(R.filter) + ' (every section counts only these entries)';
    })();

    /* ---- rank × step heatmap -------------------------------------------------- */
    var steps = R.steps || [];
    var rankRows = R.ranks || [];
    var metrics = [];  /* keys of the steps rows holding [[rank, ns, ...], ...] */
    steps.forEach(function (st) {
        Object.keys(st).forEach(function (k) {
            var v = st[k];
            if (metrics.indexOf(k) < 0 && Array.isArray(v) && v.length && Array.isArray(v[0]) &&
                v[0].length >= 2) metrics.push(k);
        });
    });
    metrics.sort(function (a, b) { return (b === 'times_ns') - (a === 'times_ns'); });
    /* A step's width in pixels, the same in the heatmap and the skew chart below it. */
    function cellWidth() {
        var avail = Math.max(300, (main.clientWidth || 1000) - 70);
        return Math.max(1, Math.min(40, Math.floor(avail / Math.max(1, steps.length))));
    }
    function metricName(k) {
        if (k === 'cpu_wait_times_ns') return 'CPU wait';  /* the step thread's, per rank */
        return k === 'times_ns' ? 'step time' : k.replace(/_times_ns$|_ns$/, '').replace(/_/g, ' ');
    }
    function drawHeatmap(box, legend, key) {
        var ranks = [], seen = {}, lo = Infinity, hi = -Infinity;
        rankRows.forEach(function (r) {
            if (typeof r.rank === 'number' && !seen[r.rank]) { seen[r.rank] = 1; ranks.push(r.rank); }
        });
        var cell = {};  /* rank -> {step index -> ns} */
        steps.forEach(function (st, j) {
            (st[key] || []).forEach(function (p) {
                if (typeof p[0] !== 'number' || typeof p[1] !== 'number') return;
                if (!seen[p[0]]) { seen[p[0]] = 1; ranks.push(p[0]); }
                (cell[p[0]] = cell[p[0]] || {})[j] = p[1];
                if (p[1] < lo) lo = p[1];
                if (p[1] > hi) hi = p[1];
            });
        });
        ranks.sort(function (a, b) { return a - b; });
        box.style.setProperty('--cw', cellWidth() + 'px');
        box.style.setProperty('--ch', (ranks.length > 32 ? 8 : 14) + 'px');
        box.dataset.metric = key;
        var html = [];
        ranks.forEach(function (rk) {
            var row = cell[rk] || {};
            html.push('<div class="hr"><b>', rk, '</b>');
            steps.forEach(function (st, j) {
                var ns = row[j];
                if (ns === undefined) { html.push('<i class="nil"></i>'); return; }
                var f = hi > lo ? (ns - lo) / (hi - lo) : 1;
                html.push('<i class="h', Math.round(f * (SHADES - 1)), '" data-rank="', rk,
                          '" data-step="', st.step, '" data-ns="', ns, '"></i>');
            });
            html.push('</div>');
        });
        box.innerHTML = html.join('');
        legend.innerHTML = ranks.length ? metricName(key) + ': <span>' + esc(dur(lo)) +
            '</span><span class="ramp" style="background:linear-gradient(to right,' + heat(0) +
            ',' + heat(0.5) + ',' + heat(1) + ')"></span><span>' + esc(dur(hi)) +
            '</span> (rows: ranks; columns: steps ' + esc(steps.length ? steps[0].step : '') +
            '\u2013' + esc(steps.length ? steps[steps.length - 1].step : '') + ')' : '';
    }
    (function () {
        var s = section('heatmap', 'Step time by rank and step',
                        steps.length ? null : '(no steps in this report)');
        if (!steps.length) return;
        var controls = el('div', 'controls'), box = el('div', 'hm'), legend = el('div', 'legend');
        /* the figure drawn first: the page's #metric=<key> (e.g. #metric=cpu_wait_times_ns, the
         * ranks' CPU wait when the report has it), else the step time */
        var want = (/[#&]metric=([a-z_]+)/.exec(location.hash) || [])[1];
        var first = metrics.indexOf(want) >= 0 ? want : metrics[0] || 'times_ns';
        metrics.forEach(function (k) {
            var l = el('label'), r = el('input');
            r.type = 'radio';
            r.name = 'metric';
            r.value = k;
            r.checked = k === first;
            r.addEventListener('change', function () { drawHeatmap(box, legend, k); });
            l.appendChild(r);
            l.appendChild(document.createTextNode(' ' + metricName(k)));
            controls.appendChild(l);
        });
        if (metrics.length > 1) s.appendChild(controls);
        s.appendChild(box);
        s.appendChild(legend);
        if (R.completeness && R.completeness.steps > steps.length)
            s.appendChild(el('p', 'note', 'The ' + steps.length + ' steps of the widest spread of ' +
                             R.completeness.steps + ' (as report --json).'));
        /* the tooltip: set on first hover, not for every cell up front */
        box.addEventListener('mouseover', function (ev) {
            var c = ev.target;
            if (c.tagName !== 'I' || !c.dataset.ns || c.title) return;
            c.title = 'rank ' + c.dataset.rank + ', step ' + c.dataset.step + ': ' +
                dur(Number(c.dataset.ns)) + ' (' + c.dataset.ns + ' ns)';
        });
        drawHeatmap(box, legend, first);
    })();

    /* ---- time per rank, stacked; or one figure per rank (caused, waited, untracked) ---- */
    var CATS = [['compute_ns', 'compute'], ['comm_ns', 'communication'], ['memory_ns', 'memory'],
                ['wait_ns', 'waiting'], ['other_ns', 'other']];
    var LOSS = [['waited_ns', 'waited (lost waiting for the last arrival)'],
                ['caused_ns', 'caused (the others\' wait for it)'],
                ['untracked_ns', 'untracked (in no entry)']];
    function rankBars(box, keys) {
        var max = 0;
        box.innerHTML = '';
        rankRows.forEach(function (r) {
            var t = 0;
            keys.forEach(function (c) { t += num(r[c[0]]); });
            if (t > max) max = t;
        });
        rankRows.forEach(function (r) {
            var row = el('div', 'sb'), track = el('div', 'track'), t = 0;
            row.appendChild(el('b', null, r.rank === null ? '-' : r.rank));
            keys.forEach(function (c) {
                var v = num(r[c[0]]), seg = el('div', 'seg k-' + c[0]);
                t += v;
                seg.dataset.rank = r.rank === null ? '' : r.rank;
                seg.dataset.key = c[0];
                seg.dataset.ns = v;
                seg.style.width = (max ? 100 * v / max : 0) + '%';
                seg.title = 'rank ' + r.rank + ' ' + c[1] + ': ' + dur(v) + ' (' + v + ' ns)';
                track.appendChild(seg);
            });
            row.appendChild(track);
            row.appendChild(el('span', 'tot', dur(t)));
            box.appendChild(row);
        });
    }
    (function () {
        var s = section('ranktime', 'Time per rank', rankRows.length ?
            'Each rank\'s time by category (the ranks rows\' compute_ns, comm_ns, memory_ns, ' +
            'wait_ns, other_ns); the time lost waiting for the last arrival at collectives is ' +
            'part of communication: see "waited".' : '(no ranks)');
        if (!rankRows.length) return;
        var views = [['categories', CATS]].concat(LOSS.filter(function (c) {
            return rankRows.some(function (r) { return c[0] in r; });
        }).map(function (c) { return [c[1].replace(/ .*/, ''), [c]]; }));
        var controls = el('div', 'controls'), key = el('div', 'key note'), box = el('div');
        views.forEach(function (v, i) {
            var l = el('label'), r = el('input');
            r.type = 'radio';
            r.name = 'ranktime';
            r.checked = i === 0;
            r.addEventListener('change', function () { rankBars(box, v[1]); });
            l.appendChild(r);
            l.appendChild(document.createTextNode(' ' + v[0]));
            controls.appendChild(l);
        });
        CATS.concat(views.slice(1).map(function (v) { return v[1][0]; })).forEach(function (c) {
            key.appendChild(el('span', 'k-' + c[0]));
            key.appendChild(document.createTextNode(c[1]));
        });
        if (views.length > 1) s.appendChild(controls);
        s.appendChild(key);
        s.appendChild(box);
        rankBars(box, CATS);
    })();

    /* ---- collectives: who arrived last, how long the others waited ------------- */
    (function () {
        var s = section('skew', 'Collectives: arrival skew per step',
                        'Each bar is a step: its height the time all ranks lost waiting for the last ' +
                        'arrival at its collectives (waited_ns); hover for the rank that arrived last.');
        var box = el('div', 'skew'), max = 0;
        steps.forEach(function (st) { if (num(st.waited_ns) > max) max = num(st.waited_ns); });
        /* one column per step, under the heatmap's (a 1-pixel gap from 3 pixels up) */
        var cw = cellWidth();
        box.style.setProperty('--sw', (cw > 2 ? cw - 1 : cw) + 'px');
        box.style.gap = cw > 2 ? '1px' : '0';
        steps.forEach(function (st) {
            var b = el('i', st.last_rank === null || st.last_rank === undefined ? 'none' : null);
            b.dataset.step = st.step;
            b.dataset.ns = num(st.waited_ns);
            b.style.height = (max ? 100 * num(st.waited_ns) / max : 0) + '%';
            b.title = 'step ' + st.step + ': last rank ' + show(st.last_rank) + ', late rank ' +
                show(st.late_rank) + ', waited ' + dur(num(st.waited_ns)) + ', spread ' +
                dur(st.spread_ns);
            box.appendChild(b);
        });
        if (steps.length) s.appendChild(box);
        table(s, R.collectives, [['op', 'OP', 't'], ['instances', 'INSTANCES'], ['partial', 'PARTIAL'],
            ['skew_mean_ns', 'SKEW_AVG', 'dur'], ['skew_max_ns', 'SKEW_MAX', 'dur'],
            ['waited_ns', 'WAITED', 'dur'], ['last_rank', 'LAST_RANK'],
            ['last_rank_share', 'LAST_SHARE', 'share']]);
    })();

    /* ---- sortable tables ---------------------------------------------------------- */
    function table(parent, rows, cols) {
        if (!Array.isArray(rows) || !rows.length) {
            parent.appendChild(el('p', 'note', '(none)'));
            return;
        }
        var wrap = el('div', 'scroll'), t = el('table'), thead = el('thead'), tr = el('tr');
        var tbody = el('tbody');
        cols.forEach(function (c, i) {
            var th = el('th', c[2] === 't' ? 't' : null, c[1]);
            th.addEventListener('click', function () { sortBy(t, tbody, th, i, c[2] === 't'); });
            tr.appendChild(th);
        });
        thead.appendChild(tr);
        t.appendChild(thead);
        var html = [];
        rows.forEach(function (r) {
            html.push('<tr>');
            cols.forEach(function (c) {
                var v = r[c[0]], raw = v === null || v === undefined ? '' :
                    typeof v === 'object' ? JSON.stringify(v) : v;
                html.push('<td', c[2] === 't' ? ' class="t"' : '', ' data-v="', esc(raw), '">',
                          esc(show(v, c[2])), '</td>');
            });
            html.push('</tr>');
        });
        tbody.innerHTML = html.join('');
        t.appendChild(tbody);
        wrap.appendChild(t);
        parent.appendChild(wrap);
    }
    function sortBy(t, tbody, th, i, text) {
        var asc = !th.classList.contains('asc');
        t.querySelectorAll('th').forEach(function (h) { h.classList.remove('asc', 'desc'); });
        th.classList.add(asc ? 'asc' : 'desc');
        var rows = Array.prototype.slice.call(tbody.rows);
        rows.sort(function (a, b) {
            var x = a.cells[i].dataset.v, y = b.cells[i].dataset.v, d;
            if (text) d = x < y ? -1 : x > y ? 1 : 0;
            else d = (x === '' ? -Infinity : Number(x)) - (y === '' ? -Infinity : Number(y));
            return asc ? d : -d;
        });
        rows.forEach(function (r) { tbody.appendChild(r); });
    }
    /* the tables written as markup (the MPI and Hosts sections): sortable as these */
    document.querySelectorAll('table.sort').forEach(function (t) {
        t.querySelectorAll('thead th').forEach(function (th, i) {
            th.addEventListener('click', function () {
                sortBy(t, t.tBodies[0], th, i, th.classList.contains('t'));
            });
        });
    });
    table(section('ranks', 'Ranks'), rankRows, [['rank', 'RANK'], ['steps', 'STEPS'],
        ['step_mean_ns', 'STEP_AVG', 'dur'], ['compute_ns', 'COMPUTE', 'dur'],
        ['comm_ns', 'COMM', 'dur'], ['exposed_comm_ns', 'EXPOSED', 'dur'],
        ['memory_ns', 'MEMORY', 'dur'], ['wait_ns', 'WAIT', 'dur'], ['other_ns', 'OTHER', 'dur'],
        ['waited_ns', 'WAITED', 'dur'], ['caused_ns', 'CAUSED', 'dur'],
        ['arrived_last', 'LAST'], ['slowest_steps', 'SLOWEST'], ['late_steps', 'LATE'],
        ['cpu_wait_ns', 'CPU WAIT', 'dur'], ['dropped', 'DROPPED']].filter(function (c) {
            /* CPU WAIT only when a rank's producers reported one, as in the text report */
            return rankRows.some(function (r) {
                return c[0] === 'cpu_wait_ns' ? r[c[0]] > 0 : c[0] in r;
            });
        }));
    /* CALLS are the entries stored; DROPPED (entries lost) and COUNTED (calls counted without
     * an entry, TRACECTL_MPI_P2P) only when some op has them: their sum is every call */
    table(section('ops', 'Operations', R.ops_total > (R.ops || []).length ?
        (R.ops || []).length + ' of ' + R.ops_total + ' operations (by total time)' : null),
        R.ops, [['op', 'OP', 't'], ['category', 'CATEGORY', 't'], ['calls', 'CALLS'],
        ['dropped_calls', 'DROPPED'], ['counted_calls', 'COUNTED'],
        ['total_ns', 'TOTAL', 'dur'], ['avg_ns', 'AVG', 'dur'], ['min_ns', 'MIN', 'dur'],
        ['p50_ns', 'P50', 'dur'], ['p95_ns', 'P95', 'dur'], ['p99_ns', 'P99', 'dur'],
        ['max_ns', 'MAX', 'dur'], ['share', 'SHARE', 'share'], ['mem_bytes', 'MEM', 'bytes']]
        .filter(function (c) {
            return (c[0] !== 'dropped_calls' && c[0] !== 'counted_calls') ||
                (R.ops || []).some(function (r) { return r[c[0]] > 0; });
        }));
    table(section('devices', 'Devices'), R.devices, [['device', 'DEVICE', 't'],
        ['calls', 'CALLS'], ['total_ns', 'TOTAL', 'dur'], ['mem_bytes', 'MEM', 'bytes']]);
    table(section('categories', 'Categories'), R.categories, [['category', 'CATEGORY', 't'],
        ['total_ns', 'TOTAL', 'dur'], ['share', 'SHARE', 'share'],
        ['imbalance', 'MAX_VS_MEAN', 'share'], ['max_vs_median', 'MAX/MEDIAN', 'float'],
        ['max_rank', 'MAX_RANK']]);

    /* ---- flame graphs of the collapsed stacks -------------------------------------- */
    (function () {
        var s = section('flame', 'Flame graph', 'The session\'s collapsed stacks (as tracectl ' +
                        'export --format collapsed): session; device; nested regions; op. ' +
                        'Click a frame to zoom in, the top frame to zoom out.');
        var data = document.getElementById('stacks');
        if (!data) {
            var why = document.getElementById('flame-note');
            s.appendChild(el('p', 'note', why ? why.textContent : '(no stacks)'));
            return;
        }
        var stacks = JSON.parse(data.textContent), trees = {};
        function tree(text) {
            var root = {n: 'all', v: 0, c: {}};
            text.split('\n').forEach(function (line) {
                var sp = line.lastIndexOf(' '), w = Number(line.slice(sp + 1));
                if (sp <= 0 || !(w > 0)) return;
                var node = root;
                root.v += w;
                line.slice(0, sp).split(';').forEach(function (f) {
                    node = node.c[f] = node.c[f] || {n: f, v: 0, c: {}};
                    node.v += w;
                });
            });
            return root;
        }
        var controls = el('div', 'controls'), box = el('div', 'flame'), kind = 'time', path = [];
        [['time', 'by time'], ['memory', 'by memory']].forEach(function (k, i) {
            var l = el('label'), r = el('input');
            r.type = 'radio';
            r.name = 'flame';
            r.checked = i === 0;
            r.addEventListener('change', function () { kind = k[0]; path = []; draw(); });
            l.appendChild(r);
            l.appendChild(document.createTextNode(' ' + k[1]));
            controls.appendChild(l);
        });
        s.appendChild(controls);
        s.appendChild(box);
        function unit(v) { return kind === 'time' ? dur(v * 1000) : bytes(v); }
        function draw() {
            var root = trees[kind] = trees[kind] || tree(stacks[kind] || ''), top = root;
            path.forEach(function (n) { top = top.c[n] || top; });
            box.innerHTML = '';
            if (!root.v) { box.appendChild(el('p', 'note', '(no ' + kind + ' recorded)')); return; }
            var depth = 0, min = top.v / 1000;
            function put(node, d, left, trail) {
                var f = el('div', 'fr');
                f.style.left = 100 * left / top.v + '%';
                f.style.width = 100 * node.v / top.v + '%';
                f.style.top = d * 18 + 'px';
                f.style.background = 'hsl(' + (20 + (node.n.length * 37) % 40) + ',85%,' +
                    (62 + (node.n.charCodeAt(0) % 5) * 3) + '%)';
                f.textContent = node.n;
                f.title = node.n + ': ' + unit(node.v) + ' (' + (100 * node.v / root.v).toFixed(1) +
                    '% of all)';
                f.dataset.v = node.v;
                f.addEventListener('click', function () { path = trail; draw(); });
                box.appendChild(f);
                depth = Math.max(depth, d + 1);
                var x = left;
                Object.keys(node.c).sort().forEach(function (k) {
                    var c = node.c[k];
                    if (c.v >= min) put(c, d + 1, x, trail.concat([k]));
                    x += c.v;
                });
            }
            put(top, 0, 0, path.length ? path.slice(0, -1) : []);
            box.style.height = depth * 18 + 'px';
        }
        draw();
    })();

    void document.body.offsetHeight; /* style and layout now, so the figure counts them */
    document.body.dataset.renderMs = (performance.now() - t0).toFixed(1);
    document.body.dataset.ready = '1';
})();
