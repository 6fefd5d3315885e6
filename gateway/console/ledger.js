// The ledger view: entities (searched by name, status and metadata), an entity with its balances,
// status, posted-balance chart, statement, holds and balance alerts, and a transaction group with
// its legs, lifecycle and events. Only the public REST API (docs/api.md), with the key in use.

import { balanceChart } from "./chart.js";
import { $, api, button, confirmAction, fill, h, on, onSubmit, say, time } from "./core.js";
import { csvCell, formatMoney, parseMoney, toDecimal, exponentOf } from "./money.js";

const PAGE_SIZE = 20;
/** Rows of the statement table per page. */
const STATEMENT_PAGE = 10;
/** Statement entries read per request for the chart and the CSV, and how many requests at most. */
const BULK_PAGE = 1000;
const CHART_MAX_PAGES = 10;
const CSV_MAX_PAGES = 100;

const state = {
  /** The entity search as submitted, and where its next page starts. */
  query: { name: "", status: "", metaKey: "", metaValue: "" },
  entitiesCursor: null,
  /** The entity shown, as GET /entity answered. */
  entity: null,
  /** The period of the chart and the statement, as ISO strings. */
  period: null,
  /** Cursors of the statement pages seen so far: [null, page 2's, ...], and the page shown. */
  statementCursors: [null],
  statementPage: 0,
  holdsCursor: null,
  /** The transaction group shown. */
  group: null,
  /** Entities named in legs, by id: GET /entity once per id. */
  names: new Map(),
};

// ---- amounts

/** An amount in its currency, with the raw integer of minor units on hover and in data-minor. */
function money(minor, currency) {
  return h("span", { class: "amount", title: `${minor} minor units`, "data-minor": minor }, formatMoney(minor, currency));
}

const nameOf = (entity) => entity.entity_name || entity.entity_id;

// ---- entities

export async function showLedger() {
  await loadEntities();
}

export function clearLedger() {
  state.entity = null;
  state.group = null;
  state.names.clear();
  $("entity-panel").hidden = true;
  $("group-panel").hidden = true;
  for (const id of ["entities-body", "balances-body", "statement-body", "holds-body", "alerts-body", "legs-body", "group-events-body"]) {
    $(id).replaceChildren();
  }
  $("chart").replaceChildren();
}

function entityQuery(limit, cursor) {
  const q = state.query;
  const query = { limit, cursor, status: q.status || undefined, name: q.name || undefined };
  if (q.metaKey) query[`metadata[${q.metaKey}]`] = q.metaValue;
  return query;
}

/** A page of entities: the API filters name (any part of it, in any case), status and metadata. */
async function loadEntities(more = false) {
  const res = await api("GET", "/entities", { query: entityQuery(PAGE_SIZE, more ? state.entitiesCursor : undefined) });
  const found = res.entities;
  state.entitiesCursor = res.pagination.has_next ? res.pagination.next_cursor : null;
  const rows = found.map((e) =>
    h(
      "tr",
      {},
      h(
        "td",
        {},
        button(nameOf(e), `Open ${nameOf(e)}`, `entity:${e.entity_id}`, () => openEntity(e.entity_id), "link"),
      ),
      h("td", {}, e.entity_type),
      h("td", {}, h("span", { class: `entity-${e.status}` }, e.status)),
      h("td", { class: "num" }, money(e.balances.posted, e.currency_code)),
      h("td", { class: "num" }, money(e.balances.available, e.currency_code)),
      h("td", {}, time(e.created_at)),
    ),
  );
  const tbody = $("entities-body");
  if (more) tbody.append(...rows);
  else fill(tbody, rows, "No entity matches.", 6);
  $("more-entities").hidden = !state.entitiesCursor;
  return found.length;
}

async function searchEntities(form) {
  state.query = {
    name: form.name.value.trim(),
    status: form.status.value,
    metaKey: form.meta_key.value.trim(),
    metaValue: form.meta_value.value,
  };
  const count = await loadEntities();
  say(`${count} entit${count === 1 ? "y" : "ies"} found${state.entitiesCursor ? "; more with More entities" : ""}.`);
}

// ---- one entity

export async function openEntity(entityId) {
  const res = await api("GET", "/entity", { query: { entity_id: entityId } });
  state.entity = res.entity;
  renderEntity();
  $("entity-panel").hidden = false;
  if (!state.period) setPresetPeriod();
  await Promise.all([loadPeriod(), loadHolds(), loadAlerts()]);
  $("entity-heading").focus();
  say(`Opened ${nameOf(res.entity)}.`);
}

async function reloadEntity() {
  state.entity = (await api("GET", "/entity", { query: { entity_id: state.entity.entity_id } })).entity;
  renderEntity();
}

