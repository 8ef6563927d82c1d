// A small line chart on a canvas: the last `points` values, scaled to
// their maximum. The canvas carries what it last drew in data-last and
// data-max (and data-points, how many values it has), for people's tools
// and the browser test.

export class Chart {
  constructor(canvas, points = 60) {
    this.canvas = canvas;
    this.points = points;
    this.values = [];
    new ResizeObserver(() => this.draw()).observe(canvas);
  }

  push(v) {
    this.values.push(Number.isFinite(v) ? v : 0);
    if (this.values.length > this.points) this.values.shift();
    this.draw();
  }

  draw() {
    const c = this.canvas;
    const ratio = window.devicePixelRatio || 1;
    const w = Math.max(1, Math.round(c.clientWidth * ratio));
    const h = Math.max(1, Math.round(c.clientHeight * ratio));
    if (c.width !== w || c.height !== h) {
      c.width = w;
      c.height = h;
    }
    const ctx = c.getContext('2d');
    ctx.clearRect(0, 0, w, h);
    const vs = this.values;
    const max = Math.max(1, ...vs);
    c.dataset.last = vs.length ? String(vs[vs.length - 1]) : '';
    c.dataset.max = String(max);
    c.dataset.points = String(vs.length);
    if (vs.length < 2) return;
    const style = getComputedStyle(c);
    const step = w / (this.points - 1);
    const x0 = w - (vs.length - 1) * step;
    const y = (v) => h - 2 * ratio - (v / max) * (h - 4 * ratio);
    ctx.beginPath();
    vs.forEach((v, i) => (i ? ctx.lineTo(x0 + i * step, y(v)) : ctx.moveTo(x0, y(v))));
    ctx.lineWidth = 1.5 * ratio;
    ctx.strokeStyle = style.color;
    ctx.stroke();
    ctx.lineTo(w, h);
    ctx.lineTo(x0, h);
    ctx.closePath();
    ctx.globalAlpha = 0.15;
    ctx.fillStyle = style.color;
    ctx.fill();
    ctx.globalAlpha = 1;
  }
}

/** A number as people read it: 1234567 is 1.23M. */
export function short(v) {
  const a = Math.abs(v);
  if (a >= 1e9) return (v / 1e9).toFixed(2) + 'G';
  if (a >= 1e6) return (v / 1e6).toFixed(2) + 'M';
  if (a >= 1e4) return (v / 1e3).toFixed(1) + 'k';
  if (Number.isInteger(v)) return String(v);
  return v.toFixed(1);
}
