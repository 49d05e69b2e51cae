"""The page of ``pydla report``: one self-contained HTML file (inline CSS, JS and SVG; nothing
fetched). The engine's data travels as JSON in the page and the script draws every view from
it; when all views are drawn it adds ``#pydla-rendered`` (the tests look for it), and any
script error is shown in ``#pydla-error`` instead.

Kept in Python strings rather than package data files so a plain ``pip install`` carries it.
"""

from __future__ import annotations

import html
import json
from typing import Any

CSS = """
body { font: 13px/1.4 system-ui, sans-serif; margin: 24px; color: #1d2330; }
h1 { font-size: 20px; margin: 0 0 4px; } h2 { font-size: 16px; margin: 28px 0 8px; }
.meta { color: #5b6475; } .note { color: #7a5b00; background: #fff6d6; padding: 8px; }
table { border-collapse: collapse; } td, th { padding: 3px 10px; border-bottom: 1px solid #e3e6ec; }
th { text-align: left; background: #f4f6fa; } td.num { text-align: right; }
.swatch { display: inline-block; width: 12px; height: 12px; border-radius: 2px;
  vertical-align: middle; margin-right: 4px; }
svg text { font: 11px system-ui, sans-serif; } svg .small { font-size: 10px; fill: #4a5263; }
svg .title { font-weight: 600; } .scroll { overflow-x: auto; border: 1px solid #e3e6ec; }
#pydla-error { color: #a00; white-space: pre-wrap; }
"""