const BALANCES = [
  ["posted", "Posted"],
  ["pending_debits", "Pending debits"],
  ["pending_credits", "Pending credits"],
  ["held", "Held"],
  ["available", "Available"],
];

function renderEntity() {
  const e = state.entity;
  const name = nameOf(e);
  $("entity-heading").textContent = `Entity ${name}`;
  $("balances-caption").textContent = `Balances of ${name}`;
  $("statement-caption").textContent = `Statement of ${name}`;
  $("holds-caption").textContent = `Holds of ${name}`;
  $("alerts-caption").textContent = `Balance alerts of ${name}`;
  $("entity-summary").replaceChildren(
    h("span", { class: "mono" }, e.entity_id),
    ` · ${e.entity_type} · ${e.currency_code} · status `,
    h("strong", { id: "entity-status", class: `entity-${e.status}` }, e.status),
    e.status_reason ? ` (${e.status_reason})` : "",
    e.is_external ? " · the program's external entity" : "",
  );
  const rows = BALANCES.map(([field, label]) =>
    h("tr", {}, h("th", { scope: "row" }, label), h("td", { class: "num" }, money(e.balances[field], e.currency_code))),
  );
  rows.push(
    h("tr", {}, h("th", { scope: "row" }, "Overdraft limit"), h("td", { class: "num" }, money(e.overdraft_limit, e.currency_code))),
  );
  $("balances-body").replaceChildren(...rows);

  const actions = [];
  if (!e.is_external && e.status === "active") actions.push(statusButton("Freeze", "freeze"));
  if (!e.is_external && e.status === "frozen") actions.push(statusButton("Unfreeze", "unfreeze"));
  if (!e.is_external && e.status !== "closed") actions.push(statusButton("Close", "close"));
  $("entity-actions").replaceChildren(...actions);
}

const STATUS_STEPS = {
  freeze: "Every new debit of it is refused until it is unfrozen; credits still land.",
  unfreeze: "It can be debited again.",
  close: "Closing is final: no money command may name it again. Every balance must be zero.",
};

function statusButton(word, step) {
  const name = nameOf(state.entity);
  return button(word, `${word} ${name}`, `status:${step}`, () => changeStatus(word, step), step === "close" ? "danger" : "secondary");
}

async function changeStatus(word, step) {
  const e = state.entity;
  const answer = await confirmAction({
    title: `${word} ${nameOf(e)}?`,
    text: STATUS_STEPS[step],
    confirm: `${word} entity`,
    reason: step === "freeze",
  });
  if (!answer) return say(`${word} canceled.`);
  const body = { entity_id: e.entity_id };
  if (step === "freeze" && answer.reason) body.reason = answer.reason;
  state.entity = (await api("POST", `/entity/${step}`, { body })).entity;
  renderEntity();
  $("entity-heading").focus();
  say(`${nameOf(state.entity)} is ${state.entity.status}.`);
}

// ---- the period: chart and statement

/** A datetime-local value (the browser's time zone) for a Date, to the second. */
function localInput(date) {
  const pad = (n) => String(n).padStart(2, "0");
  return `${date.getFullYear()}-${pad(date.getMonth() + 1)}-${pad(date.getDate())}T${pad(date.getHours())}:${pad(date.getMinutes())}:${pad(date.getSeconds())}`;
}

/**
 * The last `seconds` (the quick period chosen; 7 days at first), to an hour ahead: legs posted
 * while the page is open still fall inside.
 */
function setPresetPeriod(seconds = Number($("period-preset").value) || 604_800) {
  const now = Date.now();
  $("period-from").value = localInput(new Date(now - seconds * 1000));
  $("period-to").value = localInput(new Date(now + 3_600_000));
}

function readPeriod() {
  const from = new Date($("period-from").value);
  const to = new Date($("period-to").value);
  if (Number.isNaN(from.getTime()) || Number.isNaN(to.getTime())) throw new Error("give the period's start and end");
  if (from >= to) throw new Error("the period's start must be before its end");
  state.period = { from: from.toISOString(), to: to.toISOString() };
}

async function statementPage(cursor, limit) {
  const { from, to } = state.period;
  return api("GET", "/entity/statement", { query: { entity_id: state.entity.entity_id, from, to, limit, cursor } });
}

/** Every entry of the period, page after page, up to `maxPages` requests. */
async function allEntries(maxPages) {
  const entries = [];
  let cursor;
  let first;
  for (let i = 0; i < maxPages; i++) {
    const res = await statementPage(cursor, BULK_PAGE);
    first ??= res;
    entries.push(...res.entries);
    cursor = res.pagination.has_next ? res.pagination.next_cursor : null;
    if (!cursor) return { statement: first.statement, entries, complete: true };
  }
  return { statement: first.statement, entries, complete: false };
}

