// The panels that list: clients (search, pages, kick, sessions whose
// queue keeps growing), topics with their recent counts, dead letters.

import { get, act, segment } from './api.js';
import { el, fill, twoClick, when, age } from './dom.js';
import { short } from './chart.js';

const growLooks = 3; // a queue that grew at this many looks in a row is highlighted

/** The clients panel; refresh() loads the page in view again. */
export function clientsPanel(root, note) {
  const tbody = root.querySelector('tbody');
  const search = root.querySelector('#clients-search');
  const offline = root.querySelector('#clients-offline');
  const prev = root.querySelector('#clients-prev');
  const next = root.querySelector('#clients-next');
  const growingBadge = root.querySelector('#clients-growing');
  let cursors = ['']; // the cursor of each page up to the one in view
  let nextCursor = '';
  const queues = new Map(); // client id -> {queued, grew: looks in a row it grew}

  async function refresh() {
    const q = new URLSearchParams({ limit: '50' });
    if (cursors.at(-1)) q.set('after', cursors.at(-1));
    if (search.value) q.set('search', search.value);
    if (offline.checked) q.set('offline', 'true');
    const page = await get('api/v1/clients?' + q);
    nextCursor = page.next || '';
    prev.disabled = cursors.length < 2;
    next.disabled = !nextCursor;
    let growing = 0;
    const seen = new Set();
    const rows = (page.clients || []).map((c) => {
      seen.add(c.id);
      const was = queues.get(c.id);
      const grew = !was ? 0 : c.queued > was.queued ? was.grew + 1 : c.queued < was.queued ? 0 : was.grew;
      queues.set(c.id, { queued: c.queued, grew });
      const isGrowing = grew >= growLooks && c.queued > 0;
      if (isGrowing) growing++;
      return clientRow(c, isGrowing, note, refresh);
    });
    for (const id of queues.keys()) if (!seen.has(id)) queues.delete(id);
    fill(tbody, rows.length ? rows : [el('tr', {}, el('td', { colspan: 9, class: 'note' }, 'No sessions.'))]);
    growingBadge.hidden = growing === 0;
    growingBadge.textContent = growing + ' growing';
  }

  let typing;
  search.addEventListener('input', () => {
    clearTimeout(typing);
    typing = setTimeout(() => {
      cursors = [''];
      refresh().catch((err) => note(err.message, true));
    }, 250);
  });
  offline.addEventListener('change', () => {
    cursors = [''];
    refresh().catch((err) => note(err.message, true));
  });
  next.addEventListener('click', () => {
    cursors.push(nextCursor);
    refresh().catch((err) => note(err.message, true));
  });
  prev.addEventListener('click', () => {
    cursors.pop();
    refresh().catch((err) => note(err.message, true));
  });
  return refresh;
}

function clientRow(c, growing, note, refresh) {
  const id = segment(c.id);
  const done = (msg, isError) => {
    note(msg, isError);
    refresh().catch(() => {});
  };
  const action = c.connected
    ? twoClick('kick', 'kick ' + c.id, () => act('POST', `api/v1/clients/${id}/disconnect`), done)
    : twoClick('delete', 'delete ' + c.id, () => act('DELETE', `api/v1/sessions/${id}`), done);
  action.classList.add(c.connected ? 'kick' : 'delete');
  action.title = c.connected ? 'end its connection (its session is kept)' : 'delete the session and its queue';
  const state = (c.connected
    ? 'online'
    : 'offline' + (c.offline_since ? ' ' + age((Date.now() - Date.parse(c.offline_since)) / 1000) : '')) +
    (c.node ? ' on ' + c.node : ''); // a cluster's listing names each session's node
  return el('tr', { dataset: { id: c.id }, class: growing ? 'growing' : undefined },
    el('td', { class: 'id' }, c.id),
    el('td', {}, c.username),
    el('td', { class: c.connected ? 'ok' : 'off' }, state),
    el('td', { class: 'opt' }, c.remote),
    el('td', { class: 'opt' }, c.protocol),
    el('td', { class: 'num' }, c.subscriptions),
    el('td', { class: 'num opt' }, c.inflight),
    el('td', { class: 'num', title: c.queued_bytes + ' bytes' }, short(c.queued)),
    el('td', {}, action));
}

/** The topics panel: "not available" while the API has no topics. */
export function topicsPanel(root) {
  const tbody = root.querySelector('tbody');
  const noteEl = root.querySelector('#topics-note');
  const windowEl = root.querySelector('#topics-window');
  return async function refresh() {
    let body;
    try {
      body = await get('api/v1/topics');
    } catch (err) {
      if (err.status !== 404) throw err;
      root.dataset.state = 'unavailable';
      fill(tbody, []);
      noteEl.hidden = false;
      noteEl.textContent = 'Not available: this broker’s API has no /api/v1/topics.';
      return;
    }
    root.dataset.state = 'ok';
    windowEl.textContent = body.window_seconds ? `last ${body.window_seconds} s` : '';
    const topics = body.topics || [];
    noteEl.hidden = topics.length > 0;
    noteEl.textContent = 'No messages lately.';
    fill(tbody, topics.map((t) => el('tr', { dataset: { topic: t.topic } },
      el('td', { class: 'id' }, t.topic),
      el('td', { class: 'num' }, short(t.messages)),
      el('td', { class: 'num' }, short(t.rate || 0)))));
  };
}

/** The dead letters panel, with republish and drop. */
export function deadLettersPanel(root, note) {
  const tbody = root.querySelector('tbody');
  const empty = root.querySelector('#deadletters-note');
  async function refresh() {
    const body = await get('api/v1/deadletters?limit=100');
    const letters = body.dead_letters || [];
    empty.hidden = letters.length > 0;
    const done = (msg, isError) => {
      note(msg, isError);
      refresh().catch(() => {});
    };
    fill(tbody, letters.map((d) => {
      const topic = segment(d.topic);
      return el('tr', { dataset: { topic: d.topic } },
        el('td', { class: 'id', title: d.topic }, d.original_topic),
        el('td', {}, d.reason),
        el('td', { class: 'opt' }, d.client_id),
        el('td', { class: 'num opt' }, d.deliveries),
        el('td', { class: 'opt' }, when(d.time)),
        el('td', { class: 'num opt' }, d.payload_size),
        el('td', { class: 'actions' },
          twoClick('republish', 'republish ' + d.topic, () => act('POST', `api/v1/deadletters/${topic}/republish`), done),
          twoClick('drop', 'drop ' + d.topic, () => act('DELETE', `api/v1/deadletters/${topic}`), done)));
    }));
  }
  return refresh;
}
