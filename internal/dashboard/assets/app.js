// The limbs dashboard: an ES module, no build step. Everything it loads
// and every request it makes goes to this origin: the API of limbs serve
// (/v1/..., authenticated by the session cookie, with the CSRF header on
// every change) and the dashboard's own /ui/... routes.
import { Terminal } from './vendor/xterm/xterm.mjs';
import { FitAddon } from './vendor/addon-fit/addon-fit.mjs';
import { theme, setTheme, dark } from './theme.js';

const $ = (sel, root = document) => root.querySelector(sel);
const main = $('#main');
let csrf = '';
let cleanups = [];

// ---------- small helpers ----------

function el(tag, attrs = {}, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const kid of kids.flat()) {
    if (kid === null || kid === undefined || kid === false) continue;
    e.append(kid instanceof Node ? kid : document.createTextNode(String(kid)));
  }
  return e;
}

function toast(msg, info = false) {
  const d = el('div', { class: info ? 'info' : '', text: (info ? 'ℹ ' : '✖ ') + msg });
  $('#toast').append(d);
  setTimeout(() => d.remove(), info ? 3000 : 8000);
}

class APIError extends Error {
  constructor(status, code, message) { super(message); this.status = status; this.code = code; }
}

async function api(method, path, body) {
  const opts = { method, headers: {}, credentials: 'same-origin', cache: 'no-store' };
  if (method !== 'GET' && method !== 'HEAD') opts.headers['X-Limbs-Csrf'] = csrf;
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  const r = await fetch(path, opts);
  if (r.status === 401) { location.href = '/login'; throw new APIError(401, 'unauthorized', 'logged out'); }
  const text = await r.text();
  let j = null;
  try { j = text ? JSON.parse(text) : null; } catch { /* raw */ }
  if (!r.ok) {
    const e = j && j.error ? j.error : { code: String(r.status), message: text || r.statusText };
    throw new APIError(r.status, e.code, e.message);
  }
  return j === null ? text : j;
}

async function rawGet(path) {
  const r = await fetch(path, { credentials: 'same-origin', cache: 'no-store' });
  if (!r.ok) {
    let msg = r.statusText;
    try { msg = (await r.json()).error.message; } catch { /* keep */ }
    throw new APIError(r.status, String(r.status), msg);
  }
  return new Uint8Array(await r.arrayBuffer());
}

const enc = new TextEncoder();
const dec = new TextDecoder();
const pathEsc = encodeURIComponent;

function ago(t, now = Date.now()) {
  const s = Math.max(0, (now - new Date(t).getTime()) / 1000);
  if (s < 60) return Math.floor(s) + 's';
  if (s < 3600) return Math.floor(s / 60) + 'm';
  if (s < 86400) return Math.floor(s / 3600) + 'h';
  return Math.floor(s / 86400) + 'd';
}
function bytes(n) {
  if (n === undefined || n === null) return '';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(n < 10 ? 1 : 0) : n) + ' ' + u[i];
}
function dur(ms) {
  if (ms === undefined || ms === null) return '';
  if (ms < 1000) return ms + ' ms';
  if (ms < 60000) return (ms / 1000).toFixed(ms < 10000 ? 2 : 1) + ' s';
  return Math.floor(ms / 60000) + 'm ' + Math.round((ms % 60000) / 1000) + 's';
}
// stripANSI turns a terminal's bytes into text for a <pre>.
function stripANSI(s) {
  return s.replace(/\x1b\][^\x07\x1b]*(\x07|\x1b\\)/g, '')
    .replace(/\x1b\[[0-?]*[ -/]*[@-~]/g, '')
    .replace(/\x1b[@-Z\\-_]/g, '')
    .replace(/\r\n/g, '\n').replace(/\r/g, '\n')
    .replace(/[\x00-\x08\x0b-\x1f\x7f]/g, '');
}
function b64bytes(s) {
  const bin = atob(s);
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  return out;
}

const STATUS = {
  running: ['●', 'running'], creating: ['◌', 'creating'], stopped: ['■', 'stopped'],
  failed: ['✖', 'failed'], deleted: ['⌫', 'deleted'],
};
function badge(status) {
  const [g, word] = STATUS[status] || ['?', status || 'unknown'];
  return el('span', { class: 'badge s-' + (STATUS[status] ? status : 'stopped') }, el('span', { class: 'g', 'aria-hidden': 'true', text: g }), word);
}
function exitBadge(code, status) {
  if (status === 'running' || (code === undefined && !status)) return el('span', { class: 'exit-run', text: '⋯ running' });
  if (code === null || code === undefined) return el('span', { class: 'exit-bad', text: '? ' + (status || 'unknown') });
  return code === 0 ? el('span', { class: 'exit-ok', text: '✔ 0' }) : el('span', { class: 'exit-bad', text: '✖ ' + code });
}

// Failure kinds, as the overview groups them.
const KINDS = {
  infrastructure: ['⚙', 'infrastructure'], oom: ['▲', 'out of memory'],
  command: ['✖', 'command exit'], agent: ['⊘', 'agent limit'],
};
function failureKind(sb) {
  const s = sb.summary || {};
  const reason = (sb.reason || '').toLowerCase();
  if (sb.status === 'failed') return reason.includes('oom') ? 'oom' : 'infrastructure';
  if (s.oom || reason.includes('oom')) return 'oom';
  if (s.agent && !['finished', 'cancelled', 'canceled'].includes(s.agent)) return 'agent';
  if (s.last && s.last.exit_code !== undefined && s.last.exit_code !== null && s.last.exit_code !== 0) return 'command';
  return '';
}
function failureText(sb) {
  const k = failureKind(sb);
  if (!k) return '';
  const s = sb.summary || {};
  switch (k) {
    case 'infrastructure': return (sb.reason || 'failed') + (sb.message ? ': ' + sb.message : '');
    case 'oom': return 'out of memory' + (sb.reason ? ' (' + sb.reason + ')' : '');
    case 'agent': return 'agent stopped: ' + s.agent;
    case 'command': return 'exit ' + s.last.exit_code + (s.last.text ? ': ' + s.last.text : '');
  }
  return '';
}

function confirmDialog(text, ok = 'OK') {
  const d = $('#confirm');
  $('#confirm-text').textContent = text;
  $('#confirm-ok').textContent = ok;
  d.returnValue = '';
  d.showModal();
  return new Promise(res => d.addEventListener('close', () => res(d.returnValue === 'ok'), { once: true }));
}

function onCleanup(f) { cleanups.push(f); }
function runCleanups() {
  for (const f of cleanups.splice(0)) { try { f(); } catch { /* gone */ } }
}