async function loadPeriod() {
  readPeriod();
  state.statementCursors = [null];
  state.statementPage = 0;
  await Promise.all([drawChart(), loadStatement()]);
}

async function drawChart() {
  const e = state.entity;
  const { statement, entries, complete } = await allEntries(CHART_MAX_PAGES);
  const from = new Date(state.period.from);
  const to = new Date(state.period.to);
  const label =
    `Posted balance of ${nameOf(e)} from ${from.toLocaleString()} to ${to.toLocaleString()}: ` +
    `${formatMoney(statement.opening_posted, e.currency_code)} to ${formatMoney(statement.closing_posted, e.currency_code)}, ` +
    `${entries.length} posted leg${entries.length === 1 ? "" : "s"}`;
  const chart = balanceChart({ from, to, opening: statement.opening_posted, entries, currency: e.currency_code, label });
  const note = complete
    ? null
    : h("p", { class: "hint" }, `The first ${entries.length} legs are drawn; narrow the period to see the rest.`);
  $("chart").replaceChildren(chart, note ?? "");
}

async function loadStatement() {
  const e = state.entity;
  const res = await statementPage(state.statementCursors[state.statementPage], STATEMENT_PAGE);
  const next = res.pagination.has_next ? res.pagination.next_cursor : null;
  state.statementCursors[state.statementPage + 1] = next;
  const s = res.statement;
  $("statement-summary").replaceChildren(
    "Opening balance ",
    money(s.opening_posted, e.currency_code),
    ", closing balance ",
    money(s.closing_posted, e.currency_code),
    ".",
  );
  const rows = res.entries.map((entry) =>
    h(
      "tr",
      {},
      h("td", {}, time(entry.posted_at)),
      h("td", {}, entry.description),
      h(
        "td",
        {},
        button(
          entry.transaction_group_id,
          `Open group ${entry.transaction_group_id}`,
          `group:${entry.transaction_id}`,
          () => openGroup(entry.transaction_group_id),
          "link mono",
        ),
      ),
      h("td", { class: "num" }, entry.direction === "debit" ? money(entry.amount, e.currency_code) : ""),
      h("td", { class: "num" }, entry.direction === "credit" ? money(entry.amount, e.currency_code) : ""),
      h("td", { class: "num" }, money(entry.posted_after, e.currency_code)),
    ),
  );
  fill($("statement-body"), rows, "No posted leg in this period.", 6);
  $("statement-page").textContent = `Page ${state.statementPage + 1}`;
  // Hidden rather than disabled: busy() enables a button again once its action ends.
  $("statement-prev").hidden = state.statementPage === 0;
  $("statement-next").hidden = !next;
}

async function turnStatement(step) {
  state.statementPage += step;
  await loadStatement();
  $("statement-page").focus();
}

/** The period's statement as CSV, built here from its pages, and saved by the browser. */
async function downloadCsv() {
  readPeriod();
  const e = state.entity;
  const { entries, complete } = await allEntries(CSV_MAX_PAGES);
  const digits = exponentOf(e.currency_code);
  const lines = [
    [
      "posted_at",
      "transaction_id",
      "transaction_group_id",
      "description",
      "direction",
      "amount_minor",
      "amount",
      "posted_after_minor",
      "posted_after",
      "currency",
    ],
    ...entries.map((x) => [
      x.posted_at,
      x.transaction_id,
      x.transaction_group_id,
      x.description,
      x.direction,
      x.amount,
      toDecimal(x.amount, digits),
      x.posted_after,
      toDecimal(x.posted_after, digits),
      e.currency_code,
    ]),
  ];
  const text = `${lines.map((line) => line.map(csvCell).join(",")).join("\r\n")}\r\n`;
  const url = URL.createObjectURL(new Blob([text], { type: "text/csv;charset=utf-8" }));
  const link = h("a", {
    href: url,
    download: `statement-${e.entity_id}-${state.period.from.slice(0, 10)}-${state.period.to.slice(0, 10)}.csv`,
  });
  document.body.append(link);
  link.click();
  link.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
  say(
    `Statement CSV of ${entries.length} leg(s) saved${complete ? "" : `; the first ${entries.length} only: narrow the period for the rest`}.`,
  );
}

// ---- holds

