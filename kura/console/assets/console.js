// Kura console: live pages, a WebCrypto Ed25519 key per browser (non-extractable, kept in
// IndexedDB), login by signing a challenge, and approvals signed here over the bytes
// PROTOCOL.md defines, from content this page has re-hashed itself. Nothing from a record
// is ever put into the page as HTML: it is parsed as JSON and set as text.
"use strict";
// Failures a test (or a curious person, in the devtools) can read back.
window.__errors = [];
window.addEventListener("error", (e) => window.__errors.push(String(e.message)));
window.addEventListener("unhandledrejection", (e) => window.__errors.push(String(e.reason)));

const enc = new TextEncoder();
const hex = (buf) => Array.from(new Uint8Array(buf), (b) => b.toString(16).padStart(2, "0")).join("");

// RFC 8785: keys sorted by UTF-16 code units, ES2015 number and string serialisation.
function jcs(v) {
  if (v === null || typeof v !== "object") return JSON.stringify(v);
  if (Array.isArray(v)) return "[" + v.map(jcs).join(",") + "]";
  return "{" + Object.keys(v).sort().map((k) => JSON.stringify(k) + ":" + jcs(v[k])).join(",") + "}";
}

async function sha256hex(text) {
  return hex(await crypto.subtle.digest("SHA-256", enc.encode(text)));
}

// The record hash of PROTOCOL.md: SHA-256 of {author_id, content, record_type}, the content
// being the record's canonical text exactly as received.
async function recordHash(recordType, authorId, contentText) {
  return sha256hex('{"author_id":' + jcs(authorId) + ',"content":' + contentText + ',"record_type":' + jcs(recordType) + "}");
}

// --- the browser's key -------------------------------------------------------------
function idb() {
  return new Promise((resolve, reject) => {
    const r = indexedDB.open("kura-console", 1);
    r.onupgradeneeded = () => r.result.createObjectStore("keys");
    r.onsuccess = () => resolve(r.result);
    r.onerror = () => reject(r.error);
  });
}
async function idbDo(mode, f) {
  const db = await idb();
  return new Promise((resolve, reject) => {
    const tx = db.transaction("keys", mode);
    const req = f(tx.objectStore("keys"));
    tx.oncomplete = () => resolve(req.result);
    tx.onerror = () => reject(tx.error);
  });
}
const loadKey = () => idbDo("readonly", (s) => s.get("device"));
const saveKey = (k) => idbDo("readwrite", (s) => s.put(k, "device"));

async function makeKey(name) {
  // Non-extractable: the private key can sign in this browser and can never be read out.
  const pair = await crypto.subtle.generateKey({ name: "Ed25519" }, false, ["sign", "verify"]);
  const pub = hex(await crypto.subtle.exportKey("raw", pair.publicKey));
  const k = { name, publicKey: pub, pair };
  await saveKey(k);
  return k;
}
async function sign(key, bytes) {
  return hex(await crypto.subtle.sign({ name: "Ed25519" }, key.pair.privateKey, bytes));
}

const csrf = () => document.querySelector('meta[name="kura-csrf"]')?.content || "";
function say(el, text, bad) {
  if (!el) return;
  el.textContent = text;
  el.classList.toggle("fail", !!bad);
  el.classList.toggle("ok", !bad);
}