// follow opens an EventSource on path and hands each event of the given
// types to fn; the browser reconnects with Last-Event-ID by itself.
function follow(path, types, fn) {
  const es = new EventSource(path, { withCredentials: false });
  for (const t of types) es.addEventListener(t, m => { try { fn(JSON.parse(m.data)); } catch (e) { console.error(e); } });
  es.onerror = () => setLive('reconnecting…');
  es.onopen = () => setLive('● live');
  onCleanup(() => es.close());
  return es;
}
function setLive(s) { $('#live').textContent = s; }

const SANDBOX_TYPES = ['sandbox.created', 'sandbox.claimed', 'sandbox.started', 'sandbox.stopped', 'sandbox.died', 'sandbox.oom',
  'sandbox.recovered', 'sandbox.recovery_failed', 'sandbox.adopted', 'sandbox.missing', 'sandbox.deleted'];
const ALL_TYPES = [...SANDBOX_TYPES, 'api.call', 'session.created', 'session.restarted', 'session.exited', 'session.closed',
  'session.resized', 'command.started', 'command.finished', 'command.waiting', 'command.signal', 'output', 'input',
  'file.written', 'file.edited', 'file.deleted', 'file.changed', 'log.gap', 'agent.request', 'agent.message',
  'agent.tool_call', 'agent.observation', 'agent.usage', 'agent.finished'];

// ---------- the router ----------

