// rcb-env report: leaderboard, plots (SVG), pass matrix, episode list and viewer.
// Everything this page shows is in the page: nothing is fetched.
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("rcb-data").textContent);
  const SVG = "http://www.w3.org/2000/svg";
  const $ = (id) => document.getElementById(id);
  const runs = D.runs;
  const palette = (i) => `hsl(${(i * 137.508) % 360}, 55%, ${i % 2 ? 42 : 52}%)`;
  const colour = runs.map((_, i) => palette(i));

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined || v === false) continue;
      if (k === "class") node.className = v;
      else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
      else node.setAttribute(k, v === true ? "" : v);
    }
    for (const c of children.flat()) {
      if (c === null || c === undefined) continue;
      node.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return node;
  }
  function sv(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  const fmt = (x, d = 2) => (x === null || x === undefined ? "–" : Number(x).toFixed(d));
  const pm = (r, key) => (r ? fmt(r[key]) + (runsHaveSamples() ? " ± " + fmt(r[key + "_std"]) : "") : "–");
  function runsHaveSamples() { return runs.some((r) => r.samples > 1); }

  // ---- leaderboard -------------------------------------------------------------------------
  const ci = (r, key) => (r && r[key] ? `[${fmt(r[key][0])}, ${fmt(r[key][1])}]` : "–");
  const tied = (r) => r.neighbours.filter((n) => n.tied).map((n) => "#" + runs[n.run].rank).join(", ");
  // the leaderboard's rates: the runnable set, or (switched) the named subset's snippets
  let onSubset = false;
  const rated = (r) => (onSubset ? r.subset : r.runnable);
  const columns = [
    ["run", (r) => r.id, "text"],
    ["agent", (r) => r.label, "text"],
    [() => (onSubset ? `scaled % (${D.subset.name})` : "scaled % (runnable)"), (r) => rated(r) && rated(r).scaled, "scaled", (r) => pm(rated(r), "scaled")],
    ["scaled 95% CI", (r) => rated(r) && rated(r).scaled_ci && rated(r).scaled_ci[0], "ci scaled-ci", (r) => ci(rated(r), "scaled_ci")],
    ["rank", (r) => r.rank, "rank"],
    ["tied with", (r) => tied(r), "text tied", (r) => (tied(r) ? "≈ " + tied(r) : "")],
    [() => (onSubset ? `plain % (${D.subset.name})` : "plain % (runnable)"), (r) => rated(r) && rated(r).plain, "plain", (r) => pm(rated(r), "plain")],
    ["plain 95% CI", (r) => rated(r) && rated(r).plain_ci && rated(r).plain_ci[0], "ci plain-ci", (r) => ci(rated(r), "plain_ci")],
    ["scaled % (full)", (r) => r.full && r.full.scaled, "full-scaled", (r) => fmt(r.full && r.full.scaled)],
    ["plain % (full)", (r) => r.full && r.full.plain, "full-plain", (r) => fmt(r.full && r.full.plain)],
    ["snippets", (r) => rated(r) && rated(r).snippets, "snippets", (r) => (rated(r) ? rated(r).snippets : "–") + (r.full_snippets ? " / " + r.full_snippets : "")],
    ["samples", (r) => r.samples, "samples"],
    ["tokens", (r) => r.tokens, "tokens"],
    ["cost $", (r) => r.cost, "cost", (r) => fmt(r.cost, 4)],
    ["steps", (r) => r.mean_steps, "steps", (r) => fmt(r.mean_steps, 1)],
    ["wall s", (r) => r.wall_s, "wall", (r) => fmt(r.wall_s, 1)],
    ["infra", (r) => r.infra_errors, "infra"],
    ["budgets", (r) => JSON.stringify(r.budgets || {}), "text budgets", (r) => budgets(r.budgets)],
  ];
  function budgets(b) {
    if (!b) return "published";
    return ["max_steps", "max_wall_s", "max_tokens", "max_cost"]
      .filter((k) => b[k] !== null && b[k] !== undefined)
      .map((k) => `${k.replace("max_", "")} ${b[k]}`).join(", ") || "none";
  }
  let sortBy = 2, ascending = false;
  function renderBoard() {
    const thead = $("leaderboard").tHead, tbody = $("leaderboard").tBodies[0];
    thead.replaceChildren(el("tr", {}, columns.map(([name, , cls], i) =>
      el("th", { class: `${cls.split(" ")[0] === "text" ? "text " : ""}${i === sortBy ? "sorted" + (ascending ? " asc" : "") : ""}`,
        onclick: () => { ascending = sortBy === i ? !ascending : false; sortBy = i; renderBoard(); } }, typeof name === "function" ? name() : name))));
    const key = columns[sortBy][1];
    const order = runs.map((r, i) => i).sort((a, b) => {
      const x = key(runs[a]), y = key(runs[b]);
      if (x === y) return a - b;
      if (x === null || x === undefined) return 1;
      if (y === null || y === undefined) return -1;
      return (x < y ? -1 : 1) * (ascending ? 1 : -1);
    });
    tbody.replaceChildren(...order.map((i) => {
      const r = runs[i];
      const cls = [r.kind, r.comparable ? "" : "not-comparable"].join(" ");
      return el("tr", { class: cls, "data-run": i }, columns.map(([, value, c, show], j) => {
        const text = show ? show(r) : value(r);
        const cell = el("td", { class: c }, text === null || text === undefined ? "–" : text);
        if (c.startsWith("text tied") && r.neighbours.length) {
          cell.title = r.neighbours.map((n) => `#${runs[n.run].rank} ${runs[n.run].id}: ${n.difference >= 0 ? "+" : ""}${fmt(n.difference)} points, p = ${fmt(n.p, 4)}${n.tied ? " (tied)" : ""}`).join("\n");
        }
        if (j === 1) {
          cell.prepend(el("i", { style: `display:inline-block;width:10px;height:10px;margin-right:6px;background:${colour[i]}` }));
          if (r.kind === "published") cell.append(el("span", { class: "badge" }, "published"));
          if (!r.comparable) cell.append(el("span", { class: "badge warn", title: r.not_comparable_because }, "not comparable: " + r.not_comparable_because));
        }
        return cell;
      }));
    }));
    const pub = runs.filter((r) => r.kind === "published").length;
    $("board-note").textContent =
      "Scaled = 100·Σ(L·p)/ΣL, plain = 100·Σp/n (mean ± population std over samples). " +
      "Runnable: the snippets that ran here; full: the whole benchmark (what could not run counts as not passed). " +
      `95% CI: paper-clustered bootstrap (${D.bootstrap.resamples} resamples, seed ${D.bootstrap.seed}). ` +
      "Rank: by scaled rate; tied with: the rank of a neighbour in that ranking from which the run does not differ at the 5% level (paired by snippet, two-sided bootstrap p ≥ 0.05; hover for the difference and p). " +
      (pub ? `${pub} published row(s): the paper's results (greedy, one sample), their runnable rate on the snippets run here. ` : "") +
      (onSubset ? `Rates on the ${D.subset.name} subset: ${D.subset.criteria} (${D.subset.snippets} snippets); intervals and ranks are the runnable set's. ` : "") +
      "Click a header to sort.";
  }
  if (D.subset) {
    const box = el("input", { type: "checkbox", id: "board-subset", onchange: (ev) => { onSubset = ev.target.checked; renderBoard(); } });
    $("board-note").before(el("label", { class: "note" }, box, ` ${D.subset.name} subset only`));
  }

  // ---- plots -------------------------------------------------------------------------------
  function legend() {
    $("legend").replaceChildren(...runs.map((r, i) => el("span", {}, el("i", { style: `background:${colour[i]}` }), r.label)));
  }
  function axes(svg, w, h, m, ymax, ylabel, xticks) {
    const g = sv("g", { class: "axis" });
    g.append(sv("line", { x1: m.l, y1: h - m.b, x2: w - m.r, y2: h - m.b }));
    g.append(sv("line", { x1: m.l, y1: m.t, x2: m.l, y2: h - m.b }));
    for (let v = 0; v <= ymax + 1e-9; v += ymax / 4) {
      const y = h - m.b - (v / ymax) * (h - m.t - m.b);
      g.append(sv("line", { x1: m.l - 4, y1: y, x2: m.l, y2: y }));
      g.append(sv("text", { x: m.l - 6, y: y + 4, "text-anchor": "end" }, ymax >= 10 ? v.toFixed(0) : v.toFixed(2)));
    }
    g.append(sv("text", { x: 12, y: m.t - 6 }, ylabel));
    for (const [x, label] of xticks || []) g.append(sv("text", { x, y: h - m.b + 14, "text-anchor": "middle" }, label));
    svg.append(g);
  }
  function plotPapers() {
    const svg = $("plot-papers");
    const papers = D.papers.length ? D.papers : [...new Set(runs.flatMap((r) => Object.keys(r.per_paper)))];
    const group = Math.max(24, runs.length * 8 + 10), m = { l: 40, r: 10, t: 18, b: 90 };
    const w = Math.max(640, m.l + m.r + papers.length * group), h = 300;
    svg.setAttribute("width", w); svg.setAttribute("height", h); svg.replaceChildren();
    axes(svg, w, h, m, 100, "%");
    const bw = (group - 10) / runs.length;
    papers.forEach((p, pi) => {
      const x0 = m.l + pi * group + 5;
      runs.forEach((r, ri) => {
        const v = r.per_paper[p];
        if (v === undefined) return;
        const bh = (v / 100) * (h - m.t - m.b);
        const bar = sv("rect", { class: "bar", x: x0 + ri * bw, y: h - m.b - bh, width: Math.max(1, bw - 1), height: Math.max(0.5, bh), fill: colour[ri], "data-run": ri, "data-paper": p });
        const band = r.per_paper_ci && r.per_paper_ci[p];
        bar.append(sv("title", {}, `${r.label} · ${p}: ${v.toFixed(2)}%` + (band ? ` [95% CI ${band[0].toFixed(2)}, ${band[1].toFixed(2)}]` : "")));
        svg.append(bar);
      });
      svg.append(sv("text", { x: x0 + group / 2 - 5, y: h - m.b + 8, transform: `rotate(45 ${x0 + group / 2 - 5} ${h - m.b + 8})` }, p));
    });
  }
  const BINS = [[1, 1, "1"], [2, 3, "2–3"], [4, 7, "4–7"], [8, 15, "8–15"], [16, 1e9, "16+"]];
  function plotLength() {
    const svg = $("plot-length"), w = 420, h = 260, m = { l: 40, r: 14, t: 18, b: 30 };
    svg.setAttribute("width", w); svg.setAttribute("height", h); svg.replaceChildren();
    const step = (w - m.l - m.r) / BINS.length;
    axes(svg, w, h, m, 100, "% passed", BINS.map((b, i) => [m.l + step * (i + 0.5), b[2]]));
    runs.forEach((r, ri) => {
      const pts = [];
      BINS.forEach((b, bi) => {
        const cs = D.cells.filter((c) => c.run === ri && c.outcome !== "infra" && c.weight >= b[0] && c.weight <= b[1]);
        if (!cs.length) return;
        const rate = (100 * cs.filter((c) => c.outcome === "passed").length) / cs.length;
        pts.push([m.l + step * (bi + 0.5), h - m.b - (rate / 100) * (h - m.t - m.b), rate, b[2], cs.length]);
      });
      if (pts.length > 1) svg.append(sv("polyline", { points: pts.map((p) => p[0] + "," + p[1]).join(" "), fill: "none", stroke: colour[ri], "stroke-width": 1.5 }));
      for (const p of pts) {
        const dot = sv("circle", { class: "pt", cx: p[0], cy: p[1], r: 3.5, fill: colour[ri], "data-run": ri });
        dot.append(sv("title", {}, `${r.label} · ${p[3]} lines: ${p[2].toFixed(1)}% of ${p[4]}`));
        svg.append(dot);
      }
    });
  }
  function plotCost() {
    const svg = $("plot-cost"), w = 420, h = 260, m = { l: 40, r: 14, t: 18, b: 30 };
    svg.setAttribute("width", w); svg.setAttribute("height", h); svg.replaceChildren();
    const shown = runs.map((r, i) => [r, i]).filter(([r]) => r.kind === "local" && r.runnable);
    const cmax = Math.max(1e-6, ...shown.map(([r]) => r.cost)) * 1.1;
    const ticks = [0, 0.5, 1].map((f) => [m.l + f * (w - m.l - m.r), "$" + (f * cmax).toFixed(cmax < 1 ? 3 : 2)]);
    axes(svg, w, h, m, 100, "scaled %", ticks);
    for (const [r, i] of shown) {
      const x = m.l + (r.cost / cmax) * (w - m.l - m.r), y = h - m.b - (r.runnable.scaled / 100) * (h - m.t - m.b);
      const dot = sv("circle", { class: "dot", cx: x, cy: y, r: 5, fill: colour[i], "data-run": i });
      dot.append(sv("title", {}, `${r.label}: ${r.runnable.scaled.toFixed(2)}% for $${r.cost.toFixed(4)}`));
      svg.append(dot);
    }
  }

  // ---- matrix ------------------------------------------------------------------------------
  const byCell = new Map();
  for (const c of D.cells) {
    const k = c.run + "|" + c.snippet;
    if (!byCell.has(k)) byCell.set(k, []);
    byCell.get(k).push(c);
  }
  function plotMatrix() {
    const svg = $("matrix"), cw = 16, ch = 14, labelW = 300, top = 110;
    const rows = [];
    let last = null;
    for (const s of D.snippets) {
      if (s.paper !== last) { rows.push({ paper: s.paper }); last = s.paper; }
      rows.push({ snippet: s });
    }
    const w = labelW + runs.length * cw + 20, h = top + rows.length * ch + 10;
    svg.setAttribute("width", w); svg.setAttribute("height", h); svg.replaceChildren();
    runs.forEach((r, ri) => {
      const x = labelW + ri * cw + cw / 2;
      const t = sv("text", { x, y: top - 6, transform: `rotate(-60 ${x} ${top - 6})`, fill: colour[ri] }, r.label.slice(0, 28));
      svg.append(t);
    });
    rows.forEach((row, yi) => {
      const y = top + yi * ch;
      if (row.paper) {
        svg.append(sv("text", { x: 4, y: y + ch - 3, "font-weight": "bold" }, row.paper));
        return;
      }
      const s = row.snippet;
      svg.append(sv("text", { x: 14 + 10 * (s.depth || 0), y: y + ch - 3 }, `${s.name}${s.weight ? " (" + s.weight + ")" : ""}`));
      runs.forEach((r, ri) => {
        const cs = byCell.get(ri + "|" + s.id) || [];
        const passed = cs.filter((c) => c.outcome === "passed").length;
        let cls = "none";
        if (cs.length) cls = cs.every((c) => c.outcome === "infra") ? "infra" : passed === cs.length ? "passed" : passed ? "partial" : "failed";
        const target = cs.find((c) => c.outcome !== "passed") || cs[0];
        const rect = sv("rect", { class: "cell " + cls, x: labelW + ri * cw, y, width: cw, height: ch, "data-run": ri, "data-snippet": s.id });
        if (target && target.episode !== null) rect.setAttribute("data-episode", target.episode);
        rect.append(sv("title", {}, `${r.label} · ${s.id}: ${cs.length ? passed + "/" + cs.length + " passed" : "no result"}`));
        if (target && target.episode !== null) rect.addEventListener("click", () => openEpisode(target.episode));
        svg.append(rect);
      });
    });
  }

  // ---- item view ---------------------------------------------------------------------------
  const strengthOf = {};
  for (const s of D.snippets) if (s.strength) strengthOf[s.id] = s.strength;
  function strengthText(t) {
    return t && t.score !== null && t.score !== undefined ? `${fmt(100 * t.score, 0)}% (${t.killed}/${t.killed + t.survived} killed)` : "–";
  }
  function strengthBox(id) {
    const t = strengthOf[id];
    if (!t) return null;
    const parts = [el("p", { class: "strength" }, `Test strength: mutation score ${strengthText(t)}.`)];
    if (t.survivor) parts.push(el("p", {}, `A mutant the test let through (${t.survivor.operator}: ${t.survivor.description}${t.survivor.kind ? "; " + t.survivor.kind : ""}):`), diff(t.survivor.diff));
    return el("div", { class: "strength-box" }, parts);
  }
  function renderItems() {
    const items = D.items || [];
    const count = (k) => items.filter((x) => x.kind === k).length;
    $("items-note").textContent = `${items.length} snippets, sorted by their solve rate: the mean over every run and published model that scored the snippet of its pass rate on it (a difficulty estimate). ` +
      `Everybody solves ${count("everybody")}, nobody solves ${count("nobody")}, ${count("separates")} separate the runs.`;
    $("items").tBodies[0].replaceChildren(...items.map((x) => el("tr", { class: "item " + x.kind, "data-snippet": x.snippet },
      el("td", { class: "text" }, x.snippet), el("td", {}, x.weight ?? "–"),
      el("td", { class: "solve" }, fmt(x.solve_rate, 1), el("i", { class: "meter", style: `width:${Math.round(x.solve_rate * 0.6)}px` })),
      el("td", {}, `${x.solved_by} / ${x.runs}`), el("td", { class: "text" }, x.kind === "separates" ? "separates runs" : x.kind + " solves it"),
      el("td", { class: "text mutation" }, strengthOf[x.snippet] ? el("details", {}, el("summary", {}, strengthText(strengthOf[x.snippet])), strengthBox(x.snippet)) : "–"))));
  }

  // ---- episode list ------------------------------------------------------------------------
  const E = D.episode_index;
  function fillFilters() {
    for (const p of D.papers) $("f-paper").append(el("option", { value: p }, p));
    runs.forEach((r, i) => { if (r.kind === "local") $("f-run").append(el("option", { value: i }, `${r.id} · ${r.label}`)); });
    for (const id of ["f-paper", "f-outcome", "f-run"]) $(id).addEventListener("change", renderList);
    $("f-search").addEventListener("input", renderList);
  }
  function renderList() {
    const paper = $("f-paper").value, outcome = $("f-outcome").value, run = $("f-run").value;
    const q = $("f-search").value.trim().toLowerCase();
    const rows = [];
    E.forEach((e, i) => {
      if (paper && !e.snippet.startsWith(paper + "/")) return;
      if (outcome === "truncated" ? e.status !== "truncated" : outcome && e.outcome !== outcome) return;
      if (run !== "" && String(e.run) !== run) return;
      if (q && !e.text.includes(q)) return;
      rows.push(i);
    });
    const shown = rows.slice(0, 500);
    $("episode-list").tBodies[0].replaceChildren(...shown.map((i) => {
      const e = E[i];
      return el("tr", { "data-episode": i, onclick: () => openEpisode(i) },
        el("td", { class: "text" }, runs[e.run].label), el("td", { class: "text" }, e.snippet), el("td", {}, e.sample),
        el("td", { class: "outcome " + e.outcome }, e.status === "truncated" ? e.outcome + " (truncated)" : e.outcome),
        el("td", {}, fmt(e.reward, 1)), el("td", {}, e.steps), el("td", {}, e.tokens));
    }));
    $("ep-count").textContent = `${rows.length} of ${E.length} episodes` + (rows.length > shown.length ? ` (first ${shown.length} listed; narrow the filters)` : "");
  }

  // ---- viewer ------------------------------------------------------------------------------
  async function unpack(id) {
    const text = document.getElementById(id).textContent;
    const bytes = Uint8Array.from(atob(text), (c) => c.charCodeAt(0));
    const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
    return JSON.parse(await new Response(stream).text());
  }
  function fold(text, summary, open) {
    if (!text) return el("pre", {}, "(empty)");
    if (text.length < 600 && !summary) return el("pre", {}, text);
    return el("details", { open: open || null }, el("summary", {}, summary || `${text.split("\n").length} lines, ${text.length} characters`), el("pre", {}, text));
  }
  function diff(text) {
    const pre = el("pre", { class: "diff" });
    for (const line of (text || "").split("\n")) {
      const cls = line.startsWith("+++") || line.startsWith("---") ? "" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : line.startsWith("@@") ? "hunk" : "";
      pre.append(el("span", { class: cls || null }, line + "\n"));
    }
    return pre;
  }
  function editDiff(action) {
    let a;
    try { a = JSON.parse(action); } catch (err) { return null; }
    if (a.tool === "replace_in_file") {
      const lines = [`--- ${a.path}`, `+++ ${a.path}`, ...String(a.old || "").split("\n").map((l) => "-" + l), ...String(a.new || "").split("\n").map((l) => "+" + l)];
      return diff(lines.join("\n"));
    }
    if (a.tool === "write_file") return diff([`+++ ${a.path}`, ...String(a.content || "").split("\n").map((l) => "+" + l)].join("\n"));
    return null;
  }
  let openId = null;
  async function openEpisode(i) {
    openId = i;
    const meta = E[i];
    $("viewer").hidden = false;
    $("viewer-title").textContent = `${runs[meta.run].label} · ${meta.snippet} · sample ${meta.sample}`;
    $("viewer-body").replaceChildren(el("p", {}, "loading…"));
    const ep = await unpack("ep-" + i);
    if (openId !== i) return;
    const statement = await unpack("st-" + ep.statement);
    const body = [];
    const g = ep.grade;
    const ours = ep.status === "infra_error" ? ["infra", "not scored"] : ep.passed ? ["pass", "passed"] : ["fail", "failed"];
    body.push(el("p", { id: "verdict" },
      el("span", { class: "verdict " + ours[0] }, "ours: " + ours[1]),
      g ? el("span", { class: "verdict " + (g.official_pass ? "pass" : "fail") }, "official rule: " + (g.official_pass ? "pass" : "fail")) : null,
      ` reward ${fmt(ep.reward, 1)} of weight ${ep.weight} · ${ep.status} (${ep.reason})`));
    body.push(el("table", { class: "kv" }, [
      ["episode", ep.episode_id], ["agent", JSON.stringify(ep.agent)], ["tokens", ep.tokens], ["cost $", fmt(ep.cost, 4)],
      ["duration s", fmt(ep.duration_s, 1)], ["node", ep.node || "–"], ["attempt", ep.attempt],
    ].map(([k, v]) => el("tr", {}, el("td", {}, k), el("td", { class: "text" }, v)))));
    if (ep.infra_error) {
      body.push(el("div", { class: "infra-box", id: "infra" }, el("b", {}, `infrastructure error at stage ${ep.infra_error.stage}: `), `${ep.infra_error.type}: ${ep.infra_error.message}`));
    }
    const tested = strengthBox(meta.snippet);
    if (tested) body.push(el("h3", {}, "Test strength"), tested);
    body.push(el("h3", {}, "Task statement"), fold(statement, "the statement the agent saw (with the paper)"));
    body.push(el("h3", {}, `Steps (${ep.steps.length})`));
    for (const s of ep.steps) {
      const edit = editDiff(s.action);
      const cls = "step" + (s.tool === "run_tests" ? " run-tests" : "") + (edit ? " edit" : "");
      body.push(el("div", { class: cls, "data-tool": s.tool },
        el("b", {}, `${s.index}. ${s.tool || "?"}`), ` (${fmt(s.duration_s, 2)} s)`,
        edit || fold(s.action, "action"),
        s.tool === "run_tests" ? el("div", { class: "tests-feedback" }, el("em", {}, "run_tests feedback"), el("pre", {}, s.observation)) : fold(s.observation)));
    }
    body.push(el("h3", {}, "Final patch"), ep.patch ? diff(ep.patch) : el("p", {}, "(no change)"));
    if (ep.outside_edits) body.push(el("p", { class: "note" }, "Edits outside the masked block (ignored for grading)."));
    if (g) {
      body.push(el("h3", {}, "Grading"), el("p", {}, `${g.outcome} (${g.kind}): ${g.detail}; exit code ${g.exit_code}${g.timed_out ? ", timed out" : ""}; ${fmt(g.duration_s, 2)} s`));
      if (g.tests.length) {
        body.push(el("table", { id: "test-results" }, el("tr", {}, el("th", { class: "text" }, "test"), el("th", { class: "text" }, "status"), el("th", { class: "text" }, "message")),
          g.tests.map((t) => el("tr", { class: "test " + t.status }, el("td", { class: "text" }, t.name), el("td", { class: "text outcome " + (t.status === "passed" ? "passed" : "failed") }, t.status), el("td", { class: "text" }, (t.message || "").slice(0, 300))))));
      }
      body.push(fold(g.stdout, "test stdout"), fold(g.stderr, "test stderr"));
    }
    if (ep.model_calls.length) {
      body.push(el("h3", {}, `Model calls (${ep.model_calls.length})`), el("table", {},
        el("tr", {}, ["step", "model", "in", "out", "cached", "cost $", "latency s", "retries", "error"].map((h) => el("th", {}, h))),
        ep.model_calls.map((c) => el("tr", {}, el("td", {}, c.step ?? "–"), el("td", { class: "text" }, c.model || "–"), el("td", {}, c.input_tokens), el("td", {}, c.output_tokens),
          el("td", {}, c.cached_tokens), el("td", {}, fmt(c.cost, 5)), el("td", {}, fmt(c.latency_s, 2)), el("td", {}, c.retries), el("td", { class: "text" }, c.error || "")))));
    }
    $("viewer-body").replaceChildren(...body);
    $("viewer-body").scrollTop = 0;
    if (location.hash !== "#episode-" + i) history.replaceState(null, "", "#episode-" + i);
  }
  function closeViewer() { $("viewer").hidden = true; openId = null; history.replaceState(null, "", location.pathname); }
  $("viewer-close").addEventListener("click", closeViewer);
  document.addEventListener("keydown", (ev) => { if (ev.key === "Escape") closeViewer(); });

  renderBoard();
  legend();
  plotPapers();
  plotLength();
  plotCost();
  plotMatrix();
  renderItems();
  fillFilters();
  renderList();
  const m = /^#episode-(\d+)$/.exec(location.hash);
  if (m && E[Number(m[1])]) openEpisode(Number(m[1]));
  document.body.setAttribute("data-ready", "1");
})();
