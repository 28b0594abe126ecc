// The live view: subscribes over /resp (RESP3 over WebSocket) and draws what arrives.
// Counting is exact and per message; drawing is sampled: tables and chart are redrawn
// at most a few times a second from the counters and the newest messages, so the page
// keeps up with high message rates.
// A gateway with --users answers 401 without a token: the page then asks for one, keeps
// it in sessionStorage (this tab only), sends it as "Authorization: Bearer" on fetches
// and as ?access_token= on the WebSocket (a browser cannot set a header there).
"use strict";

const SHOWN_MESSAGES = 50;   // rows in "latest messages"
const SHOWN_SUBJECTS = 200;  // rows in "last value per subject"
const CHART_SECONDS = 60;
const CHART_SERIES = 6;      // the busiest subjects get a line each
const COLORS = ["#ff7a1a", "#6fdc8c", "#4aa8ff", "#f5d547", "#d17bff", "#ff6b6b"];
const PREVIEW = 80;

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "fyrehose-token";
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

const state = {
  socket: null, pattern: ">", matcher: () => true,
  total: 0, lastSeq: 0, lastSecondTotal: 0, rate: 0,
  recent: [],                 // newest last, at most SHOWN_MESSAGES
  subjects: new Map(),        // subject -> {count, seq, value, counted}
  history: [],                // per second: Map subject -> msgs/s
  dirty: true,
};

// ---------------------------------------------------------------- RESP (the replies the gateway sends)

function command(...words) {
  const parts = [encoder.encode(`*${words.length}\r\n`)];
  for (const word of words) {
    const bytes = typeof word === "string" ? encoder.encode(word) : word;
    parts.push(encoder.encode(`$${bytes.length}\r\n`), bytes, encoder.encode("\r\n"));
  }
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

// Parses one RESP value at bytes[pos]; returns [value, next position]. Pushes and
// arrays are JS arrays, blobs Uint8Array, attributes are returned beside the value.
function parse(bytes, pos) {
  const lineEnd = bytes.indexOf(13, pos);
  const type = String.fromCharCode(bytes[pos]);
  const line = String.fromCharCode(...bytes.subarray(pos + 1, lineEnd));
  let next = lineEnd + 2;
  switch (type) {
    case "+": case "-": case ",": case "(": case "#": return [{ type, text: line }, next];
    case ":": return [Number(line), next];
    case "_": return [null, next];
    case "$": case "=": case "!": {
      const length = Number(line);
      if (length < 0) return [null, next];
      return [bytes.subarray(next, next + length), next + length + 2];
    }
    case "*": case ">": case "~": case "%": case "|": {
      const count = Number(line) * (type === "%" || type === "|" ? 2 : 1);
      const items = [];
      for (let i = 0; i < count; i++) {
        const [item, after] = parse(bytes, next);
        items.push(item);
        next = after;
      }
      if (type === "|") {
        const [value, after] = parse(bytes, next);
        return [{ attributes: items, value }, after];
      }
      items.kind = type;
      return [items, next];
    }
    default: throw new Error(`unexpected RESP type ${type}`);
  }
}

const lenient = new TextDecoder();  // one decoder for every subject and kind: made once, not per message

function text(bytes) {
  return lenient.decode(bytes);
}

// ---------------------------------------------------------------- patterns

// A subject pattern ("*" one token, ">" the rest) as a Redis glob that matches at least
// what it matches; the page then keeps exactly the matching subjects.
function globFor(pattern) {
  return pattern.split(".").map((token) =>
    token === "*" || token === ">" ? "*" : token.replace(/[\\*?[\]]/g, (c) => "\\" + c)).join(".");
}

// Internal subjects (first token starting with "_": interest announcements, cache requests)
// are shown only to a pattern that names them, as a wildcard first token skips them.
function matcherFor(pattern) {
  const wanted = pattern.split(".");
  return (subject) => {
    const tokens = subject.split(".");
    if (tokens[0].startsWith("_") && !wanted[0].startsWith("_")) return false;
    for (let i = 0; i < wanted.length; i++) {
      if (wanted[i] === ">") return tokens.length > i;
      if (i >= tokens.length || (wanted[i] !== "*" && wanted[i] !== tokens[i])) return false;
    }
    return tokens.length === wanted.length;
  };
}

// ---------------------------------------------------------------- the token (gateways with --users)

function token() {
  return sessionStorage.getItem(TOKEN_KEY) || "";
}

// credentials "omit": a 401 never opens the browser's own password dialog
function authorized(options = {}) {
  const headers = token() ? { Authorization: `Bearer ${token()}` } : {};
  return { ...options, headers, credentials: "omit" };
}

function askForToken(reason) {
  $("login-reason").textContent = reason;
  $("login-form").hidden = false;
}

$("login-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token").value.trim());
  $("token").value = "";
  $("login-form").hidden = true;
  start();
});

