// Lifeline dashboard: live overview (Server-Sent Events), live regions of
// the other pages (fetched again when the server says the fleet changed),
// TTL countdowns, and reconnect progress shown in place.
// Pages work without this file; it only makes them live.
//
// Safety: names come from the network. This script never builds HTML from
// data: it sets textContent, or swaps in fragments rendered (and escaped)
// by Lifeline's own server.

let offset = 0; // server clock minus browser clock, in ms

function syncClock(el) {
  const now = Number(el && el.dataset.now);
  if (now) offset = now - Date.now();
}

function compact(ms) {
  let s = Math.floor(Math.abs(ms) / 1000);
  if (s < 60) return `${s} s`;
  let m = Math.floor(s / 60);
  s %= 60;
  if (m < 60) return s ? `${m} min ${s} s` : `${m} min`;
  const h = Math.floor(m / 60);
  m %= 60;
  return m ? `${h} h ${m} min` : `${h} h`;
}

function tick() {
  const now = Date.now() + offset;
  for (const el of document.querySelectorAll('[data-expires]')) {
    const left = Number(el.dataset.expires) - now;
    el.textContent = left >= 0 ? `${compact(left)} left` : `expired ${compact(left)} ago`;
  }
}

function status(text) {
  const el = document.getElementById('live-status');
  if (el) el.textContent = text;
}

// Replaces `target`'s children with `fragment`'s, keeping keyboard focus on
// the element with the same id.
function swap(target, nodes) {
  const focused = document.activeElement && document.activeElement.id;
  target.replaceChildren(...nodes);
  if (focused) {
    const again = document.getElementById(focused);
    if (again) again.focus({ preventScroll: true });
  }
  syncClock(target.querySelector('[data-now]'));
  tick();
}

function live() {
  const root = document.getElementById('live');
  if (!root || !root.dataset.stream || !window.EventSource) return;
  const es = new EventSource(root.dataset.stream);
  es.addEventListener('open', () => status('● live'));
  es.addEventListener('error', () => status('○ reconnecting…'));
  es.addEventListener('overview', (e) => {
    const t = document.createElement('template');
    t.innerHTML = e.data; // Lifeline's own server-rendered, escaped fragment
    swap(root, t.content.childNodes);
    status('● live');
  });
}

// Elements with data-live (and an id) are this page's live regions: when
// /live/changes says the fleet changed, the page is fetched again (at most
// once a second, never two at once) and each region swapped in place.
// Without EventSource they are fetched every 5 s instead.
function liveRegions() {
  const els = [...document.querySelectorAll('[data-live][id]')];
  if (!els.length) return;
  let busy = false;
  let again = false;
  let last = 0;
  const refresh = async () => {
    if (busy || document.hidden) { again = true; return; }
    const wait = last + 1000 - Date.now();
    if (wait > 0) { again = true; setTimeout(refresh, wait); return; }
    busy = true;
    again = false;
    last = Date.now();
    try {
      const r = await fetch(location.href, { headers: { Accept: 'text/html' } });
      if (r.ok) {
        const doc = new DOMParser().parseFromString(await r.text(), 'text/html');
        for (const el of els) {
          const next = doc.getElementById(el.id);
          if (next) swap(el, next.childNodes);
        }
      }
    } catch (_) { /* the next change tries again */ }
    busy = false;
    if (again) setTimeout(refresh, 1000);
  };
  if (!window.EventSource) {
    setInterval(refresh, 5000);
    return;
  }
  const es = new EventSource('/live/changes');
  es.addEventListener('open', () => status('● live'));
  es.addEventListener('error', () => status('○ reconnecting…'));
  es.addEventListener('change', () => { status('● live'); refresh(); });
  document.addEventListener('visibilitychange', () => { if (!document.hidden && again) refresh(); });
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function getJson(url) {
  const r = await fetch(url, { headers: { Accept: 'application/json' } });
  return { ok: r.ok, body: await r.json().catch(() => ({})) };
}

function say(out, phase, text) {
  out.dataset.phase = phase;
  out.textContent = text;
}

// sent → delivered → acked → recovered, shown next to the button.
// Recovered: healthy, or no longer stranded for an agent that was.
async function follow(out, agent, from, sig) {
  let steps = `sent #${sig.id}`;
  say(out, 'sent', steps);
  for (let i = 0; i < 120; i++) {
    const { ok, body } = await getJson(`/api/v1/signals/${sig.id}`);
    if (ok && body.outcome && body.outcome !== 'pending') {
      if (body.outcome === 'delivered') {
        say(out, 'delivered', `${steps} → delivered`);
      } else if (body.outcome === 'acked') {
        steps += ` → delivered → acked${body.latency_ms != null ? ` in ${body.latency_ms.toFixed(1)} ms` : ''}`;
        say(out, 'acked', steps);
        break;
      } else {
        say(out, 'failed', `${steps} → ${body.outcome}${body.detail ? `: ${body.detail}` : ''}`);
        return;
      }
    }
    await sleep(500);
  }
  if (out.dataset.phase !== 'acked') return;
  for (let i = 0; i < 120; i++) {
    const { ok, body } = await getJson(`/api/v1/agents/${encodeURIComponent(agent)}`);
    if (ok && (body.state === 'healthy' || (from === 'stranded' && body.state === 'degraded'))) {
      const healthy = body.state === 'healthy';
      say(out, 'recovered', `${steps} → recovered ${healthy ? '✓ healthy' : '◐ degraded: reachable again'}`);
      const badge = document.getElementById('agent-state');
      if (badge) {
        badge.textContent = healthy ? '✓ healthy' : '◐ degraded';
        badge.dataset.state = body.state;
        badge.className = `pill ${healthy ? 'ok' : 'warn'}`;
      }
      return;
    }
    if (ok && i === 0) say(out, 'acked', `${steps} → waiting for ${body.state} to clear…`);
    await sleep(500);
  }
  say(out, 'acked', `${steps} → not healthy yet; see the agent's page`);
}

function forms() {
  document.addEventListener('submit', async (e) => {
    const form = e.target;
    if (!(form instanceof HTMLFormElement) || !form.hasAttribute('data-reconnect')) return;
    e.preventDefault();
    const out = form.querySelector('output.progress');
    const button = form.querySelector('button');
    if (button) button.disabled = true;
    say(out, 'sending', 'sending…');
    try {
      const r = await fetch(form.action, {
        method: 'POST',
        headers: { Accept: 'application/json' },
        body: new URLSearchParams(new FormData(form)),
      });
      const body = await r.json().catch(() => ({}));
      if (!r.ok) {
        const msg = body.error ? body.error.message : `HTTP ${r.status}`;
        say(out, 'failed', `✕ ${msg}`);
        return;
      }
      await follow(out, form.dataset.agent, form.dataset.state, body);
    } catch (err) {
      say(out, 'failed', `✕ ${err}`);
    } finally {
      if (button) button.disabled = false;
    }
  });
}

syncClock(document.querySelector('[data-now]'));
live();
liveRegions();
forms();
tick();
setInterval(tick, 1000);