function route() {
  runCleanups();
  setLive('');
  main.replaceChildren();
  const h = location.hash.replace(/^#/, '') || '/';
  const parts = h.split('?')[0].split('/').filter(Boolean).map(decodeURIComponent);
  const q = new URLSearchParams(h.split('?')[1] || '');
  try {
    if (parts[0] === 'sb' && parts[1]) return sandboxView(parts[1], parts[2] || 'terminal', q);
    if (parts[0] === 'replay' && parts[1]) return replayView(parts[1], parts[2] || '', q);
    return overview(q);
  } catch (e) { toast(e.message); }
}
function crumbs(...items) {
  $('#crumbs').replaceChildren(...items.flatMap((it, i) => [i ? ' / ' : '', it]));
}

// ---------- overview ----------

const ROW = 44;

async function overview(q) {
  crumbs(el('span', { text: 'Overview' }));
  const rows = new Map(); // id -> sandbox row (wire.Sandbox + summary)
  let deleted = [];
  let usage = new Map();
  let filtered = [];
  let sel = 0;
  const f = { text: q.get('q') || '', status: q.get('status') || '', kind: q.get('kind') || '' };

  const counts = el('div', { class: 'counts', role: 'group', 'aria-label': 'Counts' });
  const failures = el('div', { class: 'failures', role: 'group', 'aria-label': 'Failures by kind' });
  const search = el('input', { type: 'search', id: 'search', placeholder: 'Search name, id, image, command, reason  (/)', value: f.text, 'aria-label': 'Search sandboxes' });
  const status = el('select', { id: 'status-filter', 'aria-label': 'Status' },
    ...['', 'running', 'creating', 'stopped', 'failed', 'deleted'].map(s => el('option', { value: s, text: s || 'any status', selected: s === f.status })));
  const createBtn = el('button', { type: 'button', id: 'create-btn', text: '+ Create sandbox' });
  const shown = el('span', { class: 'muted', id: 'shown' });
  const list = el('div', { class: 'vlist', id: 'sandbox-list', role: 'grid', 'aria-label': 'Sandboxes', tabindex: '0' });
  const space = el('div', { class: 'vspace' });
  list.append(space);
  const head = el('div', { class: 'thead', role: 'row' },
    ...['Status', 'Name', 'Image', 'Age', 'Limits', 'CPU', 'Memory', 'Procs', 'Command', 'Failure'].map((t, i) => el('div', { role: 'columnheader', class: 'cell' + ([5, 6, 7].includes(i) ? ' num' : ''), text: t })));
  main.append(counts, el('div', { class: 'filters' }, search, status, failures, el('span', { class: 'spacer' }), shown, createBtn),
    el('div', { class: 'table' }, head, list));

  const now = () => Date.now();
  function matches(sb) {
    if (f.status && (sb.status || '') !== f.status) return false;
    if (f.kind && failureKind(sb) !== f.kind) return false;
    if (!f.text) return true;
    const s = sb.summary || {};
    const hay = [sb.id, sb.name, sb.image, sb.reason, sb.message, sb.provider, s.current && s.current.text, s.last && s.last.text].join(' ').toLowerCase();
    return f.text.toLowerCase().split(/\s+/).every(w => hay.includes(w));
  }
  function all() {
    const out = [...rows.values()];
    for (const d of deleted) out.push({ id: d.id, name: d.name || '', status: 'deleted', created_at: d.deleted, limits: {}, deletedAt: d.deleted });
    return out;
  }
  function recount() {
    const c = { all: 0, running: 0, creating: 0, stopped: 0, failed: 0 };
    const k = { infrastructure: 0, oom: 0, command: 0, agent: 0 };
    for (const sb of rows.values()) {
      c.all++;
      if (c[sb.status] !== undefined) c[sb.status]++;
      const kind = failureKind(sb);
      if (kind) k[kind]++;
    }
    const box = (key, label, n, cls) => el('button', {
      type: 'button', class: 'count ' + (cls || ''), 'aria-pressed': String(f.status === key || (key === '' && !f.status)),
      dataset: { status: key }, onclick: () => { f.status = key; status.value = key; refilter(); },
    }, el('b', { text: String(n) }), el('span', { text: label }));
    counts.replaceChildren(box('', 'sandboxes', c.all), box('running', '● running', c.running, 'ok'),
      box('creating', '◌ creating', c.creating), box('stopped', '■ stopped', c.stopped), box('failed', '✖ failed', c.failed, c.failed ? 'bad' : ''),
      box('deleted', '⌫ deleted, kept', deleted.length));
    failures.replaceChildren(el('span', { class: 'muted', text: 'Failures:' }), ...Object.entries(KINDS).map(([key, [g, label]]) =>
      el('button', {
        type: 'button', class: 'chip', 'aria-pressed': String(f.kind === key), dataset: { kind: key },
        onclick: () => { f.kind = f.kind === key ? '' : key; refilter(); },
      }, g + ' ' + label + ' ' + k[key])));
  }
  function refilter() {
    filtered = all().filter(matches);
    sel = Math.min(sel, Math.max(0, filtered.length - 1));
    space.style.height = (filtered.length * ROW) + 'px';
    shown.textContent = filtered.length + ' shown';
    recount();
    paint();
    const p = new URLSearchParams();
    if (f.text) p.set('q', f.text);
    if (f.status) p.set('status', f.status);
    if (f.kind) p.set('kind', f.kind);
    const h = '#/' + (p.toString() ? '?' + p : '');
    if (location.hash !== h) history.replaceState(null, '', h);
  }
  let painting = false;
  function paint() {
    if (painting) return;
    painting = true;
    requestAnimationFrame(() => {
      painting = false;
      const top = list.scrollTop, h = list.clientHeight || 600;
      const first = Math.max(0, Math.floor(top / ROW) - 8);
      const last = Math.min(filtered.length, Math.ceil((top + h) / ROW) + 8);
      const frag = [];
      const t = now();
      for (let i = first; i < last; i++) frag.push(rowEl(filtered[i], i, t));
      if (!filtered.length) frag.push(el('div', { class: 'empty', text: rows.size ? 'No sandbox matches the filter.' : 'No sandboxes yet. Create one with the button above, or `limbs sandbox create`.' }));
      space.replaceChildren(...frag);
    });
  }
  function rowEl(sb, i, t) {
    const s = sb.summary || {};
    const l = sb.limits || {};
    const u = usage.get(sb.id);
    const lim = [l.cpus ? l.cpus + ' CPU' : '', l.memory_mb ? l.memory_mb + ' MiB' : '', l.pids ? l.pids + ' pids' : ''].filter(Boolean).join(' · ') || '—';
    const cmd = s.current ? el('span', {}, el('span', { class: 'exit-run', text: '▶ ' }), s.current.text || '(typed in a terminal)')
      : s.last ? el('span', { class: 'muted' }, exitBadge(s.last.exit_code, s.last.status), ' ', s.last.text || '(typed in a terminal)') : el('span', { class: 'muted', text: '—' });
    const fk = failureKind(sb);
    const href = sb.status === 'deleted' ? '#/replay/' + pathEsc(sb.id) : '#/sb/' + pathEsc(sb.id);
    const r = el('div', {
      class: 'trow' + (i === sel ? ' sel' : ''), role: 'row', style: 'top:' + (i * ROW) + 'px', dataset: { id: sb.id, name: sb.name || '' },
      onclick: () => { location.hash = href; },
    },
      el('div', { class: 'cell', role: 'gridcell' }, badge(sb.status)),
      el('div', { class: 'cell', role: 'gridcell' }, el('a', { href, text: sb.name || sb.id, tabindex: '-1' }), el('small', { text: sb.name ? sb.id : (sb.provider || '') })),
      el('div', { class: 'cell mono', role: 'gridcell', title: sb.image || '', text: sb.image || '' }),
      el('div', { class: 'cell', role: 'gridcell', title: sb.created_at || '', text: sb.created_at ? ago(sb.created_at, t) : '' }),
      el('div', { class: 'cell muted', role: 'gridcell', text: lim }),
      el('div', { class: 'cell num', role: 'gridcell', title: u ? u.cpu_seconds.toFixed(1) + ' CPU seconds in all' : '', text: u ? (u.cpu_percent !== undefined ? u.cpu_percent.toFixed(1) + '%' : '…') : '' }),
      el('div', { class: 'cell num', role: 'gridcell', title: u && u.memory_limit_bytes ? 'of ' + bytes(u.memory_limit_bytes) : '', text: u ? bytes(u.memory_bytes) : '' }),
      el('div', { class: 'cell num', role: 'gridcell', text: u ? String(u.pids) : '' }),
      el('div', { class: 'cell mono', role: 'gridcell', title: (s.current && s.current.text) || '' }, cmd),
      el('div', { class: 'cell', role: 'gridcell', title: failureText(sb) }, fk ? el('span', { class: 'exit-bad', text: KINDS[fk][0] + ' ' + failureText(sb) }) : ''),
    );
    return r;
  }
  list.addEventListener('scroll', paint, { passive: true });
  const ro = new ResizeObserver(paint);
  ro.observe(list);
  onCleanup(() => ro.disconnect());
  search.addEventListener('input', () => { f.text = search.value.trim(); sel = 0; list.scrollTop = 0; refilter(); });
  status.addEventListener('change', () => { f.status = status.value; refilter(); });
  createBtn.addEventListener('click', createSandbox);
  list.addEventListener('keydown', e => {
    const move = d => {
      sel = Math.max(0, Math.min(filtered.length - 1, sel + d));
      const y = sel * ROW;
      if (y < list.scrollTop) list.scrollTop = y;
      else if (y + ROW > list.scrollTop + list.clientHeight) list.scrollTop = y + ROW - list.clientHeight;
      paint();
    };
    if (e.key === 'ArrowDown' || e.key === 'j') { move(1); e.preventDefault(); }
    else if (e.key === 'ArrowUp' || e.key === 'k') { move(-1); e.preventDefault(); }
    else if (e.key === 'PageDown') { move(10); e.preventDefault(); }
    else if (e.key === 'PageUp') { move(-10); e.preventDefault(); }
    else if (e.key === 'Enter' && filtered[sel]) {
      const sb = filtered[sel];
      location.hash = sb.status === 'deleted' ? '#/replay/' + pathEsc(sb.id) : '#/sb/' + pathEsc(sb.id);
    }
  });

  const t0 = performance.now();
  const ov = await api('GET', '/ui/overview');
  for (const sb of ov.sandboxes) rows.set(sb.id, sb);
  deleted = ov.deleted || [];
  refilter();
  await new Promise(r => requestAnimationFrame(() => r()));
  window.limbsFirstRender = performance.now() - t0;
  document.body.dataset.ready = 'overview';

  // One stream for every sandbox, from where the snapshot is.
  const types = ov.types.split(',');
  const known = [...SANDBOX_TYPES, 'command.started', 'command.finished', 'agent.finished'].filter(t => types.some(p => p === t || (p.endsWith('*') && t.startsWith(p.slice(0, -1)))));
  const refetch = new Set();
  let dirty = false;
  const flush = setInterval(async () => {
    if (refetch.size) {
      const ids = [...refetch].slice(0, 50);
      ids.forEach(id => refetch.delete(id));
      await Promise.all(ids.map(async id => {
        try {
          const sb = await api('GET', '/v1/sandboxes/' + pathEsc(id));
          rows.set(id, { ...sb, summary: (rows.get(id) || {}).summary });
        } catch (e) { if (e.status === 404) rows.delete(id); }
      }));
      dirty = true;
    }
    if (dirty) { dirty = false; refilter(); }
  }, 500);
  onCleanup(() => clearInterval(flush));
  follow('/v1/events?follow=true&from=' + (ov.cursor + 1) + '&type=' + encodeURIComponent(ov.types), known, ev => {
    const id = ev.sandbox;
    if (!id) return;
    const sb = rows.get(id);
    if (ev.type === 'sandbox.deleted') {
      if (sb) { rows.delete(id); deleted.unshift({ id, name: sb.name, deleted: ev.time }); }
      dirty = true;
      return;
    }
    if (ev.type.startsWith('sandbox.')) { refetch.add(id); }
    if (!sb) return;
    const s = sb.summary = sb.summary || {};
    const d = ev.data || {};
    switch (ev.type) {
      case 'command.started':
        s.current = { session: ev.session, id: ev.command, text: (d.text || '').slice(0, 200), cwd: d.cwd, started: ev.time };
        break;
      case 'command.finished': {
        const c = { session: ev.session, id: ev.command, cwd: d.cwd, status: d.status, exit_code: d.exit_code };
        if (s.current && s.current.id === ev.command && s.current.session === ev.session) { c.text = s.current.text; c.started = s.current.started; s.current = null; }
        s.last = c;
        if (d.exit_code) s.failed_commands = (s.failed_commands || 0) + 1;
        break;
      }
      case 'sandbox.oom': s.oom = true; break;
      case 'sandbox.stopped': case 'sandbox.died': s.current = null; break;
      case 'agent.finished': s.agent = d.reason; break;
    }
    dirty = true;
  });

  // Resource use: one request for every sandbox, every 5 s.
  async function pollUsage() {
    try {
      const u = await api('GET', '/v1/stats');
      usage = new Map(u.stats.map(x => [x.sandbox, x]));
      paint();
    } catch { /* next time */ }
  }
  pollUsage();
  const iv = setInterval(pollUsage, 5000);
  onCleanup(() => clearInterval(iv));
  const ageTick = setInterval(paint, 30000);
  onCleanup(() => clearInterval(ageTick));
  list.focus({ preventScroll: true });
}

async function createSandbox() {
  const d = $('#create');
  $('#create-form').reset();
  d.returnValue = '';
  d.showModal();
  await new Promise(res => d.addEventListener('close', res, { once: true }));
  if (d.returnValue !== 'ok') return;
  const body = {};
  for (const k of ['name', 'image', 'provider']) {
    const v = $('#create-' + k).value.trim();
    if (v) body[k] = v;
  }
  toast('creating a sandbox…', true);
  try {
    const sb = await api('POST', '/v1/sandboxes', body);
    location.hash = '#/sb/' + pathEsc(sb.id);
  } catch (e) { toast('create: ' + e.message); }
}

// ---------- one sandbox ----------

// readEvents reads a sandbox's log from seq 1 (at most pages pages) of
// the given types; returns {events, next}.
async function readEvents(id, types, pages = 20) {
  let from = 1, out = [];
  for (let i = 0; i < pages; i++) {
    const p = await api('GET', '/v1/sandboxes/' + pathEsc(id) + '/events?from=' + from + (types ? '&type=' + encodeURIComponent(types) : ''));
    out = out.concat(p.events.filter(e => e.seq));
    if (!p.events.length || p.next <= from) return { events: out, next: p.next || from };
    from = p.next;
  }
  return { events: out, next: from };
}

const TABS = [['terminal', 'Terminal'], ['timeline', 'Timeline'], ['files', 'Files'], ['agent', 'Agent'], ['events', 'Events']];
const VIEW_TYPES = 'sandbox.*,session.*,command.*,file.*,agent.*,input,log.gap';

async function sandboxView(id, tab, q) {
  let sb;
  try { sb = await api('GET', '/v1/sandboxes/' + pathEsc(id)); } catch (e) {
    if (e.status === 404) { location.hash = '#/replay/' + pathEsc(id); return; }
    throw e;
  }
  id = sb.id;
  crumbs(el('a', { href: '#/', text: 'Overview' }), el('span', { text: sb.name || sb.id }));
  const statusBox = el('span', {}, badge(sb.status));
  const btn = (label, cls, fn, idAttr) => el('button', { type: 'button', class: cls, id: idAttr, onclick: fn, text: label });
  const act = async (what, method, path, confirmText) => {
    if (confirmText && !(await confirmDialog(confirmText, what))) return;
    try {
      const r = await api(method, path, method === 'DELETE' ? undefined : {});
      if (method === 'DELETE') { toast('deleted ' + (sb.name || sb.id), true); location.hash = '#/'; return; }
      sb = r; refreshHead();
    } catch (e) { toast(what + ': ' + e.message); }
  };
  const startB = btn('▶ Start', 'ghost', () => act('Start', 'POST', '/v1/sandboxes/' + pathEsc(id) + '/start'), 'start-btn');
  const stopB = btn('■ Stop', 'ghost', () => act('Stop', 'POST', '/v1/sandboxes/' + pathEsc(id) + '/stop', 'Stop sandbox ' + (sb.name || sb.id) + '? Its state is kept; running commands end.'), 'stop-btn');
  const delB = btn('⌫ Delete', 'danger', () => act('Delete', 'DELETE', '/v1/sandboxes/' + pathEsc(id), 'Delete sandbox ' + (sb.name || sb.id) + ' and everything in it? Its event log stays readable for the retention.'), 'delete-btn');
  const facts = el('div', { class: 'facts' });
  function refreshHead() {
    statusBox.replaceChildren(badge(sb.status));
    startB.disabled = sb.status === 'running';
    stopB.disabled = sb.status !== 'running';
    const l = sb.limits || {};
    facts.replaceChildren(
      el('span', {}, 'id ', el('b', { class: 'mono', text: sb.id })),
      el('span', {}, 'image ', el('b', { class: 'mono', text: sb.image || '—' })),
      el('span', {}, 'provider ', el('b', { text: sb.provider || '' })),
      el('span', {}, 'age ', el('b', { text: ago(sb.created_at) })),
      el('span', {}, 'limits ', el('b', { text: [l.cpus && l.cpus + ' CPU', l.memory_mb && l.memory_mb + ' MiB', l.pids && l.pids + ' pids', l.network && 'network ' + l.network].filter(Boolean).join(' · ') || 'none' })),
      sb.reason ? el('span', {}, 'reason ', el('b', { class: 'exit-bad', text: sb.reason + (sb.message ? ': ' + sb.message : '') })) : '',
    );
  }
  refreshHead();
  main.append(el('div', { class: 'sbhead' }, el('h1', { text: sb.name || sb.id }), statusBox, el('span', { class: 'spacer' }), startB, stopB, delB), facts);

  const tabBar = el('div', { class: 'tabs', role: 'tablist' });
  const panels = {};
  const tabBtns = {};
  for (const [key, label] of TABS) {
    tabBtns[key] = el('button', { type: 'button', role: 'tab', id: 'tab-' + key, 'aria-controls': 'panel-' + key, onclick: () => show(key) }, label, el('span', { class: 'n' }));
    tabBar.append(tabBtns[key]);
    panels[key] = el('section', { class: 'panel', role: 'tabpanel', id: 'panel-' + key, 'aria-labelledby': 'tab-' + key, hidden: true });
  }
  main.append(tabBar, ...Object.values(panels));
  const shown = {};
  function show(key) {
    for (const [k] of TABS) { tabBtns[k].setAttribute('aria-selected', String(k === key)); panels[k].hidden = k !== key; }
    const h = '#/sb/' + pathEsc(id) + '/' + key;
    if (location.hash.split('?')[0] !== h) history.replaceState(null, '', h);
    if (!shown[key]) { shown[key] = true; inits[key](); }
    if (key === 'terminal' && term.fit) term.fit();
  }
  const keyTab = e => {
    if (e.target.closest('input, textarea, select, .xterm')) return;
    const i = '12345'.indexOf(e.key);
    if (i >= 0 && !e.ctrlKey && !e.metaKey && !e.altKey) show(TABS[i][0]);
  };
  document.addEventListener('keydown', keyTab);
  onCleanup(() => document.removeEventListener('keydown', keyTab));

  // The event-derived state of the view.
  const st = { commands: new Map(), order: [], files: [], agent: [], sessions: new Map() };
  const listeners = [];
  function applyEvent(ev) {
    const d = ev.data || {};
    if (ev.type === 'command.started') {
      const c = { key: ev.session + '/' + ev.command, session: ev.session, id: ev.command, text: d.text, cwd: d.cwd, via: d.via, start: d.offset_start, time: ev.time };
      st.commands.set(c.key, c); st.order.push(c);
    } else if (ev.type === 'command.finished') {
      const key = ev.session + '/' + ev.command;
      let c = st.commands.get(key);
      if (!c) { c = { key, session: ev.session, id: ev.command, text: '', time: ev.time }; st.commands.set(key, c); st.order.push(c); }
      Object.assign(c, { done: true, status: d.status, exit_code: d.exit_code, cwd: d.cwd || c.cwd, duration_ms: d.duration_ms, start: d.offset_start, end: d.offset_end, signal: d.signal, reason: d.reason });
    } else if (ev.type.startsWith('file.')) {
      st.files.push(ev);
    } else if (ev.type.startsWith('agent.')) {
      st.agent.push(ev);
    } else if (ev.type.startsWith('session.') && ev.session) {
      st.sessions.set(ev.session, { id: ev.session, name: d.name, type: ev.type });
    } else if (ev.type.startsWith('sandbox.')) {
      api('GET', '/v1/sandboxes/' + pathEsc(id)).then(s => { sb = s; refreshHead(); }).catch(() => {});
    }
  }
  const counts = () => {
    tabBtns.timeline.lastChild.textContent = st.order.length ? String(st.order.length) : '';
    tabBtns.files.lastChild.textContent = st.files.length ? String(st.files.length) : '';
    tabBtns.agent.lastChild.textContent = st.agent.length ? String(st.agent.length) : '';
  };
  let pending = false;
  const changed = () => {
    if (pending) return;
    pending = true;
    setTimeout(() => { pending = false; counts(); listeners.forEach(f => f()); }, 150);
  };

  const term = {};
  const inits = {
    terminal: () => terminalPanel(panels.terminal, sb, term, q),
    timeline: () => timelinePanel(panels.timeline, sb, st, listeners),
    files: () => filesPanel(panels.files, st, listeners),
    agent: () => agentPanel(panels.agent, sb, st, listeners),
    events: () => rawPanel(panels.events, sb),
  };
  show(TABS.some(t => t[0] === tab) ? tab : 'terminal');

  const { events, next } = await readEvents(id, VIEW_TYPES);
  events.forEach(applyEvent);
  changed();
  document.body.dataset.ready = 'sandbox';
  follow('/v1/sandboxes/' + pathEsc(id) + '/events?follow=true&from=' + next + '&type=' + encodeURIComponent(VIEW_TYPES),
    ALL_TYPES.filter(t => t !== 'output' && t !== 'api.call'), ev => { applyEvent(ev); changed(); });
}

// terminalPanel shows the sandbox's sessions, each a live xterm.js over
// the attach WebSocket, resumed from the last offset it showed.
async function terminalPanel(panel, sb, term, q) {
  const bar = el('div', { class: 'sessions', role: 'group', 'aria-label': 'Sessions' });
  const ro = el('input', { type: 'checkbox', id: 'readonly' });
  const state = el('span', { id: 'term-state' });
  const replay = el('a', { class: 'button ghost', id: 'replay-link', text: '▶ Replay' });
  const box = el('div', { class: 'term', id: 'terminal' });
  panel.append(bar, el('div', { class: 'termbar' }, el('label', {}, ro, 'Watch only (read-only: no typing, no resize)'), state, el('span', { class: 'spacer' }), replay), box);
  if (sb.status !== 'running') {
    box.replaceChildren(el('div', { class: 'empty', text: 'The sandbox is ' + sb.status + ': start it for a live terminal, or open a replay.' }));
    replay.href = '#/replay/' + pathEsc(sb.id);
    return;
  }
  let sessions = [];
  try { sessions = (await api('GET', '/v1/sandboxes/' + pathEsc(sb.id) + '/sessions')).sessions || []; } catch (e) { toast('sessions: ' + e.message); }
  if (!sessions.length) {
    try { sessions = [await api('POST', '/v1/sandboxes/' + pathEsc(sb.id) + '/sessions', { name: 'main' })]; } catch (e) { toast('new session: ' + e.message); return; }
  }
  let cur = null;
  const t = new Terminal({
    fontFamily: getComputedStyle(document.documentElement).getPropertyValue('--mono'), fontSize: 13, cursorBlink: true,
    scrollback: 5000, convertEol: false, allowProposedApi: false,
    // Links a program prints (OSC 8) are not followed: the sandbox wrote them.
    linkHandler: { activate() {}, allowNonHttpProtocols: false },
    theme: { background: '#0f141c', foreground: '#e6e9ef' },
  });
  const fit = new FitAddon();
  t.loadAddon(fit);
  t.open(box);
  term.fit = () => { try { fit.fit(); } catch { /* hidden */ } };
  onCleanup(() => t.dispose());
  const rob = new ResizeObserver(() => term.fit());
  rob.observe(box);
  onCleanup(() => rob.disconnect());

  let ws = null, offset = 0, closedByUs = false, tries = 0, timer = 0;
  const readOnly = () => ro.checked;
  ro.addEventListener('change', () => { box.classList.toggle('readonly', readOnly()); t.options.disableStdin = readOnly(); if (!readOnly()) sendSize(); });
  if (q.get('watch') === '1') { ro.checked = true; box.classList.add('readonly'); t.options.disableStdin = true; }
  function sendSize() {
    if (ws && ws.readyState === 1 && !readOnly()) ws.send(JSON.stringify({ type: 'resize', cols: t.cols, rows: t.rows }));
  }
  t.onResize(sendSize);
  t.onData(d => { if (ws && ws.readyState === 1 && !readOnly()) ws.send(enc.encode(d)); });
  t.onBinary(d => {
    if (!ws || ws.readyState !== 1 || readOnly()) return;
    const b = new Uint8Array(d.length);
    for (let i = 0; i < d.length; i++) b[i] = d.charCodeAt(i) & 255;
    ws.send(b);
  });
  function connect() {
    const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
    ws = new WebSocket(proto + '//' + location.host + '/v1/sandboxes/' + pathEsc(sb.id) + '/sessions/' + pathEsc(cur.id) + '/attach?from=' + offset);
    ws.binaryType = 'arraybuffer';
    state.textContent = '… connecting';
    ws.onopen = () => { tries = 0; state.textContent = '● attached to ' + (cur.name || cur.id) + ' at offset ' + offset; sendSize(); };
    ws.onmessage = m => {
      if (typeof m.data === 'string') {
        // limbs serve says where in the stream the next byte is (its
        // masking of secrets changes lengths): resume from there.
        try { const o = JSON.parse(m.data); if (o.type === 'offset') offset = o.offset; } catch { /* not ours */ }
        return;
      }
      const b = new Uint8Array(m.data);
      offset += b.length;
      t.write(b);
    };
    ws.onclose = e => {
      if (closedByUs) return;
      state.textContent = '○ disconnected (' + (e.reason || e.code) + '); resuming from offset ' + offset;
      if (++tries > 20) { state.textContent = '✖ gave up reconnecting; reload the page'; return; }
      timer = setTimeout(connect, Math.min(5000, 200 * 2 ** tries));
    };
  }
  function open(s) {
    closedByUs = true;
    if (ws) ws.close();
    clearTimeout(timer);
    closedByUs = false;
    cur = s; tries = 0;
    // Resume from a little before the end: the screen is redrawn from it.
    offset = Math.max(0, (s.output_offset || 0) - 256 * 1024);
    t.reset();
    for (const b of bar.querySelectorAll('.chip')) b.setAttribute('aria-pressed', String(b.dataset.id === s.id));
    replay.href = '#/replay/' + pathEsc(sb.id) + '/' + pathEsc(s.id);
    connect();
    term.fit();
    if (!readOnly()) t.focus();
  }
  onCleanup(() => { closedByUs = true; clearTimeout(timer); if (ws) ws.close(); });
  for (const s of sessions) bar.append(el('button', { type: 'button', class: 'chip', dataset: { id: s.id }, onclick: () => open(s), text: '▣ ' + (s.name || s.id) }));
  bar.append(el('button', {
    type: 'button', class: 'chip', id: 'new-session', text: '+ session', onclick: async () => {
      try {
        const s = await api('POST', '/v1/sandboxes/' + pathEsc(sb.id) + '/sessions', {});
        bar.insertBefore(el('button', { type: 'button', class: 'chip', dataset: { id: s.id }, onclick: () => open(s), text: '▣ ' + (s.name || s.id) }), bar.lastChild);
        open(s);
      } catch (e) { toast('new session: ' + e.message); }
    },
  }));
  open(sessions.find(s => s.id === q.get('session') || s.name === q.get('session')) || sessions[0]);
}

function timelinePanel(panel, sb, st, listeners) {
  const tbody = el('tbody');
  const out = el('pre', { class: 'out', id: 'command-output', text: 'Click a command to read its output.' });
  const outHead = el('div', { class: 'muted', id: 'output-head' });
  panel.append(el('div', { class: 'split' },
    el('div', { class: 'scroll' }, el('table', { class: 'list', id: 'timeline' },
      el('thead', {}, el('tr', {}, ...['Started', 'Session', 'Command', 'cwd', 'Exit', 'Duration'].map(h => el('th', { text: h })))), tbody)),
    el('div', { class: 'panel' }, outHead, out)));
  async function openCmd(c) {
    outHead.textContent = (c.text || '(typed in a terminal)') + ' — bytes ' + c.start + '…' + (c.end ?? '');
    out.textContent = 'loading…';
    try {
      const b = await rawGet('/v1/sandboxes/' + pathEsc(sb.id) + '/sessions/' + pathEsc(c.session) + '/output?from=' + c.start + (c.end !== undefined ? '&to=' + c.end : ''));
      out.textContent = stripANSI(dec.decode(b)) || '(no output)';
    } catch (e) {
      out.textContent = '✖ ' + e.message + (sb.status !== 'running' ? '\n(the sandbox is not running: its output is in the replay)' : '');
    }
  }
  function render() {
    const rows = st.order.slice(-2000).reverse().map(c => el('tr', {
      class: 'click', tabindex: '0', dataset: { command: c.id, exit: c.exit_code ?? '' },
      onclick: () => openCmd(c), onkeydown: e => { if (e.key === 'Enter') openCmd(c); },
    },
      el('td', { title: c.time, text: new Date(c.time).toLocaleTimeString() }),
      el('td', { class: 'mono', text: c.session }),
      el('td', { class: 'mono cmd-text', text: c.text || '(typed in a terminal)' }),
      el('td', { class: 'mono', text: c.cwd || '' }),
      el('td', { class: 'exit' }, c.done ? exitBadge(c.exit_code, c.status) : exitBadge(undefined, 'running')),
      el('td', { text: c.done ? dur(c.duration_ms) : '' }),
    ));
    tbody.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: '6', class: 'empty', text: 'No command yet.' }))]));
  }
  listeners.push(render);
  render();
}