// ---------------------------------------------------------------- the socket

function connect(pattern) {
  if (state.socket) state.socket.close(1000, "new pattern");
  state.pattern = pattern;
  state.matcher = matcherFor(pattern);
  const scheme = location.protocol === "https:" ? "wss:" : "ws:";
  const credential = token() ? `&access_token=${encodeURIComponent(token())}` : "";
  const socket = new WebSocket(`${scheme}//${location.host}/resp?seq=1${credential}`);
  socket.binaryType = "arraybuffer";
  state.socket = socket;
  setStatus("connecting", `connecting (${pattern})`);
  socket.onopen = () => {
    socket.send(command("HELLO", "3"));
    socket.send(command("PSUBSCRIBE", globFor(pattern)));
  };
  socket.onmessage = (event) => {
    if (socket !== state.socket) return;
    const [value] = parse(new Uint8Array(event.data), 0);
    received(value);
  };
  socket.onclose = (event) => {
    if (socket !== state.socket) return;
    if (!$("login-form").hidden) setStatus("closed", "waiting for a token");
    else setStatus("closed", `closed ${event.code} ${event.reason}`);
  };
}

function received(value) {
  let seq = 0;
  if (value && value.attributes) {
    for (let i = 0; i + 1 < value.attributes.length; i += 2) {
      if (value.attributes[i].text === "seq") seq = value.attributes[i + 1];
    }
    value = value.value;
  }
  if (!Array.isArray(value) || value.length === 0 || !(value[0] instanceof Uint8Array)) {
    if (value && value.type === "-") setStatus("closed", value.text);
    return;
  }
  const kind = text(value[0]);
  if (kind === "psubscribe") { setStatus("open", `subscribed to ${state.pattern}`); return; }
  if (kind !== "pmessage") return;
  const subject = text(value[2]);
  if (!state.matcher(subject)) return;
  message(seq, subject, value[3]);
}

function message(seq, subject, data) {
  state.total += 1;
  if (seq > state.lastSeq) state.lastSeq = seq;
  let entry = state.subjects.get(subject);
  if (!entry) { entry = { count: 0, seq: 0, value: null, counted: 0 }; state.subjects.set(subject, entry); }
  entry.count += 1;
  entry.seq = seq;
  entry.value = data;
  state.recent.push({ seq, subject, data });
  if (state.recent.length > 2 * SHOWN_MESSAGES) state.recent.splice(0, state.recent.length - SHOWN_MESSAGES);
  state.dirty = true;
}

function setStatus(kind, label) {
  const status = $("status");
  status.dataset.state = kind;
  status.textContent = label;
}

// ---------------------------------------------------------------- drawing (sampled)

function preview(data) {
  let shown;
  try { shown = decoder.decode(data.subarray(0, 4 * PREVIEW)); } catch (e) {
    shown = Array.from(data.subarray(0, PREVIEW / 2), (b) => b.toString(16).padStart(2, "0")).join(" ");
  }
  return shown.length > PREVIEW ? shown.slice(0, PREVIEW) + "…" : shown;
}

function rows(tbody, items, cells) {
  const fragment = document.createDocumentFragment();
  for (const item of items) {
    const tr = document.createElement("tr");
    for (const [value, cls] of cells(item)) {
      const td = document.createElement("td");
      td.textContent = value;
      if (cls) td.className = cls;
      tr.appendChild(td);
    }
    fragment.appendChild(tr);
  }
  tbody.replaceChildren(fragment);
}

function drawTables() {
  if (!state.dirty) return;
  state.dirty = false;
  $("total").textContent = state.total;
  $("last-seq").textContent = state.lastSeq || "-";
  const newest = state.recent.slice(-SHOWN_MESSAGES).reverse();
  rows($("messages").tBodies[0], newest, (m) => [[m.seq || "-"], [m.subject], [m.data.length], [preview(m.data), "payload"]]);
  const busiest = [...state.subjects.entries()].sort((a, b) => b[1].count - a[1].count).slice(0, SHOWN_SUBJECTS);
  rows($("last").tBodies[0], busiest, ([subject, e]) => [[subject], [e.count], [e.seq || "-"], [preview(e.value), "payload"]]);
}

function tickSecond() {
  const second = new Map();
  for (const [subject, entry] of state.subjects) {
    const delta = entry.count - entry.counted;
    if (delta) second.set(subject, delta);
    entry.counted = entry.count;
  }
  state.history.push(second);
  if (state.history.length > CHART_SECONDS) state.history.shift();
  state.rate = state.total - state.lastSecondTotal;
  state.lastSecondTotal = state.total;
  $("rate").textContent = state.rate;
  drawChart();
}

