// The posted balance of an entity over a period, drawn as inline SVG by this code (no chart
// library): a step line, since a balance holds its value until the next leg moves it. One point
// per statement entry carries its moment and balance (data-posted-at, data-posted-after) and a
// <title> a screen reader or a hover shows; the chart as a whole is role="img" with a summary.

import { formatMoney } from "./money.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 760;
const HEIGHT = 240;
const PAD = { left: 110, right: 16, top: 16, bottom: 36 };

function el(tag, attributes = {}, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attributes)) node.setAttribute(name, String(value));
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * An <svg> of the balance from `from` to `to` (Dates): `opening` at `from`, then each entry's
 * `posted_after` at its `posted_at`, held until `to`. `label` names the chart for assistive
 * technology; amounts are in `currency`.
 */
export function balanceChart({ from, to, opening, entries, currency, label }) {
  const t0 = from.getTime();
  const t1 = to.getTime();
  const values = [opening, ...entries.map((e) => e.posted_after)];
  const low = Math.min(0, ...values);
  let high = Math.max(0, ...values);
  if (low === high) high = low + 1;
  const x = (ms) => PAD.left + ((Math.min(Math.max(ms, t0), t1) - t0) / (t1 - t0)) * (WIDTH - PAD.left - PAD.right);
  const y = (v) => PAD.top + ((high - v) / (high - low)) * (HEIGHT - PAD.top - PAD.bottom);

  const svg = el("svg", { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": label, class: "chart" });
  svg.append(el("title", {}, label));
  // Axes: zero, the highest and the lowest balance, and the period's ends.
  const axis = el("g", { class: "axis", "aria-hidden": "true" });
  axis.append(el("line", { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(0), y2: y(0), class: "zero" }));
  for (const v of new Set([low, 0, high])) {
    axis.append(el("text", { x: PAD.left - 6, y: y(v) + 4, "text-anchor": "end" }, formatMoney(v, currency)));
  }
  axis.append(el("text", { x: PAD.left, y: HEIGHT - 10, "text-anchor": "start" }, from.toLocaleString()));
  axis.append(el("text", { x: WIDTH - PAD.right, y: HEIGHT - 10, "text-anchor": "end" }, to.toLocaleString()));
  svg.append(axis);

  // The step line: across at the old balance, then up or down to the new one at each entry.
  let path = `M ${x(t0)} ${y(opening)}`;
  for (const e of entries) {
    const at = x(Date.parse(e.posted_at));
    path += ` H ${at} V ${y(e.posted_after)}`;
  }
  path += ` H ${x(t1)}`;
  svg.append(el("path", { d: path, class: "line", fill: "none" }));

  const points = el("g", { class: "points" });
  for (const e of entries) {
    const point = el("circle", {
      cx: x(Date.parse(e.posted_at)),
      cy: y(e.posted_after),
      r: 3.5,
      "data-posted-at": e.posted_at,
      "data-posted-after": e.posted_after,
    });
    point.append(el("title", {}, `${new Date(e.posted_at).toLocaleString()}: ${formatMoney(e.posted_after, currency)}`));
    points.append(point);
  }
  svg.append(points);
  return svg;
}