function filesPanel(panel, st, listeners) {
  const tbody = el('tbody');
  const detail = el('pre', { class: 'out diff', text: 'Click a change to see what the event holds.' });
  panel.append(el('div', { class: 'split' },
    el('div', { class: 'scroll' }, el('table', { class: 'list', id: 'files' },
      el('thead', {}, el('tr', {}, ...['Time', 'Change', 'Path', 'Size', 'Command'].map(h => el('th', { text: h })))), tbody)),
    el('div', { class: 'panel' }, detail)));
  function showEv(ev) {
    const d = ev.data || {};
    detail.replaceChildren();
    const diff = d.diff || d.patch;
    if (diff) {
      for (const line of String(diff).split('\n')) detail.append(el('span', { class: line.startsWith('+') ? 'add' : line.startsWith('-') ? 'del' : '', text: line + '\n' }));
    } else if (d.edit) {
      detail.append(el('span', { text: 'edit: ' + JSON.stringify(d.edit, null, 2) + '\n' }));
    }
    detail.append(el('span', { class: 'muted', text: JSON.stringify(d, null, 2) }));
  }
  function render() {
    const kinds = { 'file.written': '✎ written', 'file.edited': '✎ edited', 'file.deleted': '⌫ deleted' };
    const rows = st.files.slice(-2000).reverse().map(ev => {
      const d = ev.data || {};
      return el('tr', { class: 'click', tabindex: '0', onclick: () => showEv(ev), onkeydown: e => { if (e.key === 'Enter') showEv(ev); } },
        el('td', { text: new Date(ev.time).toLocaleTimeString() }),
        el('td', { text: kinds[ev.type] || (d.kind ? '◆ ' + d.kind : ev.type) }),
        el('td', { class: 'mono', text: d.path + (d.from ? ' (from ' + d.from + ')' : '') }),
        el('td', { class: 'num', text: d.size !== undefined ? bytes(d.size) : '' }),
        el('td', { class: 'mono', text: ev.command || '' }));
    });
    tbody.replaceChildren(...(rows.length ? rows : [el('tr', {}, el('td', { colspan: '5', class: 'empty', text: 'No file changed yet.' }))]));
  }
  listeners.push(render);
  render();
}