async function loadHolds(more = false) {
  const e = state.entity;
  const res = await api("GET", "/holds", {
    query: { entity_id: e.entity_id, limit: PAGE_SIZE, cursor: more ? state.holdsCursor : undefined },
  });
  state.holdsCursor = res.pagination.has_next ? res.pagination.next_cursor : null;
  const rows = res.holds.map((x) =>
    h(
      "tr",
      {},
      h("td", { class: "mono" }, x.hold_id),
      h("td", { class: "num" }, money(x.amount, x.currency_code)),
      h("td", { class: "num" }, money(x.captured_amount, x.currency_code)),
      h("td", {}, x.status, x.release_reason ? ` (${x.release_reason})` : ""),
      h("td", {}, time(x.expires_at)),
      h("td", {}, x.description),
    ),
  );
  const tbody = $("holds-body");
  if (more) tbody.append(...rows);
  else fill(tbody, rows, "No holds.", 6);
  $("more-holds").hidden = !state.holdsCursor;
}

// ---- balance alerts

const OPERATORS = { lt: "below", lte: "at or below", gt: "above", gte: "at or above" };

function conditionText(alert, currency) {
  return `${alert.field} ${OPERATORS[alert.operator]} ${formatMoney(alert.value, currency)}`;
}

async function loadAlerts() {
  const e = state.entity;
  const res = await api("GET", "/entity/alerts", { query: { entity_id: e.entity_id } });
  const rows = res.alerts.map((a) => {
    const condition = conditionText(a, e.currency_code);
    return h(
      "tr",
      {},
      h("td", {}, `${a.field} ${OPERATORS[a.operator]} `, money(a.value, e.currency_code)),
      h("td", {}, a.triggered ? "Yes" : "No"),
      h("td", {}, time(a.created_at)),
      h(
        "td",
        { class: "actions" },
        button("Delete", `Delete alert ${condition}`, `alert:${a.alert_id}`, () => deleteAlert(a, condition), "danger"),
      ),
    );
  });
  fill($("alerts-body"), rows, "No balance alerts.", 4);
}

async function createAlert(form) {
  const e = state.entity;
  const value = parseMoney(form.value.value, e.currency_code);
  if (value === null)
    throw new Error(`the threshold must be an amount in ${e.currency_code} with at most ${exponentOf(e.currency_code)} decimals`);
  const res = await api("POST", "/entity/alert", {
    body: { entity_id: e.entity_id, field: form.field.value, operator: form.operator.value, value },
  });
  form.value.value = "";
  await loadAlerts();
  say(`Alert created: ${conditionText(res.alert, e.currency_code)}${res.alert.triggered ? " (triggered now)" : ""}.`);
}

async function deleteAlert(alert, condition) {
  const answer = await confirmAction({
    title: "Delete this alert?",
    text: `The alert ${condition} stops watching.`,
    confirm: "Delete alert",
  });
  if (!answer) return say("Delete canceled.");
  await api("DELETE", "/entity/alert", { query: { alert_id: alert.alert_id } });
  await loadAlerts();
  $("alerts-heading").focus();
  say(`Alert deleted: ${condition}.`);
}

// ---- a transaction group

async function entityName(entityId) {
  if (!state.names.has(entityId)) {
    const found = api("GET", "/entity", { query: { entity_id: entityId } }).then(
      (res) => nameOf(res.entity),
      () => entityId,
    );
    state.names.set(entityId, found);
  }
  return state.names.get(entityId);
}

export async function openGroup(groupId) {
  const res = await api("GET", "/transaction/group", { query: { transaction_group_id: groupId } });
  state.group = res.transaction_group;
  await renderGroup();
  $("group-panel").hidden = false;
  await loadGroupEvents();
  $("group-heading").focus();
}

