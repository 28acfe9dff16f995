"use strict";
// The episode viewer: reads the JSON in #viewer-data, draws the curves (SVG) and the step browser.
(function () {
  const D = JSON.parse(document.getElementById("viewer-data").textContent);
  const S = D.strings;
  const COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                  "#bcbd22", "#17becf"];
  const color = (i) => COLORS[i % COLORS.length];
  const maxStep = Math.max(D.steps - 1, 0);
  let step = 0;
  let selected = D.runs.map((_, i) => i).slice(0, 4);
  let lower = null; // lower-cased strings, built on the first search

  const fmt = (x) => (x === null || x === undefined ? "–" : (Math.round(x * 1000) / 1000).toFixed(3));
  const rewardMark = (r) => (r === 1 ? el("span", { class: "good" }, "✓ 1") : r === 0 ? el("span", { class: "bad" }, "✗ 0")
                                                                                      : el("span", { class: "muted" }, "–"));
  const DIGITS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_.";
  function decodeContext(text) { // the inverse of icrl/viewer/data.py encode_context
    const zigzag = text.startsWith("~"), values = [];
    let value = 0, shift = 0;
    for (const ch of zigzag ? text.slice(1) : text) {
      const digit = DIGITS.indexOf(ch);
      value += (digit & 31) * 2 ** shift;
      if (digit >= 32) { shift += 5; continue; }
      values.push(value); value = 0; shift = 0;
    }
    const ids = [];
    let previous = -1;
    for (let k = 0; k < values.length; k++) {
      const v = values[k];
      if (zigzag) { previous += v % 2 === 0 ? v / 2 : -(v + 1) / 2; ids.push(previous); }
      else if (v === 0) { for (let j = 0; j < values[k + 1]; j++) ids.push(++previous); k++; }
      else { previous += v; ids.push(previous); }
    }
    return ids;
  }
  D.runs.forEach((run) => { run.testAt = new Map(run.test.map((t) => [t.step, t])); });

  // --- curves -------------------------------------------------------------------------------
  const W = 360, H = 190, M = { l: 38, r: 8, t: 8, b: 24 };
  const cursors = [];
  function chart(title, series, yMax) {
    const top = yMax !== undefined ? yMax : Math.max(1, ...series.flatMap((s) => s.ys.filter((y) => y !== null)));
    const x = (v) => M.l + (maxStep ? v / maxStep : 0) * (W - M.l - M.r);
    const y = (v) => H - M.b - (v / top) * (H - M.t - M.b);
    const ns = "http://www.w3.org/2000/svg";
    const svg = document.createElementNS(ns, "svg");
    svg.setAttribute("width", W); svg.setAttribute("height", H);
    const add = (tag, attrs, text) => {
      const n = document.createElementNS(ns, tag);
      for (const [k, v] of Object.entries(attrs)) n.setAttribute(k, v);
      if (text !== undefined) n.textContent = text;
      svg.append(n); return n;
    };
    add("line", { x1: M.l, y1: H - M.b, x2: W - M.r, y2: H - M.b, stroke: "#999" });
    add("line", { x1: M.l, y1: M.t, x2: M.l, y2: H - M.b, stroke: "#999" });
    for (const v of [0, top / 2, top]) {
      add("text", { x: M.l - 4, y: y(v) + 3, "text-anchor": "end" }, top > 2 ? Math.round(v) : v.toFixed(1));
      add("line", { x1: M.l, y1: y(v), x2: W - M.r, y2: y(v), stroke: "#eee" });
    }
    add("text", { x: M.l, y: H - 8 }, "0");
    add("text", { x: W - M.r, y: H - 8, "text-anchor": "end" }, `step ${maxStep}`);
    for (const s of series) {
      const pts = s.xs.map((v, i) => (s.ys[i] === null ? null : `${x(v).toFixed(1)},${y(s.ys[i]).toFixed(1)}`))
                      .filter((p) => p !== null);
      if (!pts.length) continue;
      add("polyline", { points: pts.join(" "), fill: "none", stroke: s.color, "stroke-width": 1.5,
                        class: s.reference ? "series reference" : "series", "data-run": s.run,
                        ...(s.reference ? { "stroke-dasharray": "6 3" } : {}) });
      if (s.reference) continue; // a reference line has no points of its own
      if (pts.length <= 40) for (const p of pts) {
        const [cx, cy] = p.split(",");
        add("circle", { cx, cy, r: 2.5, fill: s.color });
      }
    }
    const cursor = add("line", { x1: x(0), x2: x(0), y1: M.t, y2: H - M.b, class: "cursor" });
    cursors.push({ cursor, x });
    svg.addEventListener("click", (e) => {
      const box = svg.getBoundingClientRect();
      const v = ((e.clientX - box.left - M.l) / (W - M.l - M.r)) * maxStep;
      setStep(Math.round(Math.min(Math.max(v, 0), maxStep)));
    });
    return el("div", { class: "chart" }, el("h3", {}, title), svg);
  }
  function drawCurves() {
    const box = document.getElementById("charts");
    const runs = D.runs.map((run, i) => ({ run, i }));
    const curve = (name) => runs.filter(({ run }) => run.curves.step)
      .map(({ run, i }) => ({ xs: run.curves.step, ys: run.curves[name], color: color(i), run: i }));
    const widest = D.runs.filter((r) => r.curves.window).reduce((a, r) => (a && a.curves.window >= r.curves.window ? a : r), null);
    const win = widest ? widest.curves.window_note : "no training steps";
    // a zero-shot run (one test, no training steps): a dashed reference line on the test accuracy chart only
    const zero = runs.filter(({ run }) => run.mode === "zero_shot" && run.test.length)
      .map(({ run, i }) => ({ xs: [0, maxStep], ys: [1, 1].map(() => run.test[run.test.length - 1].accuracy),
                              color: color(i), run: i, reference: true }));
    box.append(chart("test accuracy", runs.filter(({ run }) => run.mode !== "zero_shot")
      .map(({ run, i }) => ({ xs: run.test.map((t) => t.step), ys: run.test.map((t) => t.accuracy), color: color(i),
                              run: i })).concat(zero), 1));
    box.append(chart(`training accuracy (${win})`, curve("accuracy"), 1));
    box.append(chart(`reward rate (${win})`, curve("reward_rate"), 1));
    box.append(chart(`prediction entropy / log2(labels) (${win})`, curve("entropy_norm"), 1));
    box.append(chart(`frequency bias (prediction = top context label; ${win})`, curve("frequency_bias"), 1));
    box.append(chart("history frequency bias (prediction = top label so far)", curve("history_frequency_bias"), 1));
    box.append(chart("cumulative regret", curve("cumulative_regret")));
  }

  // --- runs ---------------------------------------------------------------------------------
  function drawRuns() {
    const box = document.getElementById("runs");
    D.runs.forEach((run, i) => {
      const box_ = el("input", { type: "checkbox", "data-run": i, onchange: (e) => {
        selected = D.runs.map((_, j) => j).filter((j) => j === i ? e.target.checked : selected.includes(j));
        render(); runSearch();
      } });
      box_.checked = selected.includes(i);
      box.append(el("label", { title: run.run_id }, box_, el("span", { class: "swatch", style: `background:${color(i)}` }),
        `${run.label} · ${run.model} / ${run.task}${run.seed !== null ? " · seed " + run.seed : ""}`,
        run.finished ? "" : el("span", { class: "damage" }, " (unfinished or damaged)")));
    });
  }

  // --- step browser -------------------------------------------------------------------------
  function contextTable(run, ids) {
    const icl = run.mode === "icl";
    const rows = ids.map((j) => el("tr", {},
      el("td", {}, el("span", { class: "steplink", onclick: () => setStep(j) }, j)),
      el("td", { title: S[run.train.prompt[j]] }, S[run.train.prompt[j]]),
      el("td", {}, icl ? S[run.train.answer[j]] : (run.train.prediction[j] < 0 ? "–" : S[run.train.prediction[j]])),
      el("td", {}, icl ? el("span", { class: "muted" }, "gold") : rewardMark(run.train.reward[j]))));
    return el("table", { class: "context" }, el("thead", {}, el("tr", {}, el("th", {}, "step"), el("th", {}, "input"),
      el("th", {}, icl ? "answer shown" : "prediction"), el("th", {}, "reward"))), el("tbody", {}, ...rows));
  }
  function testBlock(run, record) {
    const answers = run.test_set.answer, prompts = run.test_set.prompt;
    const perClass = new Map();
    answers.forEach((a, k) => {
      const c = perClass.get(a) || { right: 0, n: 0 };
      c.n += 1; c.right += record.prediction[k] === a ? 1 : 0; perClass.set(a, c);
    });
    const classes = [...perClass.entries()].sort((p, q) => S[p[0]].localeCompare(S[q[0]]));
    const classRows = classes.map(([a, c]) => el("tr", {}, el("td", {}, S[a]), el("td", {}, fmt(c.right / c.n)),
                                                   el("td", {}, c.n)));
    const own = record.contexts; // a query-aware strategy: each test input's own context (training steps)
    const contextCell = (k) => {
      const ids = decodeContext(own[k]);
      return el("td", { class: "own-context" }, ...(ids.length ? ids.flatMap((j, n) =>
        [n ? ", " : "", el("span", { class: "steplink", onclick: () => setStep(j) }, j)]) : [el("span", { class: "muted" }, "empty")]));
    };
    const reasoned = record.reasoning; // --reasoning: what the model wrote before each test answer
    const predRows = record.prediction.map((p, k) => el("tr", {}, el("td", {}, k), el("td", {}, S[prompts[k]] || ""),
      el("td", {}, S[answers[k]] || ""), el("td", {}, S[p]),
      p === answers[k] ? el("td", { class: "good" }, "✓") : el("td", { class: "bad" }, "✗"),
      ...(own ? [contextCell(k)] : []), ...(reasoned ? [el("td", { class: "test-reasoning" }, S[reasoned[k]])] : [])));
    return el("div", { class: "test" },
      el("h4", {}, `Test at step ${record.step}: accuracy ${fmt(record.accuracy)} on ${record.prediction.length} items`),
      el("table", { class: "per-class" }, el("thead", {}, el("tr", {}, el("th", {}, "gold label"),
        el("th", {}, "accuracy"), el("th", {}, "items"))), el("tbody", {}, ...classRows)),
      el("details", { class: "test-predictions" }, el("summary", {}, "test predictions"),
        el("table", {}, el("thead", {}, el("tr", {}, el("th", {}, "#"), el("th", {}, "input"), el("th", {}, "answer"),
          el("th", {}, "prediction"), el("th", {}, ""), ...(own ? [el("th", {}, "its context (steps)")] : []),
          ...(reasoned ? [el("th", {}, "reasoning")] : []))),
          el("tbody", {}, ...predRows))));
  }
  // the methods beyond the paper: reasoning, a written guide, a judge's verdict, pruned episodes
  function beyondBlocks(run, k) {
    const t = run.train, out = [];
    if (t.verdict && t.verdict[k] !== null) {
      out.push(el("div", { class: "kv judge" }, el("span", {}, "judge said: ", el("b", {}, t.verdict[k])),
        el("span", { class: "muted" }, `(the reward shown; gold: ${t.correct[k] === 1 ? "right" : "wrong"})`)));
    }
    if (t.reasoning && t.reasoning[k] >= 0) {
      out.push(el("details", { class: "reasoning", open: "" },
        el("summary", {}, `reasoning before the answer (${t.reasoning_tokens[k]} tokens)`),
        el("pre", {}, S[t.reasoning[k]])));
    }
    if (t.guide) {
      let at = -1;
      for (let j = Math.min(k, t.guide.length - 1); j >= 0; j--) if (t.guide[j] >= 0) { at = j; break; }
      out.push(at < 0 ? el("div", { class: "guide muted" }, "no guide written yet")
        : el("details", { class: "guide", open: "" }, el("summary", {}, `guide in the prompt (written at step ${at})`),
            el("pre", {}, S[t.guide[at]])));
    }
    const preamble = preambleAt(t, k);
    if (preamble) {
      out.push(el("details", { class: "preamble", open: "" },
        el("summary", {}, "in the prompt before the episodes (the strategy's text)"), el("pre", {}, preamble)));
    }
    if (t.pruned && t.pruned[k]) {
      const ids = decodeContext(t.pruned[k]);
      if (ids.length) out.push(el("div", { class: "pruned" }, "no longer retrieved from this step: ",
        ...ids.flatMap((j, n) => [n ? ", " : "", el("span", { class: "steplink", onclick: () => setStep(j) }, j)])));
    }
    return out;
  }
  // the text a strategy put before the episodes at step k (a summary): each step holds the lines
  // that changed from the step before (icrl/viewer/data.py, encode_preambles)
  function preambleAt(t, k) {
    if (!t.preamble || k >= t.preamble.length) return "";
    let lines = [];
    for (let j = 0; j <= k; j++) {
      const p = t.preamble[j];
      lines = lines.slice(0, p[0]);
      while (lines.length < p[0]) lines.push("");
      for (let i = 1; i < p.length; i += 2) lines[p[i]] = S[p[i + 1]];
    }
    return lines.join("\n");
  }
  function failureLine(run) {
    const f = run.failures || {};
    if (f.greediness === undefined) return null;
    const parts = [`labels never predicted: ${fmt(f.greediness)}`, `history frequency bias: ${fmt(f.history_frequency_bias)}`,
      f.collapse_step === null ? "no collapse" : `collapsed at step ${f.collapse_step}${f.early_collapse ? " (early)" : ""}`];
    if (f.reasoning_steps) parts.push(`knowing-doing gap: ${fmt(f.knowing_doing_gap)}`);
    return el("div", { class: "failures muted" }, parts.join(" · "));
  }
  function column(i) {
    const run = D.runs[i], t = run.train, n = t.prompt.length;
    const col = el("div", { class: "run-column", "data-run": i },
      el("h3", {}, el("span", { class: "swatch", style: `background:${color(i)}` }), run.label, " · ", `${run.model} / ${run.task}`),
      el("div", { class: "run-id" }, run.run_id), failureLine(run));
    if (step < n) {
      const ids = decodeContext(t.context[step]);
      col.append(el("div", { class: "episode" },
        el("h4", {}, `Step ${step} of ${n}`),
        el("pre", { class: "input" }, S[t.prompt[step]]),
        el("div", { class: "kv" }, el("span", {}, "answer: ", el("b", { class: "answer" }, S[t.answer[step]])),
          el("span", {}, "prediction: ", el("b", { class: "prediction" }, t.prediction[step] < 0 ? "– (supervised ICL)" : S[t.prediction[step]])),
          el("span", { class: "reward" }, "reward: ", rewardMark(t.reward[step]))),
        ...beyondBlocks(run, step),
        el("h4", {}, `Context: ${ids.length} episode${ids.length === 1 ? "" : "s"}`),
        ids.length ? contextTable(run, ids)
          : el("div", { class: "muted" }, preambleAt(t, step) ? "no episodes: the text above is all the context"
            : "empty context")));
    } else if (!run.testAt.has(step)) {
      col.append(el("div", { class: "muted" }, n ? `this run has ${n} training steps` : "no training steps (zero-shot)"));
    }
    if (run.testAt.has(step)) col.append(testBlock(run, run.testAt.get(step)));
    return col;
  }
  function render() {
    document.getElementById("step-slider").value = step;
    document.getElementById("step-input").value = step;
    for (const { cursor, x } of cursors) { cursor.setAttribute("x1", x(step)); cursor.setAttribute("x2", x(step)); }
    const box = document.getElementById("columns");
    box.replaceChildren(...(selected.length ? selected.map(column) : [el("div", { class: "muted" }, "no run selected")]));
  }
  function setStep(t) {
    const v = Math.min(Math.max(Number.isFinite(t) ? t : 0, 0), maxStep);
    if (v !== step || !document.getElementById("columns").childElementCount) { step = v; render(); }
  }
  function nextTest(direction) {
    const steps = [...new Set(selected.flatMap((i) => D.runs[i].test.map((r) => r.step)))].sort((a, b) => a - b);
    const found = direction > 0 ? steps.find((s) => s > step) : steps.reverse().find((s) => s < step);
    if (found !== undefined) setStep(found);
  }

  // --- search -------------------------------------------------------------------------------
  function runSearch() {
    const q = document.getElementById("search").value.trim().toLowerCase();
    const out = document.getElementById("search-results");
    out.replaceChildren();
    if (!q) return;
    if (!lower) lower = S.map((s) => s.toLowerCase());
    const hits = [];
    let count = 0;
    for (const i of selected) {
      const t = D.runs[i].train;
      for (let k = 0; k < t.prompt.length; k++) {
        if (lower[t.prompt[k]].includes(q) || lower[t.answer[k]] === q || (t.prediction[k] >= 0 && lower[t.prediction[k]] === q)) {
          count += 1;
          if (hits.length < 200) hits.push([i, k]);
        }
      }
    }
    out.append(el("div", { class: "muted count" }, `${count} matching step${count === 1 ? "" : "s"} (input text, or exact answer or prediction)`));
    for (const [i, k] of hits) {
      const t = D.runs[i].train;
      out.append(el("div", { class: "hit", "data-step": k, onclick: () => setStep(k) },
        el("span", { class: "swatch", style: `background:${color(i)}` }), `step ${k}: `,
        S[t.prompt[k]].slice(0, 120), ` → ${t.prediction[k] < 0 ? "–" : S[t.prediction[k]]} (${S[t.answer[k]]})`));
    }
  }

  function init() {
    document.getElementById("source").textContent = `${D.runs.length} run${D.runs.length === 1 ? "" : "s"} from ${D.source}`;
    drawRuns();
    drawCurves();
    const slider = document.getElementById("step-slider");
    slider.max = maxStep;
    slider.addEventListener("input", () => setStep(parseInt(slider.value, 10)));
    const input = document.getElementById("step-input");
    input.max = maxStep;
    input.addEventListener("change", () => setStep(parseInt(input.value, 10)));
    document.getElementById("prev").addEventListener("click", () => setStep(step - 1));
    document.getElementById("next").addEventListener("click", () => setStep(step + 1));
    document.getElementById("prev-test").addEventListener("click", () => nextTest(-1));
    document.getElementById("next-test").addEventListener("click", () => nextTest(1));
    let timer = null;
    document.getElementById("search").addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(runSearch, 150); });
    render();
    window.viewerReadyMs = performance.now();
    document.body.dataset.ready = "1";
  }
  init();
})();