function agentPanel(panel, sb, st, listeners) {
  const list = el('div', { class: 'scroll', id: 'agent' });
  panel.append(el('div', { class: 'termbar' }, el('span', { class: 'spacer' }),
    el('a', { class: 'button ghost', id: 'atif-link', href: '/ui/sandboxes/' + pathEsc(sb.id) + '/atif', download: '', text: '⤓ Trajectory (ATIF)' })), list);
  function render() {
    if (!st.agent.length) { list.replaceChildren(el('div', { class: 'empty', text: 'No run of limbs agent in this sandbox.' })); return; }
    list.replaceChildren(...st.agent.slice(-1000).map(ev => {
      const d = ev.data || {};
      switch (ev.type) {
        case 'agent.message':
          return el('div', { class: 'step' }, el('div', { class: 'who', text: '✉ ' + d.role + (d.model ? ' · ' + d.model : '') + ' · step ' + d.step }), el('pre', { text: d.text || '' }),
            ...(d.calls || []).map(c => el('pre', { class: 'mono', text: '→ ' + c.name + ' ' + c.arguments })));
        case 'agent.tool_call':
          return el('div', { class: 'step' }, el('div', { class: 'who', text: '⚒ tool call · ' + d.name }), el('pre', { class: 'mono', text: d.arguments || '' }));
        case 'agent.observation':
          return el('div', { class: 'step' }, el('div', { class: 'who' }, '◉ observation · ' + d.name + ' ', d.command ? exitBadge(d.exit_code, d.status) : '', d.is_error ? ' ✖ error' : ''), el('pre', { class: 'mono', text: d.text || '' }));
        case 'agent.usage':
          return el('div', { class: 'step muted', text: 'tokens: ' + d.prompt_tokens + ' prompt, ' + d.completion_tokens + ' completion' });
        case 'agent.finished':
          return el('div', { class: 'step' }, el('div', { class: 'who', text: '■ finished · ' + d.reason }), el('pre', { text: (d.message || '') + '\n' + d.steps + ' steps, ' + d.prompt_tokens + '+' + d.completion_tokens + ' tokens, ' + dur(d.duration_ms) }));
        case 'agent.request':
          return el('div', { class: 'step muted', text: '⇢ request to ' + (d.model || '') + ' (' + d.messages + ' messages, attempt ' + d.attempt + ')' });
      }
      return el('pre', { class: 'raw', text: JSON.stringify(ev) });
    }));
  }
  listeners.push(render);
  render();
}

