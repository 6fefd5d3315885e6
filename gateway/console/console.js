// The console's entry: the API key, and the webhook view (destinations, events, deliveries and
// their attempts). The ledger view is ledger.js; what both share is core.js. The key stays in this
// tab: in memory and in sessionStorage, which the browser clears with the tab.

import { $, api, button, busy, dash, fail, fill, h, on, say, setKey, time } from "./core.js";
import { clearLedger, showLedger } from "./ledger.js";

const KEY_STORAGE = "ledger-console-api-key";
const PAGE_SIZE = 20;

const state = {
  /** Destinations shown, by id, in the API's order (newest first). */
  endpoints: new Map(),
  endpointsCursor: null,
  /** The destination whose deliveries are shown. */
  selected: null,
  deliveriesCursor: null,
  eventsCursor: null,
  /** The event whose details are shown. */
  eventId: null,
  /** The destination the roll dialog is for. */
  rolling: null,
  /** The delivery whose attempts are shown, and the cursor of their next page. */
  attemptsOf: null,
  attemptsCursor: null,
};

const labelOf = (endpoint) => endpoint.name || endpoint.url;

// ---- the key

async function useKey(key) {
  setKey(key);
  try {
    await loadDestinations();
  } catch (err) {
    forgetKey();
    throw err;
  }
  sessionStorage.setItem(KEY_STORAGE, key);
  $("key-input").value = "";
  $("key-help").textContent =
    `Using the key ending in …${key.slice(-4)}. Kept in this browser tab only until you forget it or close the tab.`;
  $("signed-in").hidden = false;
  $("views").hidden = false;
  await Promise.all([loadEvents(), showLedger()]);
  say(`Key accepted: the latest entities, ${state.endpoints.size} destination(s) and the latest events loaded.`);
}

function forgetKey() {
  setKey("");
  sessionStorage.removeItem(KEY_STORAGE);
  state.endpoints.clear();
  state.selected = null;
  state.eventId = null;
  $("signed-in").hidden = true;
  $("views").hidden = true;
  hideSecret();
  $("deliveries-panel").hidden = true;
  $("event-panel").hidden = true;
  $("attempts-panel").hidden = true;
  clearLedger();
  for (const id of ["destinations-body", "deliveries-body", "events-body", "event-deliveries-body", "attempts-body"])
    $(id).replaceChildren();
  $("key-help").textContent =
    "Kept in this browser tab only (session storage) until you forget it or close the tab; sent to this gateway only.";
}

// ---- destinations

async function loadDestinations(more = false) {
  const res = await api("GET", "/webhooks", { query: { limit: PAGE_SIZE, cursor: more ? state.endpointsCursor : undefined } });
  if (!more) state.endpoints.clear();
  for (const endpoint of res.endpoints) state.endpoints.set(endpoint.endpoint_id, endpoint);
  state.endpointsCursor = res.pagination.has_next ? res.pagination.next_cursor : null;
  renderDestinations();
}

function renderDestinations() {
  const rows = [...state.endpoints.values()].map((e) => {
    const label = labelOf(e);
    const id = e.endpoint_id;
    return h(
      "tr",
      {},
      h("td", {}, e.name, e.description ? h("div", { class: "hint" }, e.description) : null),
      h("td", { class: "url mono" }, e.url),
      h("td", {}, e.event_types ? e.event_types.join(", ") : "all"),
      h("td", {}, e.enabled ? "Enabled" : "Disabled"),
      h("td", {}, time(e.created_at)),
      h(
        "td",
        { class: "actions" },
        button("Deliveries", `Deliveries of ${label}`, `deliveries:${id}`, () => openDeliveries(e)),
        button(e.enabled ? "Disable" : "Enable", `${e.enabled ? "Disable" : "Enable"} ${label}`, `toggle:${id}`, () => toggle(e)),
        button("Roll secret", `Roll secret of ${label}`, `roll:${id}`, () => openRoll(e)),
        button("Delete", `Delete ${label}`, `delete:${id}`, () => remove(e), "danger"),
      ),
    );
  });
  fill($("destinations-body"), rows, "No destinations yet: create one below.", 6);
  $("more-destinations").hidden = !state.endpointsCursor;
}

