// MQTT.js (the npm package mqtt) against a running mqttd: one scenario
// per run, `node scenarios.mjs <scenario> <port|url>`, exit status 0 when it
// holds. Run by e2e_test.go, which starts the broker on 127.0.0.1.
import { readFileSync } from 'node:fs';
import mqtt from 'mqtt';

// A bare port is MQTT over TCP on 127.0.0.1; a URL may be ws:// or wss://
// (MQTTD_CA then names the CA file that signed the broker's certificate).
const [scenario, target] = process.argv.slice(2);
const url = target.includes('://') ? target : `mqtt://127.0.0.1:${target}`;
const tls = process.env.MQTTD_CA ? { ca: readFileSync(process.env.MQTTD_CA) } : {};

function fail(msg) {
  console.error(`${scenario}: ${msg}`);
  process.exit(1);
}

function connect(clientId, opts = {}) {
  return mqtt.connectAsync(url, { protocolVersion: 5, clientId, reconnectPeriod: 0, connectTimeout: 10000, ...tls, ...opts });
}

// open connects without waiting, so that handlers can be in place before
// anything arrives; ack resolves with the CONNACK.
function open(clientId, opts = {}) {
  const client = mqtt.connect(url, { protocolVersion: 5, clientId, reconnectPeriod: 0, connectTimeout: 10000, ...tls, ...opts });
  const ack = new Promise((resolve, reject) => {
    client.once('connect', resolve);
    client.once('error', reject);
  });
  return { client, ack };
}

// next resolves with the next message the client receives.
function next(client) {
  return new Promise((resolve) => client.once('message', (topic, payload, packet) => resolve({ topic, payload: payload.toString(), packet })));
}

function within(ms, promise, what) {
  return Promise.race([promise, new Promise((_, reject) => setTimeout(() => reject(new Error(`no ${what} within ${ms} ms`)), ms))]);
}

const scenarios = {
  // A will with a Will Delay Interval arrives after the delay and without
  // the property, which MQTT.js would refuse in a PUBLISH.
  async 'will-delay'() {
    const sub = await connect('js-watch');
    await sub.subscribeAsync('will/#', { qos: 1 });
    const w = await connect('js-will', {
      properties: { sessionExpiryInterval: 60 },
      will: { topic: 'will/js', payload: Buffer.from('gone'), qos: 1, properties: { willDelayInterval: 1, contentType: 'text/plain' } },
    });
    const closed = Date.now();
    const got = next(sub);
    w.stream.destroy(); // no DISCONNECT: the will is due
    const m = await within(10000, got, 'will');
    if (Date.now() - closed < 900) fail(`will after ${Date.now() - closed} ms, before its 1 s delay`);
    if (m.topic !== 'will/js' || m.payload !== 'gone') fail(`will ${m.topic} ${m.payload}`);
    if (m.packet.properties?.willDelayInterval !== undefined) fail('the will carried its Will Delay Interval');
    if (m.packet.properties?.contentType !== 'text/plain') fail(`content type ${m.packet.properties?.contentType}`);
    await sub.endAsync();
  },

  // A session is there for a client back within its Session Expiry
  // Interval, with what was queued for it. (e2e_test.go then waits for
  // the broker to expire it and runs session-expired.)
  async 'session-expiry'() {
    const opts = { clean: false, properties: { sessionExpiryInterval: 1 } };
    const a = await connect('js-exp', opts);
    await a.subscribeAsync('exp/t', { qos: 1 });
    await a.endAsync();
    const pub = await connect('js-exp-pub');
    await pub.publishAsync('exp/t', 'queued', { qos: 1 });
    await pub.endAsync();
    const back = open('js-exp', opts);
    const got = next(back.client);
    if (!(await within(10000, back.ack, 'CONNACK')).sessionPresent) fail('session gone within its expiry interval');
    const m = await within(10000, got, 'queued message');
    if (m.payload !== 'queued') fail(`got ${m.payload}`);
    await back.client.endAsync();
  },

  // ... and gone once it has expired.
  async 'session-expired'() {
    const late = open('js-exp', { clean: false, properties: { sessionExpiryInterval: 1 } });
    if ((await within(10000, late.ack, 'CONNACK')).sessionPresent) fail('session present after its expiry interval');
    await late.client.endAsync();
  },

  // MQTT.js assigns aliases to what it publishes and resolves those the
  // broker gives it.
  async 'topic-aliases'() {
    const sub = await connect('js-alias-sub', { properties: { topicAliasMaximum: 3 } });
    await sub.subscribeAsync('al/#', { qos: 1 });
    const pub = await connect('js-alias-pub', { autoAssignTopicAlias: true });
    const topics = ['al/a', 'al/b', 'al/a', 'al/c', 'al/d', 'al/a', 'al/b', 'al/a'];
    const got = [];
    let aliasOnly = 0;
    const all = new Promise((resolve) => sub.on('message', (topic, payload, packet) => {
      if (packet.properties?.topicAlias && packet.topic === '') aliasOnly++;
      got.push([topic, payload.toString()]);
      if (got.length === topics.length) resolve();
    }));
    for (const t of topics) await pub.publishAsync(t, t, { qos: 1 });
    await within(10000, all, 'messages');
    for (let i = 0; i < topics.length; i++) {
      if (got[i][0] !== topics[i] || got[i][1] !== topics[i]) fail(`message ${i}: ${got[i]}, want ${topics[i]}`);
    }
    if (aliasOnly === 0) fail('the broker sent no alias-only PUBLISH');
    await sub.endAsync();
    await pub.endAsync();
  },

  // Request/response: the requester learns its Response Information, a
  // responder answers on the Response Topic with the Correlation Data.
  async 'request-response'() {
    const svc = await connect('js-svc');
    await svc.subscribeAsync('svc/req', { qos: 1 });
    svc.on('message', (topic, payload, packet) => {
      const p = packet.properties ?? {};
      svc.publish(p.responseTopic, `re: ${payload}`, { qos: 1, properties: { correlationData: p.correlationData } });
    });
    const cli = await connect('js-cli', { properties: { requestResponseInformation: true } });
    const info = cli.connackPacket?.properties?.responseInformation;
    if (info !== 'responses/js-cli/') fail(`Response Information ${info}`);
    const replyTopic = `${info}svc`;
    await cli.subscribeAsync(replyTopic, { qos: 1 });
    const got = next(cli);
    await cli.publishAsync('svc/req', 'ping', { qos: 1, properties: { responseTopic: replyTopic, correlationData: Buffer.from('42') } });
    const m = await within(10000, got, 'response');
    if (m.payload !== 're: ping' || m.packet.properties?.correlationData?.toString() !== '42') {
      fail(`response ${m.payload} ${m.packet.properties?.correlationData}`);
    }
    await cli.endAsync();
    await svc.endAsync();
  },

  // A message of 300 KB goes both ways: over WebSocket it is many frames.
  async 'big-message'() {
    const c = await connect('js-big');
    await c.subscribeAsync('big/#', { qos: 1 });
    const body = Buffer.alloc(300 * 1024, 'x');
    const got = next(c);
    await c.publishAsync('big/1', body, { qos: 1 });
    const m = await within(10000, got, 'big message');
    if (m.payload.length !== body.length) fail(`got ${m.payload.length} bytes, want ${body.length}`);
    await c.endAsync();
  },
};

if (!scenarios[scenario]) fail('unknown scenario');
try {
  await scenarios[scenario]();
  process.exit(0);
} catch (err) {
  fail(err.stack ?? String(err));
}
