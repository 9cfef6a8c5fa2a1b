// Lifeline dashboard: live overview (Server-Sent Events), TTL countdowns,
// periodic refresh of TTL pages, and reconnect progress shown in place.
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

// Elements with data-refresh="N" (and an id) are re-fetched from this page
// every N s: one fetch per round swaps them all.
function refreshers() {
  const els = [...document.querySelectorAll('[data-refresh][id]')];
  if (!els.length) return;
  const every = Math.max(2, Math.min(...els.map((e) => Number(e.dataset.refresh) || 5))) * 1000;
  setInterval(async () => {
    if (document.hidden) return;
    try {
      const r = await fetch(location.href, { headers: { Accept: 'text/html' } });
      if (!r.ok) return;
      const doc = new DOMParser().parseFromString(await r.text(), 'text/html');
      for (const el of els) {
        const next = doc.getElementById(el.id);
        if (next) swap(el, next.childNodes);
      }
    } catch (_) { /* next round */ }
  }, every);
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
refreshers();
forms();
tick();
setInterval(tick, 1000);