/** Event types as typed: comma- or space-separated; none means every type. */
function parseTypes(text) {
  const types = text.split(/[\s,]+/).filter((t) => t.length > 0);
  return types.length > 0 ? types : undefined;
}

async function create(form) {
  const body = { url: form.url.value.trim() };
  if (form.name.value.trim()) body.name = form.name.value.trim();
  if (form.description.value.trim()) body.description = form.description.value.trim();
  const types = parseTypes(form.event_types.value);
  if (types) body.event_types = types;
  const res = await api("POST", "/webhooks", { body });
  const { secret, ...endpoint } = res.endpoint;
  form.reset();
  await loadDestinations();
  showSecret(labelOf(endpoint), secret, `Created ${labelOf(endpoint)}.`);
}

async function toggle(endpoint) {
  const res = await api("PUT", "/webhooks", { body: { endpoint_id: endpoint.endpoint_id, enabled: !endpoint.enabled } });
  state.endpoints.set(endpoint.endpoint_id, res.endpoint);
  if (state.selected && state.selected.endpoint_id === endpoint.endpoint_id) state.selected = res.endpoint;
  renderDestinations();
  say(
    `${res.endpoint.enabled ? "Enabled" : "Disabled"} ${labelOf(res.endpoint)}.${res.endpoint.enabled ? "" : " Its pending retries stop."}`,
  );
}

async function remove(endpoint) {
  const label = labelOf(endpoint);
  if (!confirm(`Delete the destination ${label}? Its pending retries end as failed. This cannot be undone.`)) return;
  await api("DELETE", "/webhooks", { query: { endpoint_id: endpoint.endpoint_id } });
  state.endpoints.delete(endpoint.endpoint_id);
  if (state.selected && state.selected.endpoint_id === endpoint.endpoint_id) {
    state.selected = null;
    $("deliveries-panel").hidden = true;
  }
  renderDestinations();
  $("destinations-heading").focus();
  say(`Deleted ${label}.`);
}

function openRoll(endpoint) {
  state.rolling = endpoint;
  $("roll-heading").textContent = `Roll the signing secret of ${labelOf(endpoint)}`;
  $("roll-expire").value = "86400";
  $("roll-dialog").showModal();
}

async function roll(expire, expireText) {
  const endpoint = state.rolling;
  state.rolling = null;
  const res = await api("POST", "/webhooks/roll", { body: { endpoint_id: endpoint.endpoint_id, expire_previous_in_seconds: expire } });
  const note = expire === 0 ? "The previous secret no longer verifies." : `The previous secret stays valid for ${expireText}.`;
  showSecret(labelOf(endpoint), res.endpoint.secret, `Rolled the secret of ${labelOf(endpoint)}. ${note}`);
}

// ---- a secret, shown once

function showSecret(label, secret, message) {
  $("secret-label").textContent = `Signing secret of ${label}`;
  $("secret-value").value = secret;
  $("secret-panel").hidden = false;
  $("secret-heading").focus();
  say(`${message} Copy its signing secret now: it is shown once.`);
}

function hideSecret() {
  $("secret-value").value = "";
  $("secret-panel").hidden = true;
}

// ---- deliveries (of a destination, or of an event)

function deliveryRow(d, refresh, first) {
  const response =
    d.response_body !== null || d.error !== null
      ? h(
          "details",
          {},
          h("summary", {}, "Response"),
          d.error !== null ? h("p", {}, `error: ${d.error}`) : null,
          d.response_body !== null ? h("pre", { class: "mono" }, d.response_body) : null,
        )
      : "—";
  const statusClass = `status-${d.status}`;
  return h(
    "tr",
    {},
    h("td", {}, time(d.created_at)),
    first(d),
    h("td", {}, h("span", { class: statusClass }, d.status)),
    h("td", {}, String(d.attempts)),
    h("td", {}, dash(d.response_status)),
    h("td", {}, dash(d.duration_ms, " ms")),
    h("td", {}, time(d.last_attempt_at)),
    h("td", {}, time(d.next_attempt_at)),
    h("td", {}, response),
    h(
      "td",
      { class: "actions" },
      button("Attempts", `Attempts of ${d.delivery_id}`, `attempts:${d.delivery_id}`, () => openAttempts(d)),
      button("Resend", `Resend ${d.event_type} ${d.delivery_id}`, `resend:${d.delivery_id}`, async () => {
        const res = await api("POST", "/webhooks/resend", { body: { delivery_id: d.delivery_id } });
        await refresh();
        say(`Resent as ${res.delivery_id}: a new delivery of ${d.event_type} to this destination.`);
      }),
    ),
  );
}