// rawPanel follows the raw event stream (every type, the newest 500).
function rawPanel(panel, sb) {
  const box = el('div', { class: 'scroll', id: 'raw-events' });
  const pause = el('input', { type: 'checkbox' });
  panel.append(el('div', { class: 'termbar' }, el('label', {}, pause, 'Pause'), el('span', { class: 'muted', text: 'Newest first; output bytes shortened. Secrets are masked by limbs serve.' })), box);
  const shown = [];
  let pending = false;
  const render = () => {
    if (pending) return;
    pending = true;
    setTimeout(() => {
      pending = false;
      if (pause.checked) return;
      box.replaceChildren(...shown.slice(-500).reverse().map(ev => el('pre', { class: 'raw mono', text: JSON.stringify(ev) })));
    }, 200);
  };
  api('GET', '/v1/sandboxes/' + pathEsc(sb.id) + '/events?from=1&limit=1').then(() => {
    follow('/v1/sandboxes/' + pathEsc(sb.id) + '/events?follow=true&from=1', ALL_TYPES, ev => {
      if (ev.type === 'output' && ev.data && ev.data.bytes && ev.data.bytes.length > 120) ev.data.bytes = ev.data.bytes.slice(0, 120) + '…';
      shown.push(ev);
      if (shown.length > 2000) shown.splice(0, shown.length - 500);
      render();
    });
  }).catch(e => toast(e.message));
}