function drawChart() {
  const canvas = $("chart");
  const ctx = canvas.getContext("2d");
  const { width, height } = canvas;
  ctx.clearRect(0, 0, width, height);
  const totals = new Map();
  for (const second of state.history) for (const [s, n] of second) totals.set(s, (totals.get(s) || 0) + n);
  const series = [...totals.entries()].sort((a, b) => b[1] - a[1]).slice(0, CHART_SERIES).map(([s]) => s);
  let max = 1;
  for (const second of state.history) for (const s of series) max = Math.max(max, second.get(s) || 0);
  ctx.strokeStyle = "#222a33";
  ctx.beginPath();
  for (let y = 0; y <= 4; y++) { ctx.moveTo(0, (height - 1) * y / 4); ctx.lineTo(width, (height - 1) * y / 4); }
  ctx.stroke();
  const step = width / (CHART_SECONDS - 1);
  const offset = CHART_SECONDS - state.history.length;
  let points = 0;
  series.forEach((subject, index) => {
    ctx.strokeStyle = COLORS[index % COLORS.length];
    ctx.lineWidth = 2;
    ctx.beginPath();
    state.history.forEach((second, i) => {
      const x = (offset + i) * step;
      const y = height - 2 - (height - 4) * (second.get(subject) || 0) / max;
      if (i === 0) ctx.moveTo(x, y); else ctx.lineTo(x, y);
      points += 1;
    });
    ctx.stroke();
    const latest = state.history[state.history.length - 1];  // the newest second, as a dot
    ctx.fillStyle = COLORS[index % COLORS.length];
    ctx.beginPath();
    ctx.arc(width - 4, height - 2 - (height - 4) * (latest.get(subject) || 0) / max, 3, 0, 2 * Math.PI);
    ctx.fill();
  });
  ctx.fillStyle = "#9fb3c8";
  ctx.fillText(`${max} msgs/s`, 4, 12);
  $("legend").replaceChildren(...series.map((subject, index) => {
    const li = document.createElement("li");
    li.style.color = COLORS[index % COLORS.length];
    li.textContent = subject;
    return li;
  }));
  canvas.dataset.draws = String(Number(canvas.dataset.draws) + 1);
  canvas.dataset.points = String(points);
  canvas.dataset.series = String(series.length);
}

// The gateway's stream position and losses, from its Prometheus counters; whether the
// gateway wants a token (401). Every refused token counts as a failed login from this
// address, and a few slow its logins down (429), so a token is not sent again once refused
// (no poll while the page asks for one) and one poll at most is in flight.
let polling = false;

async function pollMetrics() {
  if (polling || !$("login-form").hidden) return;
  polling = true;
  try {
    const sent = token();
    const response = await fetch("/metrics", authorized({ cache: "no-store" }));
    if (sent !== token()) return;  // a newer token was typed meanwhile: this answer is about the old one
    if (response.status === 401) {
      askForToken(sent ? "the gateway refused this token" : "this gateway asks for a token");
      return;
    }
    if (response.status === 429) {  // too many failed logins lately: the gateway says when to retry
      askForToken((await response.text()).trim());
      return;
    }
    const body = await response.text();
    const value = (name) => {
      const match = body.match(new RegExp(`^${name}(?:\\{[^}]*\\})? (\\S+)$`, "m"));
      return match ? Number(match[1]) : 0;
    };
    $("position").textContent = value("fyrehose_gateway_position");
    $("lost").textContent = value("fyrehose_gateway_lost_total");
  } catch (e) {
    $("position").textContent = "unknown";
  } finally {
    polling = false;
  }
}

const TABLE_INTERVAL = 250;  // ms between two redraws of the tables
let lastTables = 0;

function frame(now) {
  if (now - lastTables >= TABLE_INTERVAL) {
    lastTables = now;
    drawTables();
  }
  requestAnimationFrame(frame);
}

$("subscribe-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const pattern = $("pattern").value.trim() || ">";
  state.recent = [];
  state.subjects = new Map();
  state.history = [];
  state.total = state.lastSecondTotal = 0;
  state.dirty = true;
  connect(pattern);
});

// Ask for a token if the gateway wants one, and subscribe (a users file may let anyone read).
async function start() {
  await pollMetrics();
  connect($("pattern").value.trim() || ">");
}

setInterval(tickSecond, 1000);
setInterval(pollMetrics, 1000);
requestAnimationFrame(frame);
start();
