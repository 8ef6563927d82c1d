// "Watch a topic": subscribes from the browser over MQTT-over-WebSocket
// with MQTT.js (loaded only when first used: 105 KB gzipped) to a ws or
// wss listener of the broker on this page's host; without one, reads the
// API's NDJSON stream (api/v1/watch), which also names each publisher.
// The panel's data-state says where it is: idle, connecting, subscribed,
// login (the listener wants a username and password), closed or error.

import { stream } from './api.js';
import { el, when } from './dom.js';

const keep = 200; // messages shown
const decoder = new TextDecoder('utf-8', { fatal: true });

/** The URL of the broker's WebSocket listener on this page's host, or "". */
function wsURL(listeners) {
  const ws = listeners.filter((l) => /^wss?:/.test(l.name) && !l.error);
  const secure = location.protocol === 'https:';
  const l = ws.find((l) => l.name.startsWith(secure ? 'wss:' : 'ws:')) || ws[0];
  if (!l) return '';
  const port = l.address.slice(l.address.lastIndexOf(':') + 1);
  return `${l.name.split(':')[0]}://${location.hostname}:${port}${l.path || '/mqtt'}`;
}

function text(payload) {
  try {
    return decoder.decode(payload);
  } catch {
    return `(${payload.length} bytes, not UTF-8)`;
  }
}

export function watchPanel(root) {
  const $ = (sel) => root.querySelector(sel);
  const url = $('#watch-url');
  const via = $('#watch-via');
  const login = $('#watch-login');
  const list = $('#watch-messages');
  const button = $('#watch-toggle');
  let edited = false; // the person typed a URL: keep it
  let stop = null; // ends the watch running

  url.addEventListener('input', () => {
    edited = true;
    showVia();
  });

  function showVia() {
    via.textContent = url.value ? url.value : 'the API (no WebSocket listener: api/v1/watch)';
  }

  function set(state, msg) {
    root.dataset.state = state;
    $('#watch-state').textContent = msg || '';
    const running = state === 'connecting' || state === 'subscribed';
    button.textContent = running ? 'Stop' : 'Watch';
    if (!running) stop = null;
  }

  function add(m) {
    const li = el('li', { dataset: { topic: m.topic } },
      el('time', {}, when(m.time || new Date().toISOString())),
      el('span', { class: 'topic' }, m.topic),
      el('span', { class: 'flags' }, `qos ${m.qos}${m.retain ? ' retained' : ''}${m.from ? ' from ' + m.from : ''}`),
      el('code', {}, m.payload.length > 2000 ? m.payload.slice(0, 2000) + '…' : m.payload));
    list.prepend(li);
    while (list.children.length > keep) list.lastChild.remove();
  }

  async function overMQTT(filter) {
    const mqtt = (await import('./vendor/mqtt.esm.js')).default;
    const client = mqtt.connect(url.value, {
      protocolVersion: 5,
      clientId: 'mqttd-dashboard-' + Math.random().toString(16).slice(2, 10),
      clean: true,
      reconnectPeriod: 0,
      connectTimeout: 10000,
      username: $('#watch-user').value || undefined,
      password: $('#watch-pass').value || undefined,
    });
    stop = () => {
      client.end(true);
      set('idle', 'stopped');
    };
    client.on('connect', () => {
      client.subscribe(filter, { qos: 0 }, (err, granted) => {
        if (err || !granted.length || granted[0].qos >= 0x80) {
          set('error', err ? err.message : `the broker refused the subscription to ${filter}`);
          client.end(true);
          return;
        }
        set('subscribed', `subscribed to ${filter} over ${url.value}`);
      });
    });
    client.on('message', (topic, payload, packet) =>
      add({ topic, qos: packet.qos, retain: packet.retain, payload: text(payload) }));
    client.on('error', (err) => {
      // 3.1.1's 4 and 5, 5.0's 0x86 and 0x87: bad or missing credentials
      if ([4, 5, 0x86, 0x87].includes(err.code)) {
        login.hidden = false;
        root.querySelector('#watch-conn').open = true;
        set('login', 'the listener wants a username and password: give them and Watch again');
      } else {
        set('error', err.message);
      }
      client.end(true);
    });
    client.on('close', () => {
      if (root.dataset.state === 'subscribed' || root.dataset.state === 'connecting') set('closed', 'the connection closed');
    });
  }

  async function overAPI(filter) {
    const ctrl = new AbortController();
    stop = () => {
      ctrl.abort();
      set('idle', 'stopped');
    };
    const res = await stream('api/v1/watch?filter=' + encodeURIComponent(filter), ctrl.signal);
    const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buf += value;
      let nl;
      while ((nl = buf.indexOf('\n')) >= 0) {
        const line = JSON.parse(buf.slice(0, nl));
        buf = buf.slice(nl + 1);
        if (line.topic !== undefined) {
          add({ ...line, payload: line.payload ?? `(${atob(line.payload_base64 || '').length} bytes, not UTF-8)` });
        } else if (line.dropped) {
          add({ topic: '…', qos: 0, payload: `${line.dropped} messages dropped: read too slowly` });
        } else {
          set('subscribed', `watching ${filter} through the API (no WebSocket listener)`);
        }
      }
    }
    set('closed', 'the API ended the watch');
  }

  $('#watch-form').addEventListener('submit', (e) => {
    e.preventDefault();
    if (stop) {
      stop();
      return;
    }
    const filter = $('#watch-filter').value.trim();
    set('connecting', 'connecting…');
    (url.value ? overMQTT(filter) : overAPI(filter)).catch((err) => {
      if (err.name !== 'AbortError') set('error', err.message);
    });
  });

  showVia();
  return {
    /** The listeners of the overview: where to watch over WebSocket. */
    listeners(ls) {
      if (edited) return;
      url.value = wsURL(ls);
      showVia();
    },
  };
}