async function renderGroup() {
  const g = state.group;
  const id = g.transaction_group_id;
  $("group-heading").textContent = `Transaction group ${id}`;
  $("legs-caption").textContent = `Legs of ${id}`;
  $("group-events-caption").textContent = `Events of ${id}`;
  $("group-summary").replaceChildren(
    "Status ",
    h("strong", { id: "group-status" }, g.status),
    g.disputed ? " (disputed)" : "",
    " · ",
    money(g.amount, g.currency_code),
    g.description ? ` · ${g.description}` : "",
    " · created ",
    time(g.created_at),
    g.reason ? ` · reason: ${g.reason}` : "",
  );
  const links = [];
  if (g.reverses_transaction_group_id) links.push(groupLink("Reverses", g.reverses_transaction_group_id));
  if (g.reversed_by_transaction_group_id) links.push(groupLink("Reversed by", g.reversed_by_transaction_group_id));
  $("group-links").replaceChildren(...links);

  const names = await Promise.all(g.legs.map((leg) => entityName(leg.entity_id)));
  let debits = 0n;
  let credits = 0n;
  const rows = g.legs.map((leg, i) => {
    if (leg.direction === "debit") debits += BigInt(leg.amount);
    else credits += BigInt(leg.amount);
    return h(
      "tr",
      {},
      h(
        "td",
        {},
        button(names[i], `Open ${names[i]}`, `leg-entity:${leg.transaction_id}`, () => openEntity(leg.entity_id), "link"),
      ),
      h("td", { class: "num" }, leg.direction === "debit" ? money(leg.amount, g.currency_code) : ""),
      h("td", { class: "num" }, leg.direction === "credit" ? money(leg.amount, g.currency_code) : ""),
    );
  });
  rows.push(
    h(
      "tr",
      { class: "total" },
      h("th", { scope: "row" }, "Total"),
      h("td", { class: "num" }, money(Number(debits), g.currency_code)),
      h("td", { class: "num" }, money(Number(credits), g.currency_code)),
    ),
  );
  $("legs-body").replaceChildren(...rows);

  const actions = [];
  if (g.status === "pending") actions.push(groupButton("Post", "post"), groupButton("Cancel", "cancel"));
  if (g.status === "posted") actions.push(groupButton("Reverse", "reverse"));
  $("group-actions").replaceChildren(...actions);
}

function groupLink(text, groupId) {
  return h(
    "span",
    {},
    `${text} `,
    button(groupId, `Open group ${groupId}`, `group-link:${groupId}`, () => openGroup(groupId), "link mono"),
  );
}

const GROUP_STEPS = {
  post: "Its pending legs become posted: the money moves.",
  cancel: "Its pending legs are released: no money moves. This cannot be undone.",
  reverse: "A new posted group with every leg flipped undoes it.",
};

function groupButton(word, step) {
  const id = state.group.transaction_group_id;
  return button(word, `${word} ${id}`, `group-step:${step}`, () => groupStep(word, step), step === "post" ? "primary" : "secondary");
}

async function groupStep(word, step) {
  const g = state.group;
  const answer = await confirmAction({
    title: `${word} ${g.transaction_group_id}?`,
    text: `${GROUP_STEPS[step]} Amount: ${formatMoney(g.amount, g.currency_code)}.`,
    confirm: `${word} group`,
  });
  if (!answer) return say(`${word} canceled.`);
  const res = await api("POST", `/transaction/${step}`, { body: { transaction_group_id: g.transaction_group_id } });
  state.group = res.transaction_group;
  await renderGroup();
  await loadGroupEvents();
  // The entity shown, when the group moved its money: its balances, chart and statement again.
  if (state.entity && g.legs.some((leg) => leg.entity_id === state.entity.entity_id)) await Promise.all([reloadEntity(), loadPeriod()]);
  $("group-heading").focus();
  const reversal = res.reversal_transaction_group_id ? ` Its reversal is ${res.reversal_transaction_group_id}.` : "";
  say(`${g.transaction_group_id} is ${state.group.status}.${reversal}`);
}

async function loadGroupEvents() {
  const res = await api("GET", "/events", { query: { object_id: state.group.transaction_group_id, limit: PAGE_SIZE } });
  const rows = res.events.map((e) =>
    h(
      "tr",
      {},
      h("td", {}, time(e.created_at)),
      h("td", {}, e.type),
      h("td", { class: "mono" }, e.event_id),
      h(
        "td",
        {},
        `${e.deliveries.total} (${e.deliveries.succeeded} succeeded, ${e.deliveries.failed} failed, ${e.deliveries.pending} pending)`,
      ),
    ),
  );
  fill($("group-events-body"), rows, "No events yet: they arrive within a moment.", 4);
}

// ---- wiring

onSubmit("entities-form", searchEntities);
on("more-entities", () => loadEntities(true));
onSubmit("period-form", async () => {
  await loadPeriod();
  say(`Showing ${new Date(state.period.from).toLocaleString()} to ${new Date(state.period.to).toLocaleString()}.`);
});
$("period-preset").addEventListener("change", () => {
  if (!$("period-preset").value) return;
  setPresetPeriod();
  $("period-form").requestSubmit();
});
for (const id of ["period-from", "period-to"]) $(id).addEventListener("input", () => ($("period-preset").value = ""));
on("statement-csv", downloadCsv);
on("statement-prev", () => turnStatement(-1));
on("statement-next", () => turnStatement(1));
on("more-holds", () => loadHolds(true));
onSubmit("alert-form", createAlert);
onSubmit("group-open-form", (form) => openGroup(form.group_id.value.trim()));
on("refresh-group-events", async () => {
  await loadGroupEvents();
  say("Group events refreshed.");
});