async function openDeliveries(endpoint) {
  state.selected = endpoint;
  const title = `Deliveries to ${labelOf(endpoint)}`;
  $("deliveries-heading").textContent = title;
  $("deliveries-caption").textContent = title;
  $("deliveries-panel").hidden = false;
  await loadDeliveries();
  $("deliveries-heading").focus();
}

async function loadDeliveries(more = false) {
  const endpoint = state.selected;
  if (!endpoint) return;
  const [list, one] = await Promise.all([
    api("GET", "/webhooks/deliveries", {
      query: { endpoint_id: endpoint.endpoint_id, limit: PAGE_SIZE, cursor: more ? state.deliveriesCursor : undefined },
    }),
    api("GET", "/webhook", { query: { id: endpoint.endpoint_id } }),
  ]);
  const s = one.stats;
  $("deliveries-stats").textContent =
    `Attempts in the last 7 days: ${s.total} (${s.succeeded} succeeded, ${s.failed} failed), ${s.avg_ms} ms on average.`;
  state.deliveriesCursor = list.pagination.has_next ? list.pagination.next_cursor : null;
  const event = (d) => h("td", {}, d.event_type, h("div", { class: "hint mono" }, d.event_id));
  const rows = list.deliveries.map((d) => deliveryRow(d, () => loadDeliveries(), event));
  const tbody = $("deliveries-body");
  if (more) tbody.append(...rows);
  else fill(tbody, rows, "No deliveries yet.", 10);
  $("more-deliveries").hidden = !state.deliveriesCursor;
}

// ---- a delivery's attempts, one by one

async function openAttempts(delivery, more = false) {
  state.attemptsOf = delivery;
  const res = await api("GET", "/webhooks/delivery/attempts", {
    query: { delivery_id: delivery.delivery_id, limit: PAGE_SIZE, cursor: more ? state.attemptsCursor : undefined },
  });
  state.attemptsCursor = res.pagination.has_next ? res.pagination.next_cursor : null;
  const title = `Attempts of delivery ${delivery.delivery_id}`;
  $("attempts-heading").textContent = title;
  $("attempts-caption").textContent = title;
  const rows = res.attempts.map((a) =>
    h(
      "tr",
      {},
      h("td", {}, String(a.attempt)),
      h("td", {}, time(a.attempted_at)),
      h("td", {}, h("span", { class: a.succeeded ? "status-succeeded" : "status-failed" }, a.succeeded ? "succeeded" : "failed")),
      h("td", {}, dash(a.response_status)),
      h("td", {}, dash(a.duration_ms, " ms")),
      h("td", {}, dash(a.error)),
    ),
  );
  const tbody = $("attempts-body");
  if (more) tbody.append(...rows);
  else fill(tbody, rows, "No attempt yet: the first is due.", 6);
  $("more-attempts").hidden = !state.attemptsCursor;
  $("attempts-panel").hidden = false;
  if (!more) $("attempts-heading").focus();
}

// ---- events

function summary(s) {
  if (s.total === 0) return "none (no destination subscribed)";
  return `${s.total} sent: ${s.succeeded} succeeded, ${s.failed} failed, ${s.pending} pending`;
}