// --- enrol and log in ---------------------------------------------------------------
function configFor(name, pub) {
  return "# /etc/kura/serve.toml: who may log in to the console\n[[console.users]]\nname = " + JSON.stringify(name) +
    "\npublic_key = " + JSON.stringify(pub) + "\n\n# aegis's config: whose signed decisions count\n[[aegis.approvers]]\nname = " +
    JSON.stringify(name) + "\npublic_key = " + JSON.stringify(pub) + "\n";
}
async function initEnrol() {
  const root = document.getElementById("enrol");
  if (!root) return;
  const out = root.querySelector(".outcome");
  const show = (k) => {
    document.getElementById("enrol-key").textContent = k.publicKey;
    document.getElementById("enrol-config").textContent = configFor(k.name, k.publicKey);
    root.querySelector(".result").hidden = false;
  };
  // The button works from the first moment: a click while the stored key is still being
  // read (IndexedDB can take a while on a fresh profile) was lost before.
  let made = false;
  document.getElementById("enrol-button").addEventListener("click", async () => {
    const name = document.getElementById("enrol-name").value.trim();
    if (!/^[^\s:]{1,64}$/.test(name)) return say(out, "A name is one word without ':'.", true);
    made = true;
    try {
      show(await makeKey(name));
      say(out, "Key made. It never leaves this browser.");
    } catch (e) {
      say(out, "This browser cannot make an Ed25519 key: " + e, true);
    }
  });
  const existing = await loadKey().catch(() => null);
  if (existing && !made) {
    document.getElementById("enrol-name").value = existing.name;
    show(existing);
    say(out, "This browser already has a key; making a new one replaces it.");
  }
}
async function initLogin() {
  const root = document.getElementById("login");
  if (!root) return;
  const out = root.querySelector(".outcome");
  document.getElementById("login-button").addEventListener("click", async () => {
    const key = await loadKey().catch(() => null);
    if (!key) return say(out, "No key in this browser: enrol it first.", true);
    const challenge = root.dataset.challenge;
    const bytes = enc.encode("kura.console.login.v1\n" + challenge + "\n" + location.origin);
    const r = await fetch("/api/login", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ challenge, public_key: key.publicKey, signature: await sign(key, bytes) }),
    });
    const j = await r.json().catch(() => ({}));
    if (r.ok && j.ok) location.href = "/";
    else say(out, j.message || "Login refused.", true);
  });
}

// --- what a person reads ----------------------------------------------------------------
// The characters the CLI's escape_controls escapes (proto::text::is_hidden): controls but tab
// and newline, bidi controls, zero-width and invisible characters, tag characters. Shown as
// \u{..}, they can neither reorder nor hide what a person is asked to sign.
const HIDDEN = /[\u0000-\u0008\u000b-\u001f\u007f-\u009f\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff\u{e0000}-\u{e007f}]/gu;
function escapeControls(text) {
  return String(text).replace(HIDDEN, (c) => (c === "\r" ? "\\r" : "\\u{" + c.codePointAt(0).toString(16) + "}"));
}
// The distinct hidden characters in `text`, as U+XXXX.
function hiddenIn(text) {
  const found = new Set();
  for (const m of String(text).matchAll(HIDDEN)) found.add("U+" + m[0].codePointAt(0).toString(16).toUpperCase().padStart(4, "0"));
  return [...found];
}
// JSON for editing: hidden characters as \uXXXX escapes, which parse back to the same value.
function editableJson(v) {
  return JSON.stringify(v, null, 2).replace(HIDDEN, (c) =>
    Array.from({ length: c.length }, (_, i) => "\\u" + c.charCodeAt(i).toString(16).padStart(4, "0")).join(""));
}
// Timestamps in the viewer's local time, short; the exact RFC 3339 stays in the title.
function localTimes(root) {
  const now = new Date();
  for (const t of root.querySelectorAll("time[datetime]")) {
    const d = new Date(t.getAttribute("datetime"));
    if (isNaN(d)) continue;
    const sameDay = d.toDateString() === now.toDateString();
    t.textContent = sameDay
      ? d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit" })
      : d.toLocaleString([], { year: "numeric", month: "short", day: "numeric", hour: "2-digit", minute: "2-digit" });
  }
}

