// The JSON API, as the dashboard uses it: reads, and actions with the
// header the API wants of them. A token, once asked for (the API answered
// 401), is kept in this tab's sessionStorage and sent as a bearer token.

const tokenKey = 'mqttd-token';

/** An answer of the API other than 2xx. */
export class APIError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** Called with no argument when the API answers 401. */
let onNeedToken = () => {};

export function whenTokenNeeded(f) {
  onNeedToken = f;
}

export function setToken(token) {
  sessionStorage.setItem(tokenKey, token);
}

function headers(extra) {
  const h = new Headers(extra);
  const token = sessionStorage.getItem(tokenKey);
  if (token) h.set('Authorization', 'Bearer ' + token);
  return h;
}

async function check(res) {
  if (res.ok) return res;
  let msg = res.status + ' ' + res.statusText;
  try {
    const body = await res.json();
    if (body && body.error) msg = body.error;
  } catch {
    // not JSON (a 404 of a path the API lacks): the status says it
  }
  if (res.status === 401) onNeedToken();
  throw new APIError(res.status, msg);
}

/** GET path (relative to the page, e.g. 'api/v1/overview'): its JSON. */
export async function get(path, signal) {
  const res = await fetch(path, { headers: headers(), cache: 'no-store', signal });
  return (await check(res)).json();
}

/** GET path as a stream, for the NDJSON of api/v1/watch. */
export async function stream(path, signal) {
  return check(await fetch(path, { headers: headers(), cache: 'no-store', signal }));
}

/** An action (POST, PUT, DELETE): the API's "done" sentence. */
export async function act(method, path) {
  const res = await fetch(path, { method, headers: headers({ 'X-Mqttd-Action': '1' }) });
  return (await (await check(res)).json()).done;
}

/** A client id or topic as one path segment. */
export function segment(s) {
  // encodeURIComponent leaves "." alone, and a segment ".." would be
  // cleaned away by the server's mux.
  return encodeURIComponent(s).replaceAll('.', '%2E');
}
