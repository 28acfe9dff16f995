"use strict";
// The study report: reads the JSON in #report-data (icrl/report/data.py) and draws the leaderboard,
// the table of configurations (sortable, filterable) and a panel of curves per model and task.
(function () {
  const D = JSON.parse(document.getElementById("report-data").textContent);
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                  "#bcbd22", "#17becf", "#393b79", "#637939", "#8c6d31", "#843c39", "#7b4173"];
  const DIAGNOSTICS = { accuracy: "training accuracy", reward_rate: "reward rate",
                        entropy_norm: "prediction entropy / log2(labels)", frequency_bias: "frequency bias",
                        history_frequency_bias: "history frequency bias (prediction = top label so far)" };
  // chance is drawn on these too; zero-shot (a test accuracy) only on the test accuracy chart
  const ACCURACY_LIKE = new Set(["accuracy", "reward_rate"]);
  const REF_COLORS = { zero: "#000000", chance: "#999999" }; // the reference lines, as their legend entries
  const state = { sort: null, desc: false, text: "", model: "", task: "", method: "", diagnostic: "accuracy" };
  const byId = new Map(D.configs.map((c) => [c.id, c]));
  const colorOf = new Map(); // a colour per configuration, by its place in its panel; zero-shot: its line's
  for (const panel of D.panels) {
    panel.configs.forEach((id, i) => colorOf.set(id, byId.get(id).mode === "zero_shot" ? REF_COLORS.zero
                                                                                         : COLORS[i % COLORS.length]));
  }

  const num = (x, d = 3) => (x === null || x === undefined ? "–" : x.toFixed(d));
  const signed = (x, d = 3) => (x === null || x === undefined ? "–" : (x >= 0 ? "+" : "") + x.toFixed(d));
  const interval = (s) => (s.n > 1 && s.low !== null ? `${num(s.mean)} [${num(s.low)}, ${num(s.high)}]`
                                                        : s.n === 1 ? `${num(s.mean)} (1 seed)` : "–");
  const MARK = { above: "▲", below: "▼", same: "=" };

  // --- header and leaderboard ----------------------------------------------------------------
  function drawHeader() {
    const c = D.counts;
    document.getElementById("source").textContent =
      `${D.source}: ${c.runs} runs (${c.finished || 0} finished) in ${c.configs} configurations, ` +
      `${c.models} model(s), ${c.tasks} task(s)`;
    const notes = document.getElementById("notes");
    for (const note of D.notes) notes.append(el("li", {}, note));
  }

  function drawLeaderboard() {
    const box = document.getElementById("leaderboard");
    if (!D.leaderboard.length) { box.parentElement.hidden = true; return; }
    const head = ["rank", "model", "score [95%]", "ICRL gain over zero-shot", "supervised-ICL gap", "tasks"];
    const table = el("table", { class: "data", id: "leaderboard-table" }, el("thead", {}, el("tr", {},
      ...head.map((h) => el("th", {}, h)))));
    const body = el("tbody");
    D.leaderboard.forEach((s) => {
      const tasks = el("details", {}, el("summary", {}, `${s.tasks.length} tasks`),
        el("table", { class: "inner" }, el("tr", {}, ...["task", "zero-shot", "supervised ICL", "explorative ICRL",
                                                         "seeds", "items"].map((h) => el("th", {}, h))),
          ...s.tasks.map((t) => el("tr", {}, ...[t.task, num(t.zero), num(t.icl), num(t.icrl), t.seeds, t.items]
            .map((v) => el("td", {}, v))))));
      body.append(el("tr", { class: s.stable ? "" : "unstable", title: s.line },
        el("td", s.rank === null ? { class: "warn" } : {}, s.rank === null ? s.no_score : s.rank),
        el("td", {}, s.model),
        el("td", { class: "num" }, s.rank === null ? "none" : s.score_text),
        el("td", { class: "num" }, `${signed(s.gain)} [${signed(s.gain_low)}, ${signed(s.gain_high)}]`),
        el("td", { class: "num" }, `${signed(s.gap)} [${signed(s.gap_low)}, ${signed(s.gap_high)}]`),
        el("td", {}, tasks)));
    });
    table.append(body);
    box.append(table);
  }

  // --- the table -----------------------------------------------------------------------------
  const COLUMNS = [
    { key: "swatch", title: "", sort: null },
    { key: "model", title: "model", sort: (c) => c.model },
    { key: "task", title: "task", sort: (c) => c.task },
    { key: "label", title: "configuration", sort: (c) => c.label },
    { key: "steps", title: "steps", sort: (c) => c.steps },
    { key: "items", title: "test items", sort: (c) => c.test_items },
    { key: "seeds", title: "seeds (episode viewer)", sort: (c) => c.finished },
    { key: "final", title: "final test accuracy [95% over seeds]", sort: (c) => c.final.mean },
    { key: "best", title: "best test accuracy", sort: (c) => c.best.mean },
    { key: "vs_zero", title: "vs zero-shot (paired)", sort: (c) => (c.vs_zero ? c.vs_zero.diff : null) },
    { key: "vs_paper", title: "vs the paper's methods (paired)", sort: (c) => c.vs_paper.length },
  ];

  function verdictCell(v, name) {
    if (!v) return el("span", { class: "muted" }, "–");
    return el("span", { class: `verdict ${v.outcome}`,
                        title: `${num(v.a)} vs ${name} ${num(v.b)} on ${v.n} shared items (${v.pairs} run pair(s)); ` +
                               `McNemar exact ${v.p_text}; paired bootstrap 95% interval of the difference` },
      `${MARK[v.outcome]} ${signed(v.diff)} [${signed(v.low)}, ${signed(v.high)}] ${v.p_text}`);
  }

  function cell(c, key) {
    switch (key) {
      case "swatch": return el("span", { class: "swatch", style: `background:${colorOf.get(c.id)}` });
      case "model": return c.model;
      case "task": return c.task;
      case "label": return c.label;
      case "steps": return c.mode === "zero_shot" ? "–" : num(c.steps, 0);
      case "items": return num(c.test_items, 0);
      case "seeds": return el("span", {}, `${c.finished}/${c.n}: `, ...c.runs.map((r) => {
        const text = `s${r.seed === null ? "?" : r.seed}`;
        const title = `${r.run_id}\nfinal ${num(r.final)}, best ${num(r.best)}` +
                      (r.finished ? "" : `\nnot finished${r.damage ? ": " + r.damage : ""}`);
        const cls = r.finished ? "run" : "run unfinished";
        return r.viewer ? el("a", { href: r.viewer, class: cls, title }, text) : el("span", { class: cls, title }, text);
      }));
      case "final": return interval(c.final);
      case "best": return interval(c.best);
      case "vs_zero": return verdictCell(c.vs_zero, "zero-shot");
      case "vs_paper": return c.vs_paper.length
        ? el("span", {}, ...c.vs_paper.map((v) => el("div", {}, `${v.method}: `, verdictCell(v, v.label))))
        : el("span", { class: "muted" }, "–");
    }
    return "";
  }

  function visible() {
    const text = state.text.toLowerCase();
    return D.configs.filter((c) => (!state.model || c.model === state.model) && (!state.task || c.task === state.task)
      && (!state.method || c.method === state.method)
      && (!text || `${c.model} ${c.task} ${c.label} ${c.method}`.toLowerCase().includes(text)));
  }

  function drawTable() {
    const table = document.getElementById("configs");
    table.textContent = "";
    const head = el("tr");
    COLUMNS.forEach((col) => {
      const arrow = state.sort === col.key ? (state.desc ? " ▼" : " ▲") : "";
      head.append(el("th", col.sort ? { class: "sortable", "data-key": col.key, onclick: () => {
        state.desc = state.sort === col.key ? !state.desc : false;
        state.sort = col.key; render();
      } } : {}, col.title + arrow));
    });
    table.append(el("thead", {}, head));
    let rows = visible();
    const column = COLUMNS.find((c) => c.key === state.sort);
    if (column) {
      rows = rows.slice().sort((a, b) => {
        const x = column.sort(a), y = column.sort(b);
        if (x === y) return 0;
        if (x === null || x === undefined) return 1; // missing values last either way
        if (y === null || y === undefined) return -1;
        const order = typeof x === "number" ? x - y : String(x).localeCompare(String(y));
        return state.desc ? -order : order;
      });
    }
    const body = el("tbody");
    for (const c of rows) {
      body.append(el("tr", { "data-config": c.id, onmouseenter: () => highlight(c.id, true),
                             onmouseleave: () => highlight(c.id, false) },
        ...COLUMNS.map((col) => el("td", { class: `c-${col.key}` }, cell(c, col.key)))));
    }
    table.append(body);
    document.getElementById("shown").textContent = `${rows.length} of ${D.configs.length} configurations shown`;
  }

  function highlight(id, on) {
    document.querySelectorAll(`[data-config="${id}"]`).forEach((n) => n.classList.toggle("hl", on));
  }

  function drawFilters() {
    const options = (key) => [...new Set(D.configs.map((c) => c[key]))].sort();
    const select = (key, label) => {
      const s = el("select", { id: `filter-${key}`, "aria-label": label, onchange: (e) => { state[key] = e.target.value; render(); } },
        el("option", { value: "" }, `every ${label}`), ...options(key).map((v) => el("option", { value: v }, v)));
      return s;
    };
    const diag = el("select", { id: "diagnostic", "aria-label": "diagnostic curve",
                                onchange: (e) => { state.diagnostic = e.target.value; drawPanels(); } },
      ...Object.entries(DIAGNOSTICS).map(([k, v]) => el("option", { value: k }, v)));
    document.getElementById("filters").append(
      el("input", { type: "search", id: "filter-text", placeholder: "filter: model, task, configuration",
                    "aria-label": "filter", oninput: (e) => { state.text = e.target.value; render(); } }),
      select("model", "model"), select("task", "task"), select("method", "method"),
      el("label", {}, "diagnostic curve ", diag));
  }

  // --- curves --------------------------------------------------------------------------------
  const W = 360, H = 200, M = { l: 34, r: 8, t: 8, b: 26 };
  const NS = "http://www.w3.org/2000/svg";

  function chart(title, series, refs, xMax, yMax) {
    const svg = document.createElementNS(NS, "svg");
    svg.setAttribute("width", W); svg.setAttribute("height", H); svg.setAttribute("class", "chart-svg");
    const add = (tag, attrs, text) => {
      const n = document.createElementNS(NS, tag);
      for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
      if (text !== undefined) n.textContent = text;
      svg.append(n); return n;
    };
    const x = (v) => M.l + (xMax ? v / xMax : 0) * (W - M.l - M.r);
    const y = (v) => H - M.b - (v / yMax) * (H - M.t - M.b);
    add("line", { x1: M.l, y1: H - M.b, x2: W - M.r, y2: H - M.b, stroke: "#999" });
    add("line", { x1: M.l, y1: M.t, x2: M.l, y2: H - M.b, stroke: "#999" });
    for (const v of [0, yMax / 2, yMax]) {
      add("text", { x: M.l - 4, y: y(v) + 3, "text-anchor": "end" }, v.toFixed(1));
      add("line", { x1: M.l, y1: y(v), x2: W - M.r, y2: y(v), stroke: "#eee" });
    }
    add("text", { x: M.l, y: H - 10 }, "0");
    add("text", { x: W - M.r, y: H - 10, "text-anchor": "end" }, `step ${xMax}`);
    for (const r of refs) {
      if (r.value === null || r.value === undefined) continue;
      add("line", { x1: M.l, x2: W - M.r, y1: y(r.value), y2: y(r.value), class: `ref ${r.kind}`,
                    stroke: REF_COLORS[r.kind] });
      const right = r.kind === "zero"; // zero-shot labelled at the right end, chance at the left
      add("text", { x: right ? W - M.r - 2 : M.l + 3, y: y(r.value) - 3, "text-anchor": right ? "end" : "start",
                    class: `ref-label ${r.kind}` }, `${r.name} ${r.value.toFixed(3)}`);
    }
    for (const s of series) {
      const pts = s.xs.map((v, i) => (s.ys[i] === null ? null : [x(v), y(s.ys[i])])).filter((p) => p);
      if (!pts.length) continue;
      if (s.low && s.xs.length > 1) {
        const upper = s.xs.map((v, i) => `${x(v).toFixed(1)},${y(s.high[i]).toFixed(1)}`);
        const lower = s.xs.map((v, i) => `${x(v).toFixed(1)},${y(s.low[i]).toFixed(1)}`).reverse();
        add("polygon", { points: upper.concat(lower).join(" "), fill: s.color, opacity: 0.12, "data-config": s.id,
                         class: "band" });
      }
      add("polyline", { points: pts.map((p) => p.map((v) => v.toFixed(1)).join(",")).join(" "), fill: "none",
                        stroke: s.color, "stroke-width": 1.8, class: "series", "data-config": s.id });
      if (pts.length <= 30) for (const [cx, cy] of pts) add("circle", { cx, cy, r: 2.6, fill: s.color, "data-config": s.id });
    }
    return el("div", { class: "chart" }, el("h4", {}, title), svg);
  }

  function drawPanels() {
    const box = document.getElementById("panels");
    box.textContent = "";
    const shown = new Set(visible().map((c) => c.id));
    const diagnostic = state.diagnostic;
    for (const panel of D.panels) {
      const configs = panel.configs.map((id) => byId.get(id)).filter((c) => shown.has(c.id));
      if (!configs.length) continue;
      const curves = configs.filter((c) => c.mode !== "zero_shot");
      const xMax = Math.max(1, ...curves.flatMap((c) => c.curve.step), ...curves.flatMap((c) => (c.diagnostics.step || [])));
      const zero = { name: `zero-shot (${panel.zero_shot_runs} run${panel.zero_shot_runs === 1 ? "" : "s"})`,
                     value: panel.zero_shot, kind: "zero" };
      const chance = { name: "chance", value: panel.chance, kind: "chance" };
      const test = chart("test accuracy (mean over seeds, band: min-max)",
        curves.map((c) => ({ id: c.id, xs: c.curve.step, ys: c.curve.mean, low: c.curve.min, high: c.curve.max,
                             color: colorOf.get(c.id) })), [zero, chance], xMax, 1);
      const withDiag = curves.filter((c) => c.diagnostics[diagnostic]);
      const widest = withDiag.reduce((a, c) => (a && a.diagnostics.window >= c.diagnostics.window ? a : c), null);
      const diag = chart(`${DIAGNOSTICS[diagnostic]} (${widest ? widest.diagnostics.window_note : "no training steps"})`,
        withDiag.map((c) => ({ id: c.id, xs: c.diagnostics.step, ys: c.diagnostics[diagnostic], color: colorOf.get(c.id) })),
        ACCURACY_LIKE.has(diagnostic) ? [chance] : [], xMax, 1);
      const legend = el("ul", { class: "legend" }, ...configs.map((c) => el("li", { "data-config": c.id,
        onmouseenter: () => highlight(c.id, true), onmouseleave: () => highlight(c.id, false) },
        el("span", { class: c.mode === "zero_shot" ? "swatch dashed" : "swatch", style: `background:${colorOf.get(c.id)}` }),
        `${c.label}: ${interval(c.final)}`)));
      box.append(el("div", { class: "panel", "data-model": panel.model, "data-task": panel.task },
        el("h3", {}, `${panel.model} / ${panel.task}`), el("div", { class: "charts" }, test, diag), legend));
    }
  }

  function render() { drawTable(); drawPanels(); }

  drawHeader();
  drawLeaderboard();
  drawFilters();
  render();
  window.reportReadyMs = performance.now();
})();