// ---------- replay ----------

async function replayView(id, sessionWanted, q) {
  crumbs(el('a', { href: '#/', text: 'Overview' }), el('a', { href: '#/sb/' + pathEsc(id), text: id }), el('span', { text: 'Replay' }));
  const info = el('div', { class: 'facts' });
  main.append(el('div', { class: 'sbhead' }, el('h1', { text: 'Replay' }), el('span', { class: 'mono', text: id })), info);
  const { events } = await readEvents(id, 'output,session.*,command.started,command.finished,sandbox.deleted', 200);
  const sessions = [];
  const seen = new Map();
  for (const ev of events) if (ev.session && !seen.has(ev.session)) {
    const s = { id: ev.session, name: '' };
    seen.set(ev.session, s); sessions.push(s);
  }
  for (const ev of events) if (ev.type === 'session.created' && seen.has(ev.session) && ev.data && ev.data.name) seen.get(ev.session).name = ev.data.name;
  const deletedEv = events.find(e => e.type === 'sandbox.deleted');
  if (!sessions.length) { main.append(el('div', { class: 'empty', text: 'No session in this sandbox\'s event log (or it is past the retention).' })); return; }
  const sess = sessions.find(s => s.id === sessionWanted || s.name === sessionWanted) || sessions[0];
  const picker = el('div', { class: 'sessions' }, ...sessions.map(s => el('a', {
    class: 'chip', href: '#/replay/' + pathEsc(id) + '/' + pathEsc(s.id), 'aria-pressed': String(s === sess), text: '▣ ' + (s.name || s.id),
  })));
  // Frames: each output event's bytes at its time; markers at each command.
  let cols = 80, rows = 24, t0 = null;
  const frames = [], markers = [];
  let missing = 0;
  for (const ev of events) {
    if (ev.session !== sess.id) continue;
    const t = new Date(ev.time).getTime();
    if (t0 === null) t0 = t;
    const at = Math.max(0, t - t0);
    const d = ev.data || {};
    if ((ev.type === 'session.created' || ev.type === 'session.resized') && d.cols && d.rows && !frames.length) { cols = d.cols; rows = d.rows; }
    if (ev.type === 'output') {
      if (d.bytes) frames.push({ at, data: b64bytes(d.bytes) }); else missing += d.size || 0;
    } else if (ev.type === 'command.started') {
      markers.push({ at, text: d.text || '(typed in a terminal)', cmd: ev.command });
    }
  }
  for (let i = 1; i < frames.length; i++) frames[i].at = Math.max(frames[i].at, frames[i - 1].at);
  const total = frames.length ? frames[frames.length - 1].at : 0;
  info.replaceChildren(
    el('span', {}, 'session ', el('b', { class: 'mono', text: sess.name || sess.id })),
    el('span', {}, 'length ', el('b', { text: dur(total) })),
    el('span', {}, 'commands ', el('b', { text: String(markers.length) })),
    deletedEv ? el('span', {}, badge('deleted'), ' ' + new Date(deletedEv.time).toLocaleString()) : '',
    missing ? el('span', { class: 'exit-bad', text: missing + ' bytes not in the log' }) : '');
  const play = el('button', { type: 'button', id: 'play', text: '▶ Play' });
  const speed = el('select', { id: 'speed', 'aria-label': 'Speed' }, ...[0.5, 1, 2, 4, 8, 16].map(s => el('option', { value: s, text: s + '×', selected: s === 1 })));
  const scrub = el('input', { type: 'range', id: 'scrubber', min: '0', max: String(total), step: '1', value: '0', 'aria-label': 'Position' });
  const pos = el('span', { class: 'mono', id: 'position' });
  const cast = el('a', { class: 'button ghost', id: 'cast-link', href: '/ui/sandboxes/' + pathEsc(id) + '/cast?session=' + pathEsc(sess.id), download: '', text: '⤓ asciicast' });
  const atifA = el('a', { class: 'button ghost', href: '/ui/sandboxes/' + pathEsc(id) + '/atif', download: '', text: '⤓ ATIF' });
  const marks = el('div', { class: 'markers', id: 'markers', role: 'group', 'aria-label': 'Jump to a command' },
    ...markers.map(m => el('button', { type: 'button', class: 'ghost', title: dur(m.at), onclick: () => seek(m.at), text: '▸ ' + m.text.slice(0, 60) })));
  const box = el('div', { class: 'term', id: 'replay-term' });
  main.append(picker, el('div', { class: 'player' }, play, speed, scrub, pos, cast, atifA), marks, box);

  const t = new Terminal({ cols, rows, disableStdin: true, fontSize: 13, scrollback: 5000, fontFamily: getComputedStyle(document.documentElement).getPropertyValue('--mono'), theme: { background: '#0f141c', foreground: '#e6e9ef' } });
  t.open(box);
  onCleanup(() => t.dispose());
  let clock = 0, next = 0, playing = false, last = 0, raf = 0;
  const showPos = () => { pos.textContent = dur(Math.round(clock)) + ' / ' + dur(total); scrub.value = String(Math.round(clock)); };
  function writeUpTo(at) {
    let chunk = [];
    while (next < frames.length && frames[next].at <= at) chunk.push(frames[next++].data);
    if (chunk.length) {
      const n = chunk.reduce((a, b) => a + b.length, 0);
      const all = new Uint8Array(n);
      let o = 0;
      for (const c of chunk) { all.set(c, o); o += c.length; }
      t.write(all);
    }
  }
  function seek(at) {
    t.reset();
    next = 0;
    clock = Math.max(0, Math.min(total, at));
    writeUpTo(clock);
    showPos();
  }
  function tick(now) {
    if (!playing) return;
    clock = Math.min(total, clock + (now - last) * Number(speed.value));
    last = now;
    // Idle stretches longer than 2 s are skipped.
    if (next < frames.length && frames[next].at - clock > 2000) clock = frames[next].at - 2000;
    writeUpTo(clock);
    showPos();
    if (next >= frames.length) { playing = false; play.textContent = '▶ Play'; document.body.dataset.replay = 'ended'; return; }
    raf = requestAnimationFrame(tick);
  }
  function toggle() {
    if (playing) { playing = false; cancelAnimationFrame(raf); play.textContent = '▶ Play'; return; }
    if (next >= frames.length) seek(0);
    playing = true; play.textContent = '❚❚ Pause'; document.body.dataset.replay = 'playing';
    last = performance.now();
    raf = requestAnimationFrame(tick);
  }
  play.addEventListener('click', toggle);
  scrub.addEventListener('input', () => seek(Number(scrub.value)));
  const key = e => { if (e.key === ' ' && !e.target.closest('input, select, button')) { toggle(); e.preventDefault(); } };
  document.addEventListener('keydown', key);
  onCleanup(() => { playing = false; cancelAnimationFrame(raf); document.removeEventListener('keydown', key); });
  const at = Number(q.get('t'));
  seek(at > 0 ? at : 0);
  document.body.dataset.ready = 'replay';
}

// ---------- the page ----------

async function init() {
  const s = await api('GET', '/ui/session');
  csrf = s.csrf;
  const tb = $('#theme');
  const label = () => { tb.lastChild.textContent = theme(); };
  label();
  tb.addEventListener('click', () => {
    const order = ['auto', 'light', 'dark'];
    setTheme(order[(order.indexOf(theme()) + 1) % order.length]);
    label();
    void dark;
  });
  $('#logout').addEventListener('click', async () => {
    try { await api('POST', '/logout'); } catch { /* gone anyway */ }
    location.href = '/login';
  });
  $('#help').addEventListener('click', () => $('#keys').showModal());
  document.addEventListener('keydown', e => {
    if (e.target.closest('input, textarea, select, .xterm') || e.ctrlKey || e.metaKey || e.altKey) return;
    if (e.key === '/') { const s = $('#search'); if (s) { s.focus(); e.preventDefault(); } }
    else if (e.key === '?') $('#keys').showModal();
    else if (e.key === 'Escape' && location.hash && location.hash !== '#/') location.hash = '#/';
  });
  window.addEventListener('hashchange', route);
  route();
}

init().catch(e => toast(e.message));