// --- approvals -----------------------------------------------------------------------
async function initApproval(article) {
  const check = article.querySelector(".check");
  const shown = article.querySelector(".verified");
  const form = article.querySelector("form.decide");
  const d = article.dataset;
  let content;
  try {
    content = JSON.parse(d.content);
    if (jcs(content) !== d.content) throw new Error("not canonical JSON");
  } catch (e) {
    return say(check, "Refused: the request's content is unreadable (" + e.message + "). Nothing to sign.", true);
  }
  const computed = await recordHash("approval.request", d.author, d.content);
  if (computed !== d.requestHash) {
    return say(check, "Refused: the content does not match the request's hash. Someone other than aegis's record is speaking; nothing is shown or signed.", true);
  }
  // Only now, and only from the verified content, the page shows what would run.
  const h = document.createElement("h3");
  h.textContent = escapeControls(String(content.tool_name) + " (" + String(content.effect) + ")");
  const pre = document.createElement("pre");
  pre.className = "arguments";
  pre.textContent = escapeControls(JSON.stringify(content.arguments, null, 2));
  shown.replaceChildren(h, pre);
  shown.hidden = false;
  const hidden = hiddenIn(d.content);
  const flag = article.querySelector(".hidden-chars");
  if (flag && hidden.length) {
    flag.textContent = "\u26a0 This request holds hidden or direction-changing characters (" + hidden.join(", ") +
      "), shown escaped as \\u{202e} and the like: it may not do what it seems to at a glance.";
    flag.hidden = false;
  }
  say(check, "Verified in this browser: hash " + computed.slice(0, 16) + "… matches.");
  if (!form) return;
  form.hidden = false;
  const args = form.querySelector('textarea[name="arguments"]');
  args.value = editableJson(content.arguments);
  args.dataset.initial = args.value;
  const out = form.querySelector(".outcome");
  if (form.classList.contains("answer")) {
    // A question: shown from the verified content only; its choices offered.
    form.querySelector("q.question").textContent = escapeControls(String(content.arguments.question ?? ""));
    const list = form.querySelector("datalist");
    for (const c of Array.isArray(content.arguments.choices) ? content.arguments.choices : []) {
      const o = document.createElement("option");
      o.value = String(c);
      list.appendChild(o);
    }
  }
  // "Approve edited" only once the arguments say something else than the request.
  const editButton = form.querySelector("button.edit-approve");
  const edited = () => {
    try {
      return jcs(JSON.parse(args.value)) !== jcs(content.arguments);
    } catch {
      return true;
    }
  };
  if (editButton) {
    editButton.hidden = true;
    args.addEventListener("input", () => { editButton.hidden = !edited(); });
  }
  for (const b of form.querySelectorAll("button[data-decision]")) {
    b.addEventListener("click", () => decide(article, form, computed, b.dataset.decision, args, out));
  }
}

async function decide(article, form, requestHash, choice, argsField, out) {
  article.dataset.busy = "1";
  try {
    await decideNow(article, form, requestHash, choice, argsField, out);
  } catch (e) {
    say(out, "Not sent: " + e, true);
    article.dataset.decided = "refused";
  } finally {
    delete article.dataset.busy;
  }
}

async function decideNow(article, form, requestHash, choice, argsField, out) {
  const key = await loadKey().catch(() => null);
  if (!key) return say(out, "No key in this browser.", true);
  const d = article.dataset;
  const note = form.querySelector('input[name="note"]').value;
  const decision = {
    request_id: d.requestId,
    decision: choice === "deny" ? "deny" : "approve",
    approver: d.approver,
    note,
    signed_at: new Date().toISOString(),
  };
  if (choice === "deny" && !note.trim() && form.classList.contains("answer")) decision.note = "declined to answer";
  else if (choice === "deny" && !note.trim()) return say(out, "Say why you deny it.", true);
  if (choice === "answer") {
    // The question's own arguments, with the answer added: what the person signs.
    const answer = form.querySelector('input[name="answer"]').value;
    if (!answer.trim()) return say(out, "Write an answer first.", true);
    decision.arguments = Object.assign(JSON.parse(argsField.value), { answer });
  }
  if (choice === "approve-edited") {
    let edited;
    try {
      edited = JSON.parse(argsField.value);
    } catch (e) {
      return say(out, "The edited arguments are not JSON: " + e.message, true);
    }
    if (edited === null || typeof edited !== "object" || Array.isArray(edited)) {
      return say(out, "The edited arguments must be a JSON object.", true);
    }
    decision.arguments = edited;
  }
  const signing = Object.assign({ kind: "kura.approval.v1", request_hash: requestHash }, decision);
  decision.signature = await sign(key, enc.encode(jcs(signing)));
  for (const b of form.querySelectorAll("button")) b.disabled = true;
  const r = await fetch("/api/decide", {
    method: "POST",
    headers: { "content-type": "application/json", "x-kura-csrf": csrf() },
    body: JSON.stringify(decision),
  });
  const j = await r.json().catch(() => ({}));
  say(out, j.message || (r.ok ? "Sent." : "Refused."), !(r.ok && j.ok));
  article.dataset.decided = j.ok ? "ok" : "refused";
  if (!j.ok) for (const b of form.querySelectorAll("button")) b.disabled = false;
}

