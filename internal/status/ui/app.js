// trimtab status page. Vanilla JavaScript, no dependencies, no build step.
// Polls ../debug/history, ../debug/endpoints, ../debug/decisions,
// ../debug/weights, ../debug/peers (the replica sync card, hidden when
// sync is off) and ../debug/flow (the flow-control card, hidden when flow
// control is off) once a second (relative to this page, so it works behind
// a path prefix) and redraws. Every field it reads from the proxy's debug
// endpoints is optional: a missing value shows as "—".
"use strict";

(function () {
  const POLL_MS = 1000;
  const FETCH_TIMEOUT_MS = 2500;
  const SVGNS = "http://www.w3.org/2000/svg";

  const S = {
    samples: [], lastSeq: 0, resolution: 500, windowMs: 600000, clockOff: 0,
    scorers: [], changes: [], latest: null, dropped: 0,
    endpoints: null, endpointsErr: null, endpointsNow: null,
    decisions: null, decisionsErr: null,
    weights: null,
    peers: null,             // /debug/peers (replica sync)
    flow: null, flowPrev: null, flowAt: 0, flowPrevAt: 0, // /debug/flow and the reading before it
    pickSnaps: [],           // [{t, counts: {addr: n}}] from endpoint pick counters
    range: 300000,
    hidden: new Set(["smoothed"]),
    signalKind: "herd",      // the detector's signal, inferred from the samples (signalKind)
    foldOpen: false,         // the signal chart shows the components its signal is not made of
    open: new Set(),         // expanded decision rows
    fails: 0, polls: 0, lastOk: 0,
  };

  // ---------- small helpers ----------

  const $ = (id) => document.getElementById(id);

  function h(tag, props, ...kids) {
    const el = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === "class") el.className = v;
        else if (k === "text") el.textContent = v;
        else if (k === "style") Object.assign(el.style, v);
        else if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
        else if (k === "dataset") Object.assign(el.dataset, v);
        else el.setAttribute(k, v);
      }
    }
    for (const c of kids.flat()) {
      if (c === undefined || c === null || c === false) continue;
      el.appendChild(typeof c === "object" ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  function s(tag, attrs) {
    const el = document.createElementNS(SVGNS, tag);
    if (attrs) for (const [k, v] of Object.entries(attrs)) {
      if (k === "text") el.textContent = v; else el.setAttribute(k, v);
    }
    return el;
  }

  function isNum(v) { return typeof v === "number" && isFinite(v); }

  function num(v) {
    if (isNum(v)) return v;
    if (typeof v === "string" && v.trim() !== "" && isFinite(Number(v))) return Number(v);
    return null;
  }

  // pick returns the first present field among names, looking in o and
  // then in a nested metrics or stats object ({metrics: {waiting: 3}}).
  function pick(o, ...names) {
    if (!o || typeof o !== "object") return undefined;
    for (const n of names) if (o[n] !== undefined && o[n] !== null) return o[n];
    for (const k of ["metrics", "stats"]) {
      const v = o[k];
      if (v && typeof v === "object" && !Array.isArray(v)) {
        for (const n of names) if (v[n] !== undefined && v[n] !== null) return v[n];
      }
    }
    return undefined;
  }

  function fmt(v, d = 2) {
    const x = num(v);
    if (x === null) return "—";
    return x.toFixed(d);
  }

  function fmtInt(v) {
    const x = num(v);
    if (x === null) return "—";
    return Math.abs(x - Math.round(x)) < 1e-9 ? String(Math.round(x)) : x.toFixed(1);
  }

  function pct(v, d = 0) {
    const x = num(v);
    if (x === null) return "—";
    return (x * 100).toFixed(d) + "%";
  }

  function fmtDur(sec) {
    if (sec === Infinity || (isNum(sec) && sec > 1e9)) return "never";
    if (!isNum(sec)) return "—";
    if (sec < 1) return Math.round(sec * 1000) + " ms";
    if (sec < 60) return sec.toFixed(sec < 10 ? 2 : 1) + " s";
    if (sec < 3600) return (sec / 60).toFixed(1) + " min";
    return (sec / 3600).toFixed(1) + " h";
  }

  function fmtRel(ms) {
    if (!isNum(ms)) return "";
    const a = Math.abs(ms) / 1000;
    if (a < 0.05) return "now";
    if (a < 60) return "−" + a.toFixed(1) + "s";
    if (a < 3600) return "−" + (a / 60).toFixed(1) + "m";
    return "−" + (a / 3600).toFixed(1) + "h";
  }

  function clock(ms) {
    if (!isNum(ms) || ms <= 0) return "—";
    const d = new Date(ms);
    const p = (n, w = 2) => String(n).padStart(w, "0");
    return p(d.getHours()) + ":" + p(d.getMinutes()) + ":" + p(d.getSeconds()) + "." + p(d.getMilliseconds(), 3);
  }

  function shortAddr(a) { return a ? String(a) : "—"; }

  function modeClass(m) {
    return "mode-" + (["calm", "rebalance", "frozen", "static"].includes(m) ? m : "unknown");
  }

  function badge(m) { return h("span", { class: "badge " + modeClass(m), text: m || "—" }); }

  function asList(v, ...keys) {
    if (Array.isArray(v)) return v;
    if (v && typeof v === "object") {
      for (const k of keys) if (Array.isArray(v[k])) return v[k];
    }
    return [];
  }

  async function getJSON(path) {
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), FETCH_TIMEOUT_MS);
    try {
      const r = await fetch(new URL(path, location.href), { signal: ctl.signal, cache: "no-store" });
      if (!r.ok) throw Object.assign(new Error(path.replace("../", "/") + ": HTTP " + r.status), { status: r.status });
      return await r.json();
    } finally {
      clearTimeout(timer);
    }
  }

  // ---------- colours ----------

  const PALETTE = {
    affinity: ["#2f6fde", "#7c5cd6", "#0ea5b7", "#5b8def"],
    distribution: ["#e08a26", "#d2463c", "#2e9e5b", "#b98900", "#c2417e"],
    none: ["#7a8296", "#9aa1b2"],
  };
  const COMPONENTS = {
    signal: { color: "var(--accent)", label: "signal" },
    herd: { color: "#f59e0b", label: "herd share" },
    request_cv: { color: "#8b5cf6", label: "request CV" },
    kv_cv: { color: "#14b8a6", label: "KV CV" },
    raw: { color: "#94a3b8", label: "raw (combined)" },
    smoothed: { color: "#64748b", label: "smoothed" },
    pressure: { color: "#e11d48", label: "pressure" },
  };
  const EXTRA = ["#0891b2", "#65a30d", "#db2777", "#ca8a04"];

  function scorerList() {
    if (S.scorers.length) return S.scorers;
    const scs = S.weights ? asList(S.weights.scorers) : [];
    if (scs.length && scs.every((x) => x && typeof x === "object" && x.name)) {
      return scs.map((x) => ({ name: x.name, type: x.type, category: x.category || "none", base: num(x.base_weight) }));
    }
    const w = currentWeights().values;
    return Object.keys(w || {}).sort().map((n) => ({ name: n, category: "none", base: null }));
  }

  function scorerColors() {
    const used = { affinity: 0, distribution: 0, none: 0 };
    const out = {};
    for (const sc of scorerList()) {
      const cat = PALETTE[sc.category] ? sc.category : "none";
      const p = PALETTE[cat];
      out[sc.name] = p[used[cat]++ % p.length];
    }
    return out;
  }

  // ---------- data ----------

  function mergeHistory(hist) {
    if (isNum(hist.resolution_ms) && hist.resolution_ms > 0) S.resolution = hist.resolution_ms;
    if (isNum(hist.window_ms) && hist.window_ms > 0) S.windowMs = hist.window_ms;
    if (Array.isArray(hist.scorers) && hist.scorers.length) S.scorers = hist.scorers;
    S.changes = asList(hist.changes);
    S.dropped = num(hist.dropped) || 0;
    const latest = hist.latest || null;
    if (latest && isNum(latest.seq) && latest.seq < S.lastSeq) {
      // The server restarted: start over with a full read next poll.
      S.samples = []; S.lastSeq = 0; S.latest = latest;
      return;
    }
    S.latest = latest;
    // The server's clock, estimated from its newest sample (at most one
    // control tick old): metrics ages are measured against it rather than
    // against this browser's clock, which may be skewed.
    if (latest && isNum(latest.at_ms)) S.clockOff = latest.at_ms - Date.now();
    const got = asList(hist.samples);
    if (got.length) {
      const first = got[0].seq;
      while (S.samples.length && S.samples[S.samples.length - 1].seq >= first) S.samples.pop();
      for (const x of got) S.samples.push(x);
      S.lastSeq = got[got.length - 1].seq;
    }
    const newest = S.samples.length ? S.samples[S.samples.length - 1].at_ms : 0;
    let i = 0;
    while (i < S.samples.length && S.samples[i].at_ms < newest - S.windowMs) i++;
    if (i) S.samples.splice(0, i);
  }

  // currentWeights: from the newest sample, else from /debug/weights.
  function currentWeights() {
    const out = { values: null, mode: null, version: null, reason: null, signal: null };
    const l = S.latest;
    if (l && l.weights) {
      out.values = l.weights; out.mode = l.mode; out.version = l.version; out.signal = l.signal;
    }
    const w = S.weights;
    if (w && typeof w === "object") {
      let vals = pick(w, "weights", "by_scorer", "Weights");
      const arr = pick(w, "values", "Values");
      const scs = asList(w.scorers);
      if ((!vals || typeof vals !== "object" || Array.isArray(vals)) && scs.length && scs.every((x) => x && typeof x === "object")) {
        // /debug/weights: {scorers: [{name, type, category, weight, base_weight}]}
        vals = {};
        for (const x of scs) if (x.name && isNum(x.weight)) vals[x.name] = x.weight;
      } else if ((!vals || typeof vals !== "object" || Array.isArray(vals)) && Array.isArray(arr)) {
        const names = asList(pick(w, "scorers", "names")).map((x) => (typeof x === "string" ? x : x && x.name));
        vals = {};
        arr.forEach((v, i) => { vals[names[i] || (S.scorers[i] && S.scorers[i].name) || "#" + i] = v; });
      }
      if (!out.values && vals && typeof vals === "object" && !Array.isArray(vals)) out.values = vals;
      if (out.mode == null) out.mode = pick(w, "mode", "Mode");
      if (out.version == null) out.version = num(pick(w, "version", "Version"));
      if (out.signal == null) out.signal = num(pick(w, "signal", "Signal"));
      out.reason = pick(w, "reason", "Reason") || null;
    }
    if (!out.reason && out.version != null) {
      for (let i = S.changes.length - 1; i >= 0; i--) {
        if (S.changes[i].to_version === out.version) { out.reason = S.changes[i].reason; break; }
      }
    }
    return out;
  }

  const STATES = ["fresh", "stale", "unhealthy"];

  function ageSeconds(e, serverNow) {
    let v = num(pick(e, "metrics_age_seconds", "age_seconds", "metrics_age_s"));
    if (v !== null) return v;
    v = num(pick(e, "metrics_age_ms", "age_ms"));
    if (v !== null) return v / 1000;
    const raw = pick(e, "metrics_age", "age");
    if (num(raw) !== null) return num(raw);
    if (typeof raw === "string") {
      const m = /^([\d.]+)(ns|µs|us|ms|s|m|h)$/.exec(raw.trim());
      if (m) return Number(m[1]) * { ns: 1e-9, "µs": 1e-6, us: 1e-6, ms: 1e-3, s: 1, m: 60, h: 3600 }[m[2]];
    }
    const at = pick(e, "scraped_at", "ScrapedAt");
    if (typeof at === "string" && at.startsWith("0001-")) return Infinity; // never scraped
    if (typeof at === "string") {
      const t = Date.parse(at);
      const now = serverNow || Date.now() + (S.clockOff || 0);
      if (isFinite(t)) return Math.max(0, (now - t) / 1000);
    }
    return null;
  }

  function normEndpoint(e, serverNow) {
    let st = pick(e, "state", "State");
    if (isNum(st)) st = STATES[st] || String(st);
    return {
      address: pick(e, "address", "Address", "addr"),
      name: pick(e, "name", "Name", "pod"),
      state: st,
      waiting: num(pick(e, "waiting", "Waiting", "num_requests_waiting")),
      running: num(pick(e, "running", "Running", "num_requests_running")),
      kv: num(pick(e, "kv_util", "kv_utilization", "kv_cache_usage", "KVUtil", "kv")),
      age: ageSeconds(e, serverNow),
      inflight: num(pick(e, "in_flight", "inflight", "InFlight", "in_flight_requests")),
      picks: num(pick(e, "picks", "picks_total", "requests", "requests_total")),
      prefix: num(pick(e, "prefix_hit_rate", "prefix_hit_ratio", "prefix_hits")),
      capacity: num(pick(e, "capacity", "Capacity")),
      ejected: pick(e, "ejected", "Ejected") === true,
      halfOpen: pick(e, "half_open", "HalfOpen") === true,
      ejectedUntil: pick(e, "ejected_until", "EjectedUntil"),
      ejections: num(pick(e, "ejections", "Ejections")),
    };
  }

  function decisionsList() {
    const list = asList(S.decisions, "decisions", "items", "recent");
    const withAt = list.filter((d) => d && (d.at || d.time || d.at_ms));
    if (withAt.length === list.length && list.length) {
      const t = (d) => num(d.at_ms) || Date.parse(d.at || d.time) || 0;
      return list.slice().sort((a, b) => t(b) - t(a));
    }
    return list; // the proxy's recorder lists the newest first
  }

  function chosenOf(d) { return pick(d, "chosen", "endpoint", "Chosen"); }

  function candidatesOf(d) { return asList(pick(d, "candidates", "Candidates")); }

  function prefixScorers() {
    const names = scorerList().filter((x) => x.type === "prefix" || /prefix/i.test(x.name)).map((x) => x.name);
    return names.length ? names : ["prefix"];
  }

  // pickShares: per-endpoint share of picks, from the endpoints' pick
  // counters over the last ~10 s when they exist, else from the recorded
  // decisions. Returns {shares: {addr: share}, source: text}.
  function pickShares(eps) {
    const now = Date.now();
    const counts = {};
    let have = false;
    for (const e of eps) if (e.address && e.picks !== null) { counts[e.address] = e.picks; have = true; }
    if (have) {
      S.pickSnaps.push({ t: now, counts });
      while (S.pickSnaps.length > 11) S.pickSnaps.shift();
      const first = S.pickSnaps[0];
      const shares = {};
      let total = 0;
      for (const [a, n] of Object.entries(counts)) {
        const d = Math.max(0, n - (first.counts[a] || 0));
        shares[a] = d; total += d;
      }
      let src = "share of picks over the last " + Math.round((now - first.t) / 1000) + " s";
      if (total === 0) {
        total = 0;
        for (const [a, n] of Object.entries(counts)) { shares[a] = n; total += n; }
        src = "share of all picks";
      }
      for (const a of Object.keys(shares)) shares[a] = total > 0 ? shares[a] / total : 0;
      return { shares, source: src };
    }
    const list = decisionsList();
    const shares = {};
    for (const d of list) { const c = chosenOf(d); if (c) shares[c] = (shares[c] || 0) + 1; }
    for (const a of Object.keys(shares)) shares[a] /= list.length;
    return { shares, source: list.length ? "share of the last " + list.length + " recorded decisions" : "" };
  }

  function prefixEstimate() {
    const names = prefixScorers();
    const acc = {};
    for (const d of decisionsList()) {
      const c = chosenOf(d);
      const cand = candidatesOf(d).find((x) => x && x.address === c);
      if (!cand || !cand.scores) continue;
      const n = names.find((k) => isNum(cand.scores[k]));
      if (!n) continue;
      const a = acc[c] || (acc[c] = { sum: 0, n: 0 });
      a.sum += cand.scores[n]; a.n++;
    }
    const out = {};
    for (const [k, v] of Object.entries(acc)) out[k] = v.sum / v.n;
    return out;
  }

  // ---------- rendering: header and weights ----------

  function renderHeader(cw, eps) {
    const mode = cw.mode || "—";
    const b = $("kpi-mode");
    b.textContent = mode; b.className = "badge " + modeClass(cw.mode);
    $("kpi-signal").textContent = fmt(cw.signal, 3);
    $("kpi-version").textContent = cw.version != null ? "v" + cw.version : "—";
    const bud = budget(cw.values);
    $("kpi-budget").textContent = bud ? pct(bud.D, 0) : "—";
    if (eps) {
      const fresh = eps.filter((e) => !e.state || e.state === "fresh").length;
      $("kpi-endpoints").textContent = fresh === eps.length ? String(eps.length) : fresh + "/" + eps.length;
      $("kpi-endpoints").title = fresh + " fresh of " + eps.length;
    }
  }

  function budget(values) {
    if (!values) return null;
    let aff = 0, dist = 0, none = 0;
    const cats = {};
    for (const sc of scorerList()) cats[sc.name] = sc.category;
    for (const [n, v] of Object.entries(values)) {
      if (!isNum(v)) continue;
      if (cats[n] === "affinity") aff += v; else if (cats[n] === "distribution") dist += v; else none += v;
    }
    if (aff + dist <= 0) return null;
    return { aff, dist, none, D: dist / (aff + dist) };
  }

  function renderWeights(cw) {
    const box = $("weights");
    const vals = cw.values;
    $("weights-reason").textContent = cw.reason ? cw.reason : "";
    $("weights-reason").title = cw.reason || "";
    if (!vals || !Object.keys(vals).length) return;
    const list = scorerList().filter((x) => x.name in vals);
    for (const n of Object.keys(vals)) if (!list.find((x) => x.name === n)) list.push({ name: n, category: "none" });
    const colors = scorerColors();
    let sum = 0, baseSum = 0;
    for (const x of list) { sum += num(vals[x.name]) || 0; baseSum += num(x.base) || 0; }
    box.replaceChildren(...list.map((x) => {
      const v = num(vals[x.name]) || 0;
      const share = sum > 0 ? v / sum : 0;
      const baseShare = baseSum > 0 && isNum(x.base) ? x.base / baseSum : null;
      const track = h("div", { class: "bar-track" },
        h("div", { class: "bar-fill", style: { width: (share * 100).toFixed(2) + "%", background: colors[x.name] || "var(--ink-3)" } }));
      if (baseShare !== null) {
        track.appendChild(h("div", { class: "bar-base", title: "profile weight " + fmt(x.base, 2) + " (" + pct(baseShare) + ")", style: { left: "calc(" + (baseShare * 100).toFixed(2) + "% - 1px)" } }));
      }
      return h("div", { class: "bar-row", dataset: { scorer: x.name } },
        h("div", { class: "bar-name", title: x.name }, x.name, h("span", { class: "cat", text: x.category || "" })),
        track,
        h("div", { class: "bar-val", text: fmt(v, 2) }),
        h("div", { class: "bar-share", text: pct(share, 1) }));
    }));
    const bud = budget(vals);
    if (bud) {
      box.appendChild(h("div", { class: "budget" },
        h("span", null, "affinity ", h("b", { text: pct(bud.aff / (bud.aff + bud.dist), 1) })),
        h("span", null, "distribution ", h("b", { text: pct(bud.D, 1) })),
        h("span", { class: "hint" }, "│ marks the profile weight")));
    }
    box.appendChild(loopStats());
  }

  // loopStats summarises the kept history: what an operator checks for a
  // loop that flaps or never calms down.
  function loopStats() {
    const a = S.samples;
    let trans = 0, reb = 0, span = 0, sMax = null, sSum = 0, n = 0, gated = 0;
    for (let i = 0; i < a.length; i++) {
      const x = a[i];
      if (i > 0) {
        const dt = x.at_ms - a[i - 1].at_ms;
        span += dt;
        if (a[i - 1].mode === "rebalance" || a[i - 1].mode === "frozen") reb += dt;
        if (x.mode !== a[i - 1].mode) trans++;
      }
      if (isNum(x.signal)) { sMax = sMax === null ? x.signal : Math.max(sMax, x.signal); sSum += x.signal; n++; }
      if (x.gate) gated++;
    }
    const mins = span / 60000;
    const cell = (label, value, title) => h("div", { class: "stat", title: title || "" }, h("span", { class: "label", text: label }), h("span", { class: "num", text: value }));
    return h("div", { class: "stats" },
      cell("history", a.length ? (mins >= 1 ? mins.toFixed(1) + " min" : (span / 1000).toFixed(0) + " s") : "—", a.length + " samples kept, one per " + S.resolution + " ms"),
      cell("mode changes", a.length ? String(trans) : "—", "mode transitions in the kept history; many in a short time means the loop flaps"),
      cell("rebalancing", span > 0 ? pct(reb / span, 0) : "—", "share of the kept history spent in rebalance or frozen mode"),
      cell("signal mean / max", n ? fmt(sSum / n, 2) + " / " + fmt(sMax, 2) : "—"),
      cell("gated", a.length ? pct(gated / a.length, 0) : "—", "share of samples whose signal was held at 0 (too few endpoints, low load)"));
  }

  // ---------- rendering: charts ----------

  function visibleSamples() {
    if (!S.samples.length) return { list: [], tEnd: 0 };
    const tEnd = S.samples[S.samples.length - 1].at_ms;
    const t0 = tEnd - S.range;
    let i = S.samples.length;
    while (i > 0 && S.samples[i - 1].at_ms >= t0) i--;
    return { list: S.samples.slice(Math.max(0, i - 1)), tEnd };
  }

  function componentKeys(list) {
    const keys = new Set();
    for (const x of list) {
      if (!x.components) continue;
      for (const [k, v] of Object.entries(x.components)) {
        if (isNum(v) && (k in COMPONENTS || (v >= 0 && v <= 1))) keys.add(k);
      }
    }
    // Drop keys that ever leave [0,1]: counts (endpoints, total_load) belong
    // in the tooltip, not on a 0…1 axis.
    for (const x of list) {
      if (!x.components) continue;
      for (const k of Array.from(keys)) {
        const v = x.components[k];
        if (isNum(v) && (v < 0 || v > 1.0000001)) keys.delete(k);
      }
    }
    const order = Object.keys(COMPONENTS);
    return Array.from(keys).sort((a, b) => {
      const ia = order.indexOf(a), ib = order.indexOf(b);
      return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
    });
  }

  function bandsOf(list, tEnd) {
    const bands = [];
    let cur = null;
    for (const x of list) {
      const kind = x.mode === "rebalance" || x.mode === "frozen" ? x.mode : null;
      if (cur && cur.kind !== kind) { cur.to = x.at_ms; bands.push(cur); cur = null; }
      if (kind && !cur) cur = { kind, from: x.at_ms, to: x.at_ms };
    }
    if (cur) { cur.to = tEnd; bands.push(cur); }
    return bands;
  }

  // drawChart draws series of [t, v] points against time on svg. Returns
  // the number of points drawn.
  function drawChart(svg, opts) {
    const W = Math.max(320, svg.clientWidth || svg.parentNode.clientWidth || 800);
    const H = Math.max(120, svg.clientHeight || 220);
    const m = { l: 40, r: 12, t: 8, b: 22 };
    const pw = W - m.l - m.r, ph = H - m.t - m.b;
    svg.setAttribute("viewBox", "0 0 " + W + " " + H);
    const nodes = [];
    const t1 = opts.tEnd, t0 = t1 - S.range;
    const X = (t) => m.l + ((t - t0) / (t1 - t0)) * pw;
    const Y = (v) => m.t + (1 - Math.max(0, Math.min(opts.yMax, v)) / opts.yMax) * ph;

    for (const b of opts.bands || []) {
      const x0 = Math.max(m.l, X(b.from)), x1 = Math.min(m.l + pw, X(b.to));
      if (x1 > x0) nodes.push(s("rect", { class: "band-" + b.kind, x: x0, y: m.t, width: Math.max(1, x1 - x0), height: ph }));
    }
    for (let i = 0; i <= 4; i++) {
      const v = (opts.yMax * i) / 4, y = Y(v);
      nodes.push(s("line", { class: "grid", x1: m.l, x2: m.l + pw, y1: y, y2: y }));
      nodes.push(s("text", { class: "axis", x: m.l - 6, y: y + 4, "text-anchor": "end", text: opts.yFmt(v) }));
    }
    const step = S.range <= 60000 ? 10000 : S.range <= 300000 ? 60000 : 120000;
    for (let k = 0; k <= S.range; k += step) {
      const x = X(t1 - k);
      nodes.push(s("line", { class: "grid", x1: x, x2: x, y1: m.t, y2: m.t + ph }));
      const label = k === 0 ? "now" : "−" + (k >= 60000 ? k / 60000 + "m" : k / 1000 + "s");
      nodes.push(s("text", { class: "axis", x: x, y: H - 6, "text-anchor": k === 0 ? "end" : "middle", text: label }));
    }
    let points = 0;
    const gap = Math.max(3 * S.resolution, 2000);
    for (const ser of opts.series) {
      if (ser.hidden) continue;
      let d = "", prevT = null;
      for (const [t, v] of ser.points) {
        if (!isNum(v) || t < t0 - S.resolution) { prevT = null; continue; }
        const cmd = prevT === null || t - prevT > gap ? "M" : "L";
        d += cmd + X(t).toFixed(1) + " " + Y(v).toFixed(1);
        prevT = t;
        if (ser.main) points++;
      }
      if (!d) continue;
      const p = s("path", { class: "line" + (ser.main ? " main" : ""), d, "data-series": ser.key });
      p.style.stroke = ser.color; // CSSOM, so var(--accent) works and the CSP allows it
      if (ser.dash) p.setAttribute("stroke-dasharray", ser.dash);
      nodes.push(p);
    }
    if (!opts.series.some((x) => x.points.length)) {
      nodes.push(s("text", { class: "nodata", x: m.l + pw / 2, y: m.t + ph / 2, "text-anchor": "middle", text: "No samples yet" }));
    }
    const cross = s("line", { class: "cross", x1: 0, x2: 0, y1: m.t, y2: m.t + ph, visibility: "hidden" });
    nodes.push(cross);
    svg.replaceChildren(...nodes);
    svg.dataset.points = String(points);
    svg._geom = { X, t0, t1, m, pw, W, cross, tip: opts.tip };
    return points;
  }

  function legend(box, items) {
    box.replaceChildren(...items.map((it) => h("span", {
      class: "item" + (it.off ? " off" : ""), dataset: { key: it.key }, title: it.title || "",
      onclick: it.toggle ? () => { it.toggle(); render(); } : null,
    }, h("span", { class: "sw" + (it.band ? " band" : ""), style: { background: it.color } }), it.label, it.val !== undefined ? h("span", { class: "val", text: it.val }) : null)));
  }

  function toggler(key) {
    return () => { if (S.hidden.has(key)) S.hidden.delete(key); else S.hidden.add(key); };
  }

  // The components each signal is made of (detector.Signal): the herd
  // signal is the herd share itself; the CV signal smooths raw, which
  // combines request_cv and kv_cv.
  const LEADS = { herd: ["herd"], cv: ["request_cv", "kv_cv", "raw"] };

  // signalKind says which signal the detector hands over: on an ungated
  // tick with a signal above 0 it equals the herd component (herd) or the
  // smoothed one (cv). With no such tick in the window the last answer
  // stands (at first the default, herd).
  function signalKind(list) {
    let herd = 0, cv = 0;
    for (const x of list) {
      const c = x.components;
      if (!c || x.gate || !(x.signal > 0)) continue;
      if (c.herd === x.signal) herd++;
      else if (c.smoothed === x.signal) cv++;
    }
    if (herd > cv) S.signalKind = "herd";
    else if (cv > herd) S.signalKind = "cv";
    return S.signalKind;
  }

  // renderSignalChart leads with the signal and the components it is made
  // of; the others are folded behind one legend item.
  function renderSignalChart() {
    const { list, tEnd } = visibleSamples();
    const kind = signalKind(list);
    const all = componentKeys(list);
    const lead = all.filter((k) => LEADS[kind].includes(k));
    const folded = all.filter((k) => !LEADS[kind].includes(k));
    const keys = S.foldOpen ? lead.concat(folded) : lead;
    const series = [{ key: "signal", color: COMPONENTS.signal.color, main: true, hidden: S.hidden.has("signal"),
      points: list.map((x) => [x.at_ms, x.signal]) }];
    keys.forEach((k, i) => {
      const c = COMPONENTS[k] || { color: EXTRA[i % EXTRA.length], label: k };
      series.push({ key: k, color: c.color, hidden: S.hidden.has(k), dash: k === "raw" ? "4 3" : null,
        points: list.map((x) => [x.at_ms, x.components ? x.components[k] : null]) });
    });
    const last = list.length ? list[list.length - 1] : null;
    const items = series.map((x) => ({
      key: x.key, color: x.color, off: x.hidden, toggle: toggler(x.key),
      label: x.key === "signal" ? "signal (" + (kind === "cv" ? "CV" : "herd") + ")" : (COMPONENTS[x.key] || { label: x.key }).label,
      val: last ? fmt(x.key === "signal" ? last.signal : last.components && last.components[x.key], 3) : undefined,
    }));
    if (folded.length) {
      items.push({ key: "fold", color: "transparent", label: S.foldOpen ? "hide the other components" : "+ " + folded.length + " other components",
        title: folded.join(", "), toggle: () => { S.foldOpen = !S.foldOpen; } });
    }
    items.push({ key: "band", color: "var(--band-rebalance)", label: "rebalance", band: true });
    items.push({ key: "band2", color: "var(--band-frozen)", label: "frozen", band: true });
    legend($("signal-legend"), items);
    drawChart($("signal-chart"), { series, bands: bandsOf(list, tEnd), tEnd, yMax: 1, yFmt: (v) => v.toFixed(2), tip: tipSignal });
    const g = $("signal-gate");
    if (last && last.gate) g.textContent = "Signal held at 0: " + last.gate.replace(/_/g, " ") + ".";
    else if (last && last.components) {
      const c = last.components, parts = [];
      if (isNum(c.endpoints)) parts.push(fmtInt(c.endpoints) + " endpoints measured");
      if (isNum(c.total_load)) parts.push("total load " + fmt(c.total_load, 1));
      g.textContent = parts.join(" · ");
    } else g.textContent = "";
  }

  function renderWeightsChart() {
    const { list, tEnd } = visibleSamples();
    const colors = scorerColors();
    const names = scorerList().map((x) => x.name);
    for (const x of list) if (x.weights) for (const n of Object.keys(x.weights)) if (!names.includes(n)) names.push(n);
    const series = names.map((n, i) => ({
      key: "w:" + n, color: colors[n] || EXTRA[i % EXTRA.length], hidden: S.hidden.has("w:" + n), main: i === 0,
      points: list.map((x) => {
        if (!x.weights) return [x.at_ms, null];
        let sum = 0; for (const v of Object.values(x.weights)) if (isNum(v)) sum += v;
        return [x.at_ms, sum > 0 && isNum(x.weights[n]) ? x.weights[n] / sum : null];
      }),
    }));
    const last = list.length ? list[list.length - 1] : null;
    legend($("weights-legend"), series.map((x) => {
      const n = x.key.slice(2);
      let val;
      if (last && last.weights) {
        let sum = 0; for (const v of Object.values(last.weights)) if (isNum(v)) sum += v;
        val = sum > 0 ? pct(last.weights[n] / sum, 1) : undefined;
      }
      return { key: x.key, color: x.color, label: n, off: x.hidden, toggle: toggler(x.key), val };
    }));
    let yMax = 0;
    for (const x of series) if (!x.hidden) for (const [, v] of x.points) if (isNum(v)) yMax = Math.max(yMax, v);
    // A multiple of 0.2, so the quarter grid lines fall on round percentages.
    yMax = yMax <= 0 ? 1 : Math.min(1, Math.ceil((yMax * 1.05) * 5) / 5);
    drawChart($("weights-chart"), { series, bands: bandsOf(list, tEnd), tEnd, yMax, yFmt: (v) => (v * 100).toFixed(0) + "%", tip: tipWeights });
  }

  function nearestSample(t) {
    const a = S.samples;
    if (!a.length) return null;
    let lo = 0, hi = a.length - 1;
    while (lo < hi) { const mid = (lo + hi) >> 1; if (a[mid].at_ms < t) lo = mid + 1; else hi = mid; }
    if (lo > 0 && Math.abs(a[lo - 1].at_ms - t) < Math.abs(a[lo].at_ms - t)) lo--;
    return a[lo];
  }

  function tipRows(title, rows) {
    const tip = $("tip");
    tip.replaceChildren(h("div", { class: "t", text: title }), ...rows.map(([k, v]) => h("div", { class: "row" }, h("span", { text: k }), h("span", { text: v }))));
  }

  function tipSignal(x) {
    const rows = [["mode", x.mode || "—"], ["signal", fmt(x.signal, 3)]];
    if (x.gate) rows.push(["gate", x.gate]);
    for (const [k, v] of Object.entries(x.components || {})) rows.push([k, k === "endpoints" ? fmtInt(v) : fmt(v, 3)]);
    return rows;
  }

  function tipWeights(x) {
    const rows = [["mode", x.mode || "—"], ["version", x.version != null ? "v" + x.version : "—"]];
    for (const [k, v] of Object.entries(x.weights || {})) rows.push([k, fmt(v, 3)]);
    return rows;
  }

  function attachHover(svg) {
    svg.addEventListener("mousemove", (ev) => {
      const g = svg._geom;
      if (!g || !S.samples.length) return;
      const r = svg.getBoundingClientRect();
      const px = ((ev.clientX - r.left) / r.width) * g.W;
      if (px < g.m.l || px > g.m.l + g.pw) { hideTip(svg); return; }
      const t = g.t0 + ((px - g.m.l) / g.pw) * (g.t1 - g.t0);
      const x = nearestSample(t);
      if (!x) return;
      const cx = g.X(x.at_ms);
      g.cross.setAttribute("x1", cx); g.cross.setAttribute("x2", cx); g.cross.setAttribute("visibility", "visible");
      tipRows(clock(x.at_ms) + "  (" + fmtRel(x.at_ms - g.t1) + ")", g.tip(x));
      const tip = $("tip");
      tip.hidden = false;
      const tw = tip.offsetWidth, th = tip.offsetHeight;
      let left = ev.clientX + 14, top = ev.clientY + 14;
      if (left + tw > window.innerWidth - 8) left = ev.clientX - tw - 14;
      if (top + th > window.innerHeight - 8) top = ev.clientY - th - 14;
      tip.style.left = left + "px"; tip.style.top = top + "px";
    });
    svg.addEventListener("mouseleave", () => hideTip(svg));
  }

  function hideTip(svg) {
    $("tip").hidden = true;
    if (svg._geom) svg._geom.cross.setAttribute("visibility", "hidden");
  }

  // ---------- rendering: tables ----------

  function meter(v, opts = {}) {
    const x = num(v);
    if (x === null) return h("span", { class: "meter" }, h("span", { text: "—" }));
    const w = Math.max(0, Math.min(1, x));
    let cls = "fill";
    if (opts.heat && x >= 0.9) cls += " full"; else if (opts.heat && x >= 0.75) cls += " hot";
    return h("span", { class: "meter" },
      h("span", { class: "track" }, h("span", { class: cls, style: { width: (w * 100).toFixed(1) + "%", display: "block" } })),
      h("span", { text: pct(x, opts.d || 0) }));
  }

  function placeholder(tbody, cols, text) {
    tbody.replaceChildren(h("tr", { class: "placeholder" }, h("td", { colspan: cols, text })));
  }

  function renderEndpoints() {
    const tbody = $("endpoints").tBodies[0];
    const note = $("endpoints-note");
    if (S.endpoints === null) {
      placeholder(tbody, 9, S.endpointsErr ? "Endpoints unavailable: " + S.endpointsErr : "No endpoint data yet.");
      return null;
    }
    const eps = asList(S.endpoints, "endpoints", "items", "pool").map((e) => normEndpoint(e, S.endpointsNow));
    if (!eps.length) { placeholder(tbody, 9, "The pool is empty."); note.textContent = ""; return eps; }
    const { shares, source } = pickShares(eps);
    const est = prefixEstimate();
    note.textContent = [eps.length + " endpoints", source].filter(Boolean).join(" · ");
    eps.sort((a, b) => String(a.address).localeCompare(String(b.address), undefined, { numeric: true }));
    tbody.replaceChildren(...eps.map((e) => {
      // The scraper's defaults: 50 ms interval, stale after 4 × = 200 ms.
      const ageCls = e.age === null ? "" : e.age > 1 ? "age-dead" : e.age > 0.2 ? "age-old" : "";
      const pre = e.prefix !== null ? e.prefix : est[e.address];
      const st = e.state || "—";
      return h("tr", { dataset: { address: e.address || "" } },
        h("td", { class: "l" }, h("span", { class: "addr", text: shortAddr(e.address) }), e.name ? h("span", { class: "name", text: e.name }) : null),
        h("td", { class: "l" }, h("span", { class: "pill st-" + st, text: st }), e.ejected ? h("span", {
          class: "pill st-ejected", text: e.halfOpen ? "half-open" : "ejected",
          title: (e.halfOpen ? "Ejected after consecutive failures; its server answers again, so it takes a trial request" :
            "Left out of picks after consecutive failures") + (e.ejectedUntil ? " until " + new Date(e.ejectedUntil).toLocaleTimeString() : "") +
            (e.ejections !== null ? " · " + fmtInt(e.ejections) + " ejection" + (e.ejections === 1 ? "" : "s") : ""),
        }) : null),
        h("td", { class: "n", text: fmtInt(e.waiting) }),
        h("td", { class: "n", text: fmtInt(e.running) }),
        h("td", { class: "l" }, meter(e.kv, { heat: true })),
        h("td", { class: "n " + ageCls, text: fmtDur(e.age) }),
        h("td", { class: "n", text: fmtInt(e.inflight) }),
        h("td", { class: "l" }, meter(shares[e.address] !== undefined ? shares[e.address] : null, { d: 1 })),
        h("td", { class: "n", title: e.prefix !== null ? "reported" : "estimated from recorded decisions", text: pre !== undefined && pre !== null ? pct(pre, 0) : "—" }));
    }));
    return eps;
  }

  function weightDiff(c) {
    const parts = [];
    const nw = c.new || {}, old = c.old || null;
    for (const n of Object.keys(nw)) {
      const a = old ? old[n] : undefined, b = nw[n];
      if (old && isNum(a) && Math.abs(a - b) < 1e-9) continue;
      const cls = !isNum(a) ? "" : b > a ? "delta-up" : "delta-down";
      parts.push(h("span", null, n + " ", isNum(a) ? fmt(a, 2) + "→" : "", h("b", { class: cls, text: fmt(b, 2) })));
    }
    if (!parts.length) return h("span", { class: "wdiff", text: "unchanged" });
    const out = h("span", { class: "wdiff" });
    parts.forEach((p, i) => { if (i) out.appendChild(document.createTextNode("  ")); out.appendChild(p); });
    return out;
  }

  // Replica sync (/debug/peers): shown only when the replica syncs.
  function renderPeers() {
    const card = $("card-peers");
    const p = S.peers;
    if (!p || !p.enabled) { card.hidden = true; return; }
    card.hidden = false;
    $("peers-note").textContent = "this replica: " + (p.id || "—") + " · " + (num(p.picks_logged) ?? 0) + " picks shared" +
      (num(p.picks_dropped) ? ", " + num(p.picks_dropped) + " dropped" : "");
    const tbody = $("peers").tBodies[0];
    const when = (s) => (s && !String(s).startsWith("0001-") ? clock(Date.parse(s)) : "—");
    const rows = [];
    for (const o of asList(p.peers)) {
      const st = o.self ? "self" : o.connected ? "connected" : "down";
      rows.push(h("tr", { dataset: { peer: o.address } },
        h("td", { class: "l n" }, o.address, o.id ? h("span", { class: "name", text: o.id }) : null), h("td", { class: "l", text: "out" }),
        h("td", { class: "l" }, h("span", { class: "pill st-" + (st === "connected" ? "fresh" : st === "self" ? "stale" : "unhealthy"), text: st })),
        h("td", { class: "l n", text: when(o.since) }),
        h("td", { class: "n", text: String(num(o.batches_sent) ?? "—") }),
        h("td", { class: "n", text: String(num(o.batches_dropped) ?? "—") }),
        h("td", { class: "n", text: "—" }), h("td", { class: "n", text: "—" }),
        h("td", { class: "l wrap", text: o.last_error || "" })));
    }
    for (const i of asList(p.inbound)) {
      const st = i.expired ? "expired" : i.streams > 0 ? "connected" : "down";
      rows.push(h("tr", { dataset: { peer: i.id } },
        h("td", { class: "l n", text: i.id }), h("td", { class: "l", text: "in" }),
        h("td", { class: "l" }, h("span", { class: "pill st-" + (st === "connected" ? "fresh" : "unhealthy"), text: st })),
        h("td", { class: "l n", text: when(i.last_seen) }),
        h("td", { class: "n", text: String(num(i.batches_applied) ?? "—") }),
        h("td", { class: "n", text: "—" }),
        h("td", { class: "n", text: fmt(num(i.lag_ms), 1) + " ms" }),
        h("td", { class: "n", text: String(num(i.in_flight) ?? 0) }),
        h("td", { class: "l", text: "" })));
    }
    if (!rows.length) { placeholder(tbody, 9, "No peer configured."); return; }
    tbody.replaceChildren(...rows);
  }

  // Flow control (/debug/flow): shown only when it is on. Rates and the
  // recent mean wait come from the last two readings of its counters.
  function renderFlow() {
    const card = $("card-flow");
    const f = S.flow;
    if (!f || !f.enabled) { card.hidden = true; return; }
    card.hidden = false;
    $("flow-note").textContent = (num(f.queued) ?? 0) + " of " + (num(f.max_queue) ?? "—") + " waiting in the router";
    const prev = {};
    if (S.flowPrev && S.flowPrev.enabled) for (const b of asList(S.flowPrev.bands)) prev[b.name] = b;
    const dt = (S.flowAt - S.flowPrevAt) / 1000;
    const tbody = $("flow").tBodies[0];
    const rows = asList(f.bands).map((b) => {
      const p = prev[b.name];
      const dn = p && dt > 0 ? (num(b.dispatched) ?? 0) - (num(p.dispatched) ?? 0) : null;
      const wc = (num(b.wait_count) ?? 0) - (p ? num(p.wait_count) ?? 0 : 0);
      const ws = (num(b.wait_seconds_sum) ?? 0) - (p ? num(p.wait_seconds_sum) ?? 0 : 0);
      const drops = Object.entries(b.drops || {}).filter(([, v]) => num(v)).sort((x, y) => x[0] < y[0] ? -1 : 1);
      return h("tr", { dataset: { band: b.name } },
        h("td", { class: "l", text: b.name }),
        h("td", { class: "n", text: String(num(b.queued) ?? 0) }),
        h("td", { class: "n", text: dn === null ? "—" : fmt(dn / dt, 1) }),
        h("td", { class: "n", text: wc > 0 ? fmt(ws / wc * 1000, 1) + " ms" : "—" }),
        h("td", { class: "n", text: String(num(b.dispatched) ?? 0) }),
        h("td", { class: "l wrap", text: drops.length ? drops.map(([k, v]) => k + " " + v).join(", ") : "none" }),
        h("td", { class: "l wrap", text: asList(b.tenants).map((t) => t.name + " " + (num(t.queued) ?? 0) + " / " + (num(t.dispatched) ?? 0) + " / " + (num(t.dropped) ?? 0)).join(", ") || "—" }));
    });
    if (!rows.length) { placeholder(tbody, 7, "No band configured."); return; }
    tbody.replaceChildren(...rows);
  }

  function renderChanges() {
    const tbody = $("changes").tBodies[0];
    const list = S.changes.slice().reverse().slice(0, 50);
    $("changes-note").textContent = S.changes.length ? S.changes.length + " kept" + (S.changes.length > 50 ? ", newest 50 shown" : "") : "";
    if (!list.length) { placeholder(tbody, 6, "No weight change recorded yet."); return; }
    const tEnd = S.latest ? S.latest.at_ms : null;
    tbody.replaceChildren(...list.map((c) => h("tr", { dataset: { seq: c.seq } },
      h("td", { class: "l n", title: c.at || "" }, clock(c.at_ms), " ", h("span", { class: "name", text: tEnd && c.at_ms ? fmtRel(c.at_ms - tEnd) : "" })),
      h("td", { class: "l n" }, (c.from_version ? "v" + c.from_version + " → " : "") + "v" + c.to_version,
        c.steps > 1 ? h("span", { class: "name", text: c.steps + " steps" }) : null),
      h("td", { class: "l" }, c.from_mode && c.from_mode !== c.to_mode ? [badge(c.from_mode), " → "] : null, badge(c.to_mode)),
      h("td", { class: "n", text: fmt(c.signal, 3) }),
      h("td", { class: "l wrap", text: c.reason || "—" }),
      h("td", { class: "l wrap" }, weightDiff(c)))));
  }

  function scoreCell(v) {
    const x = num(v);
    if (x === null) return h("td", { class: "n", text: "—" });
    return h("td", { class: "n" }, h("span", { class: "score" },
      h("i", null, h("b", { style: { width: (Math.max(0, Math.min(1, x)) * 100).toFixed(0) + "%" } })), fmt(x, 2)));
  }

  function renderDecisions() {
    const table = $("decisions");
    const tbody = table.tBodies[0];
    if (S.decisions === null) {
      placeholder(tbody, 5, S.decisionsErr ? "Decisions unavailable: " + S.decisionsErr : "No decisions recorded yet.");
      return;
    }
    const list = decisionsList().slice(0, 15);
    let names = scorerList().map((x) => x.name);
    if (!names.length) {
      const set = new Set();
      for (const d of list) for (const c of candidatesOf(d)) for (const k of Object.keys(c.scores || {})) set.add(k);
      names = Array.from(set).sort();
    }
    $("decisions-head").replaceChildren(
      h("th", { class: "l", text: "request" }), h("th", { class: "l", text: "model" }), h("th", { class: "l", text: "chosen" }),
      h("th", { class: "l", text: "weights" }), ...names.map((n) => h("th", { text: n })), h("th", { text: "total" }), h("th", { text: "candidates" }));
    const cols = 6 + names.length;
    if (!list.length) { placeholder(tbody, cols, "No decisions recorded yet."); return; }
    const rows = [];
    list.forEach((d, i) => {
      const id = String(pick(d, "request_id", "RequestID", "id") || "#" + i);
      const chosen = chosenOf(d);
      const cands = candidatesOf(d);
      const win = cands.find((c) => c && c.address === chosen) || null;
      const open = S.open.has(id);
      const wv = pick(d, "weights_version", "WeightsVersion");
      rows.push(h("tr", { class: "dec" + (open ? " open" : ""), dataset: { id },
        onclick: () => { if (S.open.has(id)) S.open.delete(id); else S.open.add(id); renderDecisions(); } },
        h("td", { class: "l mono", text: id.length > 18 ? id.slice(0, 8) + "…" + id.slice(-8) : id, title: id }),
        h("td", { class: "l", text: pick(d, "model", "Model") || "—" }),
        h("td", { class: "l" }, h("span", { class: "addr", text: shortAddr(chosen) }),
          asList(d.fallbacks).length ? h("span", { class: "name", text: "then " + asList(d.fallbacks).join(", ") }) : null),
        h("td", { class: "l" }, h("span", { class: "mono", text: wv != null ? "v" + wv + " " : "" }), d.mode ? badge(d.mode) : null),
        ...names.map((n) => scoreCell(win && win.scores ? win.scores[n] : null)),
        h("td", { class: "n", text: fmt(win && win.total, 3) }),
        h("td", { class: "n", text: String(cands.length) })));
      if (open) {
        const sorted = cands.slice().sort((a, b) => (num(b.total) || 0) - (num(a.total) || 0));
        const w = d.weights || {};
        rows.push(h("tr", { class: "cands" }, h("td", { colspan: cols },
          h("table", null,
            h("thead", null, h("tr", null, h("th", { class: "l", text: "candidate" }),
              ...names.map((n) => h("th", { text: n + (isNum(w[n]) ? " ×" + fmt(w[n], 2) : "") })), h("th", { text: "total" }))),
            h("tbody", null, ...sorted.map((c) => h("tr", { class: c.address === chosen ? "win" : "" },
              h("td", { class: "l addr", text: (c.address === chosen ? "✓ " : "") + c.address }),
              ...names.map((n) => scoreCell(c.scores ? c.scores[n] : null)),
              h("td", { class: "n", text: fmt(c.total, 3) }))))))));
      }
    });
    tbody.replaceChildren(...rows);
  }

  // ---------- loop ----------

  function render() {
    const cw = currentWeights();
    const eps = renderEndpoints();
    renderHeader(cw, eps);
    renderWeights(cw);
    renderSignalChart();
    renderWeightsChart();
    renderPeers();
    renderFlow();
    renderChanges();
    renderDecisions();
    document.body.dataset.polls = String(S.polls);
  }

  // The history poll failed more than once (the router restarts, the
  // network is down, or it answers with an error): say so above everything,
  // with what is still shown, and keep polling. One failed poll only turns
  // the indicator to "retrying".
  function renderOffline(err) {
    const b = $("offline");
    if (!err || (S.fails < 2 && S.lastOk)) { b.hidden = true; return; }
    b.replaceChildren(
      h("b", { text: (err.status ? "The router refuses the status data (HTTP " + err.status + ")" : "Router unreachable") +
        " — retrying every " + POLL_MS / 1000 + " s." }),
      h("span", { class: "detail", text: (S.lastOk ? "Showing data from " + clock(S.lastOk).slice(0, 8) + ". " : "No data yet. ") +
        (err.message ? "Last error: " + err.message : "") }));
    b.hidden = false;
  }

  function setConn(ok, text) {
    const c = $("conn");
    c.className = "conn " + (ok ? "conn-live" : "conn-down");
    $("conn-text").textContent = text;
  }

  async function poll() {
    const hist = getJSON("../debug/history" + (S.lastSeq ? "?from=" + S.lastSeq : ""));
    const eps = getJSON("../debug/endpoints");
    const dec = getJSON("../debug/decisions");
    const w = getJSON("../debug/weights");
    const peers = getJSON("../debug/peers");
    const flow = getJSON("../debug/flow");
    const [rh, re, rd, rw, rp, rf] = await Promise.allSettled([hist, eps, dec, w, peers, flow]);
    S.peers = rp.status === "fulfilled" ? rp.value : null;
    if (rf.status === "fulfilled") { S.flowPrev = S.flow; S.flowPrevAt = S.flowAt; S.flow = rf.value; S.flowAt = Date.now(); } else S.flow = null;
    if (rh.status === "fulfilled") { mergeHistory(rh.value); S.fails = 0; } else S.fails++;
    if (re.status === "fulfilled") {
      S.endpoints = re.value; S.endpointsErr = null;
      const now = pick(re.value, "now", "time");
      S.endpointsNow = typeof now === "string" ? Date.parse(now) : null;
    } else { S.endpoints = null; S.endpointsErr = re.reason && re.reason.message; }
    if (rd.status === "fulfilled") { S.decisions = rd.value; S.decisionsErr = null; } else { S.decisions = null; S.decisionsErr = rd.reason && rd.reason.message; }
    S.weights = rw.status === "fulfilled" ? rw.value : null;
    S.polls++;
    if (rh.status === "fulfilled") { S.lastOk = Date.now(); setConn(true, "live · " + clock(S.lastOk).slice(0, 8)); }
    else setConn(false, S.fails > 1 ? "disconnected" : "retrying");
    renderOffline(rh.status === "rejected" ? rh.reason : null);
    try { render(); } catch (err) { console.error(err); $("foot-text").textContent = "render error: " + err.message; }
  }

  async function loop() {
    await poll();
    setTimeout(loop, POLL_MS);
  }

  function initTheme() {
    const root = document.documentElement;
    let t = null;
    try { t = localStorage.getItem("trimtab-theme"); } catch (e) { /* storage unavailable */ }
    if (t) root.dataset.theme = t;
    $("theme").addEventListener("click", () => {
      const dark = root.dataset.theme ? root.dataset.theme === "dark" : matchMedia("(prefers-color-scheme: dark)").matches;
      root.dataset.theme = dark ? "light" : "dark";
      try { localStorage.setItem("trimtab-theme", root.dataset.theme); } catch (e) { /* ignore */ }
    });
  }

  function init() {
    initTheme();
    for (const b of document.querySelectorAll("#range button")) {
      b.addEventListener("click", () => {
        S.range = Number(b.dataset.range);
        for (const o of document.querySelectorAll("#range button")) o.classList.toggle("on", o === b);
        render();
      });
    }
    attachHover($("signal-chart"));
    attachHover($("weights-chart"));
    let rt = null;
    window.addEventListener("resize", () => { clearTimeout(rt); rt = setTimeout(render, 100); });
    loop();
  }

  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", init);
  else init();
})();
