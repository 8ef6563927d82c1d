// "Watch a topic": subscribes from the browser over MQTT-over-WebSocket
// with MQTT.js (loaded only when first used: 105 KB gzipped) to a ws or
// wss listener of the broker on this page's host; without one, reads the
// API's NDJSON stream (api/v1/watch), which also names each publisher.
// The panel's data-state says where it is: idle, connecting, subscribed,
// login (the listener wants a username and password), closed or error.

import { stream } from './api.js';
import { el, when } from './dom.js';

const keep = 200; // messages shown
const payloadShown = 2000; // characters of a payload shown
const decoder = new TextDecoder('utf-8', { fatal: true });

// CONNACK codes of missing or wrong credentials: 3.1.1's 4 and 5, 5.0's
// 0x86 and 0x87.
const loginCodes = [4, 5, 0x86, 0x87];

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

export class WatchPanel {
  constructor(root) {
    this.root = root;
    this.$ = (sel) => root.querySelector(sel);
    this.url = this.$('#watch-url');
    this.edited = false; // the person typed a URL: keep it
    this.stop = null; // ends the watch running
    this.url.addEventListener('input', () => {
      this.edited = true;
      this.showVia();
    });
    this.$('#watch-form').addEventListener('submit', (e) => {
      e.preventDefault();
      this.toggle();
    });
    this.showVia();
  }

  /** The listeners of the overview: where to watch over WebSocket. */
  listeners(ls) {
    if (this.edited) return;
    this.url.value = wsURL(ls);
    this.showVia();
  }

  showVia() {
    this.$('#watch-via').textContent = this.url.value || 'the API (no WebSocket listener: api/v1/watch)';
  }

  toggle() {
    if (this.stop) {
      this.stop();
      return;
    }
    const filter = this.$('#watch-filter').value.trim();
    this.set('connecting', 'connecting…');
    (this.url.value ? this.overMQTT(filter) : this.overAPI(filter)).catch((err) => {
      if (err.name !== 'AbortError') this.set('error', err.message);
    });
  }

  set(state, msg) {
    this.root.dataset.state = state;
    this.$('#watch-state').textContent = msg || '';
    const running = state === 'connecting' || state === 'subscribed';
    this.$('#watch-toggle').textContent = running ? 'Stop' : 'Watch';
    if (!running) this.stop = null;
  }

  running() {
    return ['connecting', 'subscribed'].includes(this.root.dataset.state);
  }

  add(m) {
    const payload = m.payload.length > payloadShown ? m.payload.slice(0, payloadShown) + '…' : m.payload;
    const list = this.$('#watch-messages');
    list.prepend(el('li', { dataset: { topic: m.topic } },
      el('time', {}, when(m.time || new Date().toISOString())),
      el('span', { class: 'topic' }, m.topic),
      el('span', { class: 'flags' }, `qos ${m.qos}${m.retain ? ' retained' : ''}${m.from ? ' from ' + m.from : ''}`),
      el('code', {}, payload)));
    while (list.children.length > keep) list.lastChild.remove();
  }

  async overMQTT(filter) {
    const mqtt = (await import('./vendor/mqtt.esm.js')).default;
    const url = this.url.value;
    const client = mqtt.connect(url, {
      protocolVersion: 5,
      clientId: 'mqttd-dashboard-' + Math.random().toString(16).slice(2, 10),
      clean: true,
      reconnectPeriod: 0,
      connectTimeout: 10000,
      username: this.$('#watch-user').value || undefined,
      password: this.$('#watch-pass').value || undefined,
    });
    this.stop = () => {
      client.end(true);
      this.set('idle', 'stopped');
    };
    client.on('connect', () => {
      client.subscribe(filter, { qos: 0 }, (err, granted) => {
        if (err || !granted.length || granted[0].qos >= 0x80) {
          this.set('error', err ? err.message : `the broker refused the subscription to ${filter}`);
          client.end(true);
          return;
        }
        this.set('subscribed', `subscribed to ${filter} over ${url}`);
      });
    });
    client.on('message', (topic, payload, packet) =>
      this.add({ topic, qos: packet.qos, retain: packet.retain, payload: text(payload) }));
    client.on('error', (err) => {
      if (loginCodes.includes(err.code)) {
        this.$('#watch-login').hidden = false;
        this.$('#watch-conn').open = true;
        this.set('login', 'the listener wants a username and password: give them and Watch again');
      } else {
        this.set('error', err.message);
      }
      client.end(true);
    });
    client.on('close', () => {
      if (this.running()) this.set('closed', 'the connection closed');
    });
  }

  async overAPI(filter) {
    const ctrl = new AbortController();
    this.stop = () => {
      ctrl.abort();
      this.set('idle', 'stopped');
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
        this.line(JSON.parse(buf.slice(0, nl)), filter);
        buf = buf.slice(nl + 1);
      }
    }
    this.set('closed', 'the API ended the watch');
  }

  /** One line of api/v1/watch. */
  line(l, filter) {
    if (l.topic !== undefined) {
      const binary = l.payload_base64 ? `(${atob(l.payload_base64).length} bytes, not UTF-8)` : '';
      this.add({ ...l, payload: l.payload ?? binary });
    } else if (l.dropped) {
      this.add({ topic: '…', qos: 0, payload: `${l.dropped} messages dropped: read too slowly` });
    } else {
      this.set('subscribed', `watching ${filter} through the API (no WebSocket listener)`);
    }
  }
}