// --- writs ------------------------------------------------------------------------------
// RFC 3339 UTC to the second, as `kura writ` writes times.
const rfc3339 = (ms) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z");
// The writ the grant form describes; its id and times are fixed when the form is first
// read, so what was shown is what is signed.
function writFrom(form, fixed) {
  const v = (n) => form.elements[n].value.trim();
  const list = (n) => v(n).split(",").map((x) => x.trim()).filter((x) => x);
  const num = (n, label, digits) => {
    const text = v(n);
    if (!text) return undefined;
    if (!new RegExp("^\\d{1," + digits + "}$").test(text)) throw new Error(label + " is a whole number of at most " + digits + " digits");
    return Number(text);
  };
  const holder = v("holder");
  if (!/^(session|agent|user|role):[^\s]{1,128}$/.test(holder)) throw new Error("The holder is session:ID, agent:NAME, user:NAME or role:NAME.");
  const tools = list("tools");
  if (!tools.length) throw new Error("Give at least one tool glob, e.g. fs.read or fs.*");
  const budget = {};
  for (const [k, label] of [["tool_calls", "Tool calls"], ["tokens", "Tokens"], ["money_micros", "Money"]]) {
    const n = num(k, label, 12);
    if (n !== undefined) budget[k] = n;
  }
  const wall = num("wall_minutes", "Wall time", 9);
  if (wall !== undefined) budget.wall_ms = wall * 60000;
  const hours = num("hours", "Lasts", 6) ?? 24;
  if (hours < 1) throw new Error("A writ lasts at least an hour.");
  const body = {
    kind: "kura.writ.v1",
    id: fixed.id,
    holder,
    issuer: form.dataset.issuer,
    tools,
    paths: list("paths").length ? list("paths") : ["*"],
    ceiling: v("ceiling"),
    budget,
    issued_at: rfc3339(fixed.at),
    expires_at: rfc3339(fixed.at + hours * 3600000),
  };
  const dk = v("delegate_key").toLowerCase();
  if (dk) {
    if (!/^[0-9a-f]{64}$/.test(dk)) throw new Error("A delegate key is 64 hex digits (a key file's public_key).");
    body.delegate_key = dk;
  }
  return body;
}
function initGrant() {
  const form = document.getElementById("grant");
  if (!form) return;
  const preview = document.getElementById("writ-preview");
  const out = form.querySelector(".outcome");
  const fixed = { id: crypto.randomUUID(), at: Date.now() };
  let body = null;
  const show = () => {
    try {
      body = writFrom(form, fixed);
      preview.textContent = escapeControls(JSON.stringify(body, null, 2));
      say(out, "");
    } catch (e) {
      body = null;
      preview.textContent = "";
      say(out, e.message, true);
    }
  };
  form.addEventListener("input", show);
  form.addEventListener("change", show);
  document.getElementById("grant-button").addEventListener("click", () =>
    busyWhile(form, out, async () => {
      show();
      if (!body) return;
      const key = await loadKey().catch(() => null);
      if (!key) return say(out, "No key in this browser.", true);
      const writ = { body, key: key.publicKey, signature: await sign(key, enc.encode(jcs(body))) };
      if (!(await send("/api/writs/grant", writ, out))) return;
      // Granted: a fresh statement for the next one, and the list may refresh to show it.
      document.body.dataset.granted = body.id;
      form.reset();
      Object.assign(fixed, { id: crypto.randomUUID(), at: Date.now() });
      form.closest("details").open = false;
      refresh();
    }));
}
function initRevoke(form) {
  const out = form.querySelector(".outcome");
  form.querySelector("button").addEventListener("click", () =>
    busyWhile(form, out, async () => {
      const reason = form.elements.reason.value.trim();
      if (!reason) return say(out, "Say why you revoke it.", true);
      const key = await loadKey().catch(() => null);
      if (!key) return say(out, "No key in this browser.", true);
      const body = { kind: "kura.revocation.v1", writ_id: form.dataset.writ, by: form.dataset.by, reason, revoked_at: rfc3339(Date.now()) };
      if (!(await send("/api/writs/revoke", { body, key: key.publicKey, signature: await sign(key, enc.encode(jcs(body))) }, out))) return;
      document.body.dataset.revoked = body.writ_id;
      form.reset();
      refresh();
    }));
}
// Runs `f` with the form marked busy (a live refresh waits) and its buttons off.
async function busyWhile(form, out, f) {
  form.dataset.busy = "1";
  for (const b of form.querySelectorAll("button")) b.disabled = true;
  try {
    await f();
  } catch (e) {
    say(out, "Not sent: " + e, true);
  } finally {
    delete form.dataset.busy;
    for (const b of form.querySelectorAll("button")) b.disabled = false;
  }
}
async function send(path, statement, out) {
  const r = await fetch(path, {
    method: "POST",
    headers: { "content-type": "application/json", "x-kura-csrf": csrf() },
    body: JSON.stringify(statement),
  });
  const j = await r.json().catch(() => ({}));
  say(out, j.message || (r.ok ? "Sent." : "Refused."), !(r.ok && j.ok));
  return r.ok && j.ok;
}
function initWrits(root) {
  initGrant();
  root.querySelectorAll("form.revoke").forEach((f) => initRevoke(f));
}