# Drawn with createElementNS/textContent only, so names from the model are never parsed as
# markup.
JS = r"""
(function () {
  const D = JSON.parse(document.getElementById('pydla-data').textContent);
  const NS = 'http://www.w3.org/2000/svg';
  const PREC = {fp32: '#8fb8ff', fp16: '#ffc27a', bf16: '#f59fd0', int8: '#9be3a5'};
  const colour = (p) => PREC[p] || '#d0d4dc';
  function el(tag, attrs, text, parent) {
    const e = tag.startsWith('svg:') ? document.createElementNS(NS, tag.slice(4))
      : document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    if (text !== undefined && text !== null) e.textContent = text;
    if (parent) parent.appendChild(e);
    return e;
  }
  const fmtBytes = (b) => b >= 1048576 ? (b / 1048576).toFixed(2) + ' MiB'
    : b >= 1024 ? (b / 1024).toFixed(1) + ' KiB' : b + ' B';
  const section = (id) => document.getElementById(id);

  function header() {
    const h = section('summary');
    const e = D.engine;
    el('div', {class: 'meta'}, `${D.layers.length} layers · activation arena ` +
      `${fmtBytes(e.arena_bytes)} · weights ${fmtBytes(e.weight_bytes)} · format ` +
      `${e.version} · target ${e.target}`, h);
  }

  function graph() {
    const box = section('graph');
    const W = 430, GAP = 18, LINE = 14, X = 20;
    let y = 10;
    const pos = [];
    for (const L of D.layers) {
      const h = 36 + LINE * L.fused_from.length;
      pos.push({y: y, h: h});
      y += h + GAP;
    }
    const far = Math.max(1, ...D.edges.map(([p, c]) => c - p));
    const svg = el('svg:svg', {width: W + 260, height: y + 10, id: 'graph-svg'}, null, box);
    const defs = el('svg:defs', {}, null, svg);
    const mk = el('svg:marker', {id: 'arr', viewBox: '0 0 10 10', refX: 9, refY: 5,
      markerWidth: 6, markerHeight: 6, orient: 'auto'}, null, defs);
    el('svg:path', {d: 'M0,0 L10,5 L0,10 z', fill: '#6b7280'}, null, mk);
    for (const [p, c] of D.edges) {
      const a = pos[p], b = pos[c];
      const y1 = a.y + a.h, y2 = b.y;
      let d;
      if (c === p + 1) {
        d = `M${X + W / 2},${y1} L${X + W / 2},${y2}`;
      } else {
        const bend = X + W + 20 + 200 * Math.log(1 + c - p) / Math.log(1 + far);
        d = `M${X + W},${a.y + a.h / 2} C${bend},${a.y + a.h / 2} ${bend},${b.y + b.h / 2} ` +
          `${X + W},${b.y + b.h / 2}`;
      }
      el('svg:path', {d: d, fill: 'none', stroke: '#6b7280', 'stroke-width': 1.2,
        'marker-end': 'url(#arr)', class: 'edge'}, null, svg);
    }
    D.layers.forEach((L, i) => {
      const g = el('svg:g', {class: 'layer', 'data-layer': L.name}, null, svg);
      const fused = L.fused_from.length > 1;
      el('svg:rect', {x: X, y: pos[i].y, width: W, height: pos[i].h, rx: 6,
        fill: colour(L.precision), stroke: fused ? '#1d2330' : '#7b8394',
        'stroke-width': fused ? 2.5 : 1, 'stroke-dasharray': fused ? '' : '4 2'}, null, g);
      el('svg:title', {}, `${L.name}\n${L.op} ${L.precision} tactic ${L.tactic}` +
        (L.device ? `\non ${L.device}` : ''), g);
      el('svg:text', {x: X + 8, y: pos[i].y + 15, class: 'title'},
        `#${L.index} ${L.name}`, g);
      el('svg:text', {x: X + 8, y: pos[i].y + 29, class: 'small'},
        `${L.op}${L.epilogue.length ? ' + ' + L.epilogue.join('+') : ''} · ${L.precision}` +
        ` · ${L.tactic}${fused ? ` · fused ×${L.fused_from.length}` : ''}` +
        (L.device ? ` · ${L.device}` : ''), g);
      L.fused_from.forEach((n, k) => el('svg:text', {x: X + 22, y: pos[i].y + 43 + LINE * k,
        class: 'small fused'}, '▸ ' + n, g));
    });
  }

  function timeChart() {
    const box = section('time');
    if (!D.profile) {
      el('p', {class: 'note'}, 'No profile given. Run `pydla bench --loadEngine engine.bin ' +
        '--exportProfile=profile.json` and pass --profile profile.json to chart layer times.',
        box);
      return;
    }
    const rows = D.profile, max = Math.max(...rows.map((r) => r.averageMs), 1e-12);
    const ROW = 18, NAME = 220, BAR = 420;
    const svg = el('svg:svg', {width: NAME + BAR + 160, height: ROW * rows.length + 10,
      id: 'time-svg'}, null, box);
    rows.forEach((r, i) => {
      const y = 5 + ROW * i, L = D.layers.find((l) => l.name === r.name);
      el('svg:text', {x: NAME - 6, y: y + 12, 'text-anchor': 'end'}, r.name, svg);
      const bar = el('svg:rect', {x: NAME, y: y + 2, height: ROW - 5,
        width: Math.max(1, BAR * r.averageMs / max), fill: colour(L ? L.precision : '')},
        null, svg);
      el('svg:title', {}, `${r.name}: ${r.averageMs.toFixed(4)} ms`, bar);
      el('svg:text', {x: NAME + BAR + 6, y: y + 12, class: 'small'},
        `${r.averageMs.toFixed(4)} ms · ${r.percentage.toFixed(1)} %`, svg);
    });
  }

  function memory() {
    const box = section('memory');
    const n = D.layers.length, arena = Math.max(D.engine.arena_bytes, 1);
    const W = 760, H = 320, L = 70, T = 10;
    const sx = (step) => L + W * step / (n + 1), sy = (off) => T + H * off / arena;
    const svg = el('svg:svg', {width: L + W + 20, height: H + 50, id: 'memory-svg'}, null, box);
    el('svg:rect', {x: L, y: T, width: W, height: H, fill: '#fafbfd', stroke: '#c9ced8'},
      null, svg);
    for (const t of D.lifetimes) {
      const r = el('svg:rect', {x: sx(t.first + 1), y: sy(t.offset),
        width: Math.max(2, sx(t.last + 2) - sx(t.first + 1)),
        height: Math.max(1.5, H * t.nbytes / arena),
        fill: t.kind === 'activation' ? '#8fb8ff' : '#9be3a5', 'fill-opacity': t.alias ? 0.35 : 0.8,
        stroke: '#33415c', 'stroke-width': 0.5, 'stroke-dasharray': t.alias ? '3 2' : '',
        class: 'tensor'}, null, svg);
      el('svg:title', {}, `${t.name} ${t.kind}${t.alias ? ' (shares ' + t.alias + ')' : ''}` +
        `\nbytes ${t.offset}..${t.offset + t.nbytes} (${fmtBytes(t.nbytes)})` +
        `\nlayers ${t.first < 0 ? 'input' : '#' + t.first} → #${t.last}`, r);
    }
    const every = Math.max(1, Math.ceil(n / 20));
    for (let i = 0; i < n; i += every) {
      el('svg:text', {x: sx(i + 1.5), y: T + H + 14, 'text-anchor': 'middle', class: 'small'},
        String(i), svg);
    }
    for (let k = 0; k <= 4; k++) {
      el('svg:text', {x: L - 6, y: sy(arena * k / 4) + 4, 'text-anchor': 'end', class: 'small'},
        fmtBytes(Math.round(arena * k / 4)), svg);
    }
    el('svg:text', {x: L + W / 2, y: H + 40, 'text-anchor': 'middle', class: 'small'},
      'execution order (layer index): from the writer to the last reader', svg);
  }

  function precision() {
    const box = section('precision');
    const counts = {};
    for (const L of D.layers) counts[L.precision] = (counts[L.precision] || 0) + 1;
    const legend = el('p', {}, null, box);
    for (const [p, c] of Object.entries(counts)) {
      el('span', {class: 'swatch', style: `background:${colour(p)}`}, null, legend);
      el('span', {}, `${p}: ${c} layers   `, legend);
    }
    const strip = el('svg:svg', {width: Math.min(900, 8 * D.layers.length + 2), height: 22,
      id: 'precision-svg'}, null, box);
    const w = Math.min(8, 898 / Math.max(1, D.layers.length));
    D.layers.forEach((L, i) => {
      const r = el('svg:rect', {x: 1 + w * i, y: 1, width: w, height: 20,
        fill: colour(L.precision)}, null, strip);
      el('svg:title', {}, `#${L.index} ${L.name}: ${L.precision}`, r);
    });
    const tbl = el('table', {}, null, box);
    const head = el('tr', {}, null, tbl);
    for (const c of ['I/O', 'tensor', 'shape', 'type', 'buffer format', 'bytes']) {
      el('th', {}, c, head);
    }
    for (const io of D.io) {
      const tr = el('tr', {}, null, tbl);
      el('td', {}, io.kind, tr); el('td', {}, io.name, tr);
      el('td', {}, '[' + io.shape.join(', ') + ']', tr); el('td', {}, io.dtype, tr);
      el('td', {}, `${io.buffer_dtype}:${io.format}`, tr);
      el('td', {class: 'num'}, io.size.toLocaleString('en'), tr);
    }
  }

  try {
    header(); graph(); timeChart(); memory(); precision();
    el('div', {id: 'pydla-rendered', hidden: ''}, 'rendered', document.body);
  } catch (err) {
    el('div', {id: 'pydla-error'}, 'report failed to render: ' + err, document.body);
    console.error(err);
  }
})();
"""


def render_html(data: dict[str, Any], title: str) -> str:
    # "</" would end the script element early; JSON allows "\/" for "/".
    payload = json.dumps(data).replace("</", "<\\/")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>pydla report: {html.escape(title)}</title>
<style>{CSS}</style></head>
<body>
<h1>pydla engine report: {html.escape(title)}</h1>
<div id="summary"></div>
<h2>Layer graph (execution order; solid border: several ONNX nodes fused into one layer)</h2>
<div id="graph" class="scroll"></div>
<h2>Per-layer time (average per inference)</h2>
<div id="time"></div>
<h2>Activation memory (arena offset over execution; dashed: shares a parent's bytes)</h2>
<div id="memory" class="scroll"></div>
<h2>Precision and I/O formats</h2>
<div id="precision"></div>
<script type="application/json" id="pydla-data">{payload}</script>
<script>{JS}</script>
</body></html>
"""