async function loadEvents(more = false) {
  const res = await api("GET", "/events", { query: { limit: PAGE_SIZE, cursor: more ? state.eventsCursor : undefined } });
  state.eventsCursor = res.pagination.has_next ? res.pagination.next_cursor : null;
  const rows = res.events.map((e) =>
    h(
      "tr",
      {},
      h("td", {}, time(e.created_at)),
      h("td", {}, e.type),
      h("td", { class: "mono" }, e.event_id),
      h("td", {}, summary(e.deliveries)),
      h(
        "td",
        { class: "actions" },
        button("Details", `Details of ${e.type} ${e.event_id}`, `event:${e.event_id}`, () => openEvent(e.event_id)),
      ),
    ),
  );
  const tbody = $("events-body");
  if (more) tbody.append(...rows);
  else fill(tbody, rows, "No events yet.", 5);
  $("more-events").hidden = !state.eventsCursor;
}

async function openEvent(eventId, focus = true) {
  state.eventId = eventId;
  const res = await api("GET", "/event", { query: { id: eventId } });
  const e = res.event;
  $("event-heading").textContent = `Event ${e.type} ${e.event_id}`;
  $("event-deliveries-caption").textContent = `Deliveries of event ${e.event_id}`;
  // A read-only textarea shows its text content (its default value): the user never edits it.
  $("event-data").textContent = JSON.stringify(
    { id: e.event_id, type: e.type, created_at: e.created_at, deliveries: e.deliveries, data: e.data },
    null,
    2,
  );
  const destination = (d) => {
    const endpoint = state.endpoints.get(d.endpoint_id);
    return h("td", {}, endpoint ? labelOf(endpoint) : d.endpoint_id, h("div", { class: "hint mono" }, d.delivery_id));
  };
  const rows = res.deliveries.map((d) => deliveryRow(d, () => openEvent(eventId, false), destination));
  fill($("event-deliveries-body"), rows, "No deliveries: no enabled destination was subscribed to this event type.", 10);
  $("event-panel").hidden = false;
  if (focus) $("event-heading").focus();
}

// ---- wiring

$("key-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const key = $("key-input").value.trim();
  if (!key) return;
  const submit = event.submitter ?? $("key-form").querySelector("button[type=submit]");
  busy(submit, () => useKey(key));
});

$("forget-key").addEventListener("click", () => {
  forgetKey();
  say("Key forgotten.");
  $("key-input").focus();
});

$("create-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const submit = event.submitter ?? $("create-form").querySelector("button[type=submit]");
  busy(submit, () => create($("create-form")));
});

$("roll-form").addEventListener("submit", (event) => {
  event.preventDefault();
  const dialog = $("roll-dialog");
  const select = $("roll-expire");
  const confirmed = event.submitter && event.submitter.value === "roll";
  dialog.close();
  if (!confirmed || !state.rolling) {
    state.rolling = null;
    return;
  }
  const text = select.options[select.selectedIndex].textContent;
  const focusBack = document.querySelector(`[data-action="roll:${state.rolling.endpoint_id}"]`);
  busy(focusBack ?? $("refresh-destinations"), () => roll(Number(select.value), text));
});
$("roll-dialog").addEventListener("cancel", () => {
  state.rolling = null;
});

$("secret-copy").addEventListener("click", async () => {
  try {
    await navigator.clipboard.writeText($("secret-value").value);
    say("Secret copied to the clipboard.");
  } catch {
    $("secret-value").select();
    say("The browser did not allow copying: the secret is selected, copy it with the keyboard.");
  }
});
$("secret-done").addEventListener("click", () => {
  hideSecret();
  say("Secret hidden.");
  $("destinations-heading").focus();
});

on("refresh-destinations", async () => {
  await loadDestinations();
  say("Destinations refreshed.");
});
on("more-destinations", () => loadDestinations(true));
on("refresh-deliveries", async () => {
  await loadDeliveries();
  say("Deliveries refreshed.");
});
on("more-deliveries", () => loadDeliveries(true));
on("refresh-events", async () => {
  await loadEvents();
  if (state.eventId && !$("event-panel").hidden) await openEvent(state.eventId, false);
  say("Events refreshed.");
});
on("more-events", () => loadEvents(true));
on("more-attempts", () => openAttempts(state.attemptsOf, true));

// A key given earlier in this tab is used again after a reload.
const saved = sessionStorage.getItem(KEY_STORAGE);
if (saved) useKey(saved).catch(fail);