function initPage() {
  localTimes(document);
  document.querySelectorAll("article.approval").forEach((a) => initApproval(a));
  initWrits(document);
  initEnrol();
  initLogin();
}

// --- live ------------------------------------------------------------------------------
let busy = false, again = false;
// The page as the server last rendered it: a refresh that renders the same is not applied.
let served = "";
// Never throw away what a person is typing or deciding.
function inUse() {
  const main = document.getElementById("main");
  if (!main || main.querySelector("[data-busy], details.grant[open]")) return true;
  for (const f of main.querySelectorAll("input, textarea")) {
    if (f.value !== f.defaultValue && !(f.tagName === "TEXTAREA" && f.dataset.initial === f.value)) return true;
  }
  const a = document.activeElement;
  return !!(a && a.closest("main") && /^(INPUT|TEXTAREA|SELECT)$/.test(a.tagName));
}
async function refresh() {
  if (busy) { again = true; return; }
  busy = true;
  try {
    if (inUse()) { setTimeout(refresh, 1000); return; }
    const r = await fetch(location.href, { credentials: "same-origin" });
    if (r.redirected) { location.href = r.url; return; }
    const doc = new DOMParser().parseFromString(await r.text(), "text/html");
    const main = doc.getElementById("main");
    if (main && main.outerHTML !== served && !inUse()) {
      served = main.outerHTML;
      document.getElementById("main").replaceWith(main);
      const nav = doc.querySelector("header nav");
      if (nav) document.querySelector("header nav")?.replaceWith(nav);
      localTimes(main);
      document.querySelectorAll("article.approval").forEach((a) => initApproval(a));
      initWrits(main);
      document.body.dataset.refreshed = String(Number(document.body.dataset.refreshed || 0) + 1);
    }
  } finally {
    busy = false;
    if (again) { again = false; setTimeout(refresh, 100); }
  }
}

document.addEventListener("DOMContentLoaded", () => {
  served = document.getElementById("main")?.outerHTML || "";
  initPage();
  document.getElementById("logout")?.addEventListener("click", async () => {
    await fetch("/api/logout", { method: "POST", headers: { "x-kura-csrf": csrf() } });
    location.href = "/login";
  });
  if (document.body.dataset.live) {
    const es = new EventSource("/events");
    let t = null;
    es.addEventListener("change", () => { clearTimeout(t); t = setTimeout(refresh, 100); });
  }
});
