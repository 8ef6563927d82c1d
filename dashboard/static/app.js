// The dashboard: loads each panel from the API on its own period, and
// only while the tab is visible, so an open dashboard costs the broker
// little.

import { get, setToken, whenTokenNeeded } from './api.js';
import { Chart, short } from './chart.js';
import { el, fill, when, age } from './dom.js';
import { clientsPanel, topicsPanel, deadLettersPanel } from './tables.js';
import { WatchPanel } from './watch.js';

const $ = (sel) => document.querySelector(sel);

const status = $('#status');
let noteTimer;

/** Says something in the header: an action done, or what failed. */
function note(msg, isError) {
  status.textContent = msg;
  status.classList.toggle('error', !!isError);
  clearTimeout(noteTimer);
  if (!isError) noteTimer = setTimeout(() => (status.textContent = ''), 5000);
}

const charts = {
  in: new Chart($('#chart-in')),
  out: new Chart($('#chart-out')),
  conns: new Chart($('#chart-conns')),
  queued: new Chart($('#chart-queued')),
};

const watch = new WatchPanel($('#watch'));
async function refreshOverview() {
  const o = await get('api/v1/overview');
  $('#version').textContent = o.version + (o.node ? ' · node ' + o.node : '');
  const now = { in: o.messages_in_per_second, out: o.messages_out_per_second, conns: o.connections, queued: o.queued };
  for (const [k, v] of Object.entries(now)) {
    charts[k].push(v);
    $('#now-' + k).textContent = short(v);
  }
  const kept = Object.entries(o.dead_letters || {}).map(([r, n]) => `${n} ${r}`).join(', ');
  const facts = [
    ['up', age((Date.now() - Date.parse(o.started)) / 1000)],
    ['sessions', `${o.sessions_online} online, ${o.sessions_offline} offline`],
    ['subscriptions', short(o.subscriptions)],
    ['retained', short(o.retained)],
    ['heap', (o.heap_live / 1048576).toFixed(1) + ' MiB'],
    ['store', o.store],
    ['dead letters', kept || 'none'],
  ];
  fill($('#facts'), facts.flatMap(([k, v]) => [el('dt', {}, k), el('dd', { class: k === 'store' && v !== 'ok' && v !== 'none' ? 'bad' : undefined }, v)]));
  $('#deadletters-kept').textContent = kept;
  fill($('#listeners ul'), (o.listeners || []).map((l) =>
    el('li', { class: l.error ? 'bad' : 'ok' }, l.name, l.error ? el('span', { class: 'why' }, l.error) : null)));
  const bridges = o.bridges || [];
  $('#bridges-note').hidden = bridges.length > 0;
  fill($('#bridges ul'), bridges.map((b) => el('li', { class: b.connected ? 'ok' : 'bad', dataset: { name: b.name } },
    el('strong', {}, b.name), ' ', b.connected ? 'connected to ' : 'not connected · last tried ', b.address,
    ` · since ${when(b.since)} · queued ${short(b.queued)} · out ${short(b.forwarded_out)} · in ${short(b.forwarded_in)}`,
    b.last_error ? el('span', { class: 'why' }, b.last_error) : null)));
  watch.listeners(o.listeners || []);
}

async function refreshCluster() {
  const root = $('#cluster');
  const msg = $('#cluster-note');
  let c;
  try {
    c = await get('api/v1/cluster');
  } catch (err) {
    if (err.status !== 404) throw err;
    fill(root.querySelector('dl'), []);
    msg.hidden = false;
    msg.textContent = 'Not in a cluster.';
    return;
  }
  msg.hidden = true;
  const facts = [
    ['cluster', c.name], ['this node', c.node], ['NATS', c.connected ? 'connected' : 'not connected'],
    ['nodes seen', c.nodes], ['store', c.store_ready ? 'ready' : 'not ready'], ['cut off', c.cut_off ? 'yes' : 'no'],
    ['messages in/out', `${short(c.messages_in)} / ${short(c.messages_out)}`], ['dropped', short(c.dropped)],
    ['dead nodes', c.dead_nodes], ['routes', `${c.routes} from ${c.peers} peers`],
  ];
  fill(root.querySelector('dl'), facts.flatMap(([k, v]) => [el('dt', {}, k), el('dd', {}, v)]));
}

// The refresh whose failure the header shows ('start': the header says
// the page is starting), cleared when it succeeds.
let pollFailed = 'start';

/** Runs refresh every period ms while the tab is visible, one at a time. */
function every(period, refresh) {
  const tick = async () => {
    if (!document.hidden) {
      try {
        await refresh();
        if (pollFailed === refresh || pollFailed === 'start') {
          pollFailed = null;
          note('', false);
        }
      } catch (err) {
        pollFailed = refresh;
        note(err.message, true);
      }
    }
    setTimeout(tick, period);
  };
  tick();
}

whenTokenNeeded(() => {
  $('#token-form').hidden = false;
});
$('#token-form').addEventListener('submit', (e) => {
  e.preventDefault();
  setToken($('#token-input').value.trim());
  $('#token-form').hidden = true;
  note('token set', false);
});

every(1000, refreshOverview);
every(2000, clientsPanel($('#clients'), note));
every(2000, topicsPanel($('#topics')));
every(5000, deadLettersPanel($('#deadletters'), note));
every(5000, refreshCluster);
