// Building the page: every datum from the API goes in as text (client ids
// and topics are chosen by clients), never as HTML.

/** el('td', {class: 'x'}, 'text', child) */
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : String(v));
  }
  for (const c of children) {
    if (c !== undefined && c !== null) e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

/** Replaces what parent holds. */
export function fill(parent, children) {
  parent.replaceChildren(...children);
}

// Which action waits for its second click: a table redrawn between the
// two clicks keeps it.
let armed = { key: '', until: 0 };

/**
 * A button that acts on its second click within 4 s (the first one says
 * what it will do), so that a slip does not kick a device; key names the
 * action and its object.
 */
export function twoClick(label, key, run, note) {
  const isArmed = () => armed.key === key && Date.now() < armed.until;
  const b = el('button', { type: 'button', class: isArmed() ? 'armed' : undefined }, isArmed() ? 'sure?' : label);
  b.addEventListener('click', async () => {
    if (!isArmed()) {
      armed = { key, until: Date.now() + 4000 };
      b.textContent = 'sure?';
      b.classList.add('armed');
      return;
    }
    armed = { key: '', until: 0 };
    b.disabled = true;
    try {
      note(await run(), false);
    } catch (err) {
      note(err.message, true);
    }
  });
  return b;
}

/** A time as people read it here: 14:03:12, with the date if not today. */
export function when(iso) {
  if (!iso) return '';
  const d = new Date(iso);
  return d.toDateString() === new Date().toDateString() ? d.toLocaleTimeString() : d.toLocaleString();
}

/** Seconds as 3d4h, 5m2s. */
export function age(seconds) {
  const s = Math.max(0, Math.floor(seconds));
  const parts = [[86400, 'd'], [3600, 'h'], [60, 'm'], [1, 's']];
  let out = '';
  let rest = s;
  for (const [n, unit] of parts) {
    if (rest >= n || (unit === 's' && out === '')) {
      out += Math.floor(rest / n) + unit;
      rest %= n;
      if (out.length > 3) break;
    }
  }
  return out;
}
