// What every view of the console shares: calls to the public REST API (/v1) with the key the user
// typed, elements built from text, and the status and error lines.
//
// Everything shown is built with DOM calls and text nodes, so data from the API never reaches an
// HTML parser. The page's Content-Security-Policy enforces it: Trusted Types are required and no
// policy exists, so an HTML string assigned anywhere would be refused by the browser.

const API = "/v1";

export const $ = (id) => document.getElementById(id);

/** An answer of the API that was not a success, as the envelope says: code, message, HTTP status. */
export class ApiError extends Error {
  constructor(code, message, status, requestId) {
    super(message);
    this.code = code;
    this.status = status;
    this.requestId = requestId;
  }
}

/** The API key in use: in memory here, and in sessionStorage (console.js), never anywhere else. */
let apiKey = "";
export function setKey(key) {
  apiKey = key;
}

// ---- talking to the API

export async function api(method, path, { query, body } = {}) {
  const url = new URL(API + path, location.origin);
  for (const [name, value] of Object.entries(query ?? {})) {
    if (value !== undefined && value !== null && value !== "") url.searchParams.set(name, String(value));
  }
  const headers = { authorization: `Bearer ${apiKey}`, accept: "application/json" };
  if (body !== undefined) headers["content-type"] = "application/json";
  let res;
  try {
    res = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      cache: "no-store",
      credentials: "omit",
    });
  } catch (err) {
    throw new ApiError("network_error", `the gateway could not be reached (${err.message})`, 0, null);
  }
  const requestId = res.headers.get("x-request-id");
  let payload = null;
  try {
    payload = await res.json();
  } catch {
    // Not JSON (a proxy's error page, say): reported by status below.
  }
  if (res.ok && payload && payload.status === "success") return payload;
  const error = payload && typeof payload.error === "object" && payload.error !== null ? payload.error : {};
  throw new ApiError(
    typeof error.code === "string" ? error.code : `http_${res.status}`,
    typeof error.message === "string" ? error.message : `HTTP ${res.status} ${res.statusText}`,
    res.status,
    requestId,
  );
}

// ---- building the page from text

/** An element with attributes and children; strings become text nodes, never markup. */
export function h(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    node.append(child instanceof Node ? child : String(child));
  }
  return node;
}

/**
 * A button whose accessible name says what it acts on ("Disable Orders"), starting with its
 * visible text. `action` identifies it across re-renders, so focus can come back to it.
 */
export function button(text, name, action, onClick, className = "secondary") {
  const node = h("button", { type: "button", class: className, "aria-label": name, "data-action": action }, text);
  node.addEventListener("click", () => busy(node, () => onClick(node)));
  return node;
}

/**
 * Runs an action with its button disabled, and shows what went wrong if it fails. A disabled
 * button loses keyboard focus, and a redrawn row replaces it: focus comes back to the button, or
 * to its successor in the new row, unless the action moved focus somewhere on purpose.
 */
export async function busy(node, fn) {
  const action = node.dataset.action;
  node.disabled = true;
  try {
    await fn();
  } catch (err) {
    fail(err);
  } finally {
    node.disabled = false;
    if (document.activeElement === null || document.activeElement === document.body) {
      const successor = node.isConnected ? node : action && document.querySelector(`[data-action="${CSS.escape(action)}"]`);
      if (successor) successor.focus();
    }
  }
}

/** Runs `fn` with busy() when the element with this id is clicked. */
export function on(id, fn) {
  const node = $(id);
  node.addEventListener("click", () => busy(node, fn));
}

/** Runs `fn(form)` with busy() on the form's submit button when the form is submitted. */
export function onSubmit(id, fn) {
  const form = $(id);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const submit = event.submitter ?? form.querySelector("button[type=submit]");
    busy(submit, () => fn(form));
  });
}

/** Replaces a table body's rows, or shows `empty` in one row when there are none. */
export function fill(tbody, rows, empty, columns) {
  tbody.replaceChildren(...(rows.length > 0 ? rows : [h("tr", {}, h("td", { colspan: columns, class: "hint" }, empty))]));
}

export function time(iso) {
  if (!iso) return "—";
  return h("time", { datetime: iso, title: iso }, new Date(iso).toLocaleString());
}

export const dash = (value, unit = "") => (value === null || value === undefined ? "—" : `${value}${unit}`);

// ---- messages (the status line is aria-live polite, the error line role=alert)

export function say(text) {
  $("error").textContent = "";
  $("status").textContent = text;
}

export function fail(err) {
  $("status").textContent = "";
  if (err instanceof ApiError) {
    const where = err.status ? ` (HTTP ${err.status}${err.requestId ? `, request ${err.requestId}` : ""})` : "";
    $("error").textContent = `${err.code}: ${err.message}${where}`;
  } else {
    $("error").textContent = `unexpected error: ${err?.message ? err.message : String(err)}`;
  }
}

// ---- confirmation

/**
 * Asks before an action that changes money or status, in the page's confirmation dialog: its
 * title, what it does, and the confirming button's words. With `reason`, the dialog also asks for
 * an optional reason. Resolves to null when the user cancels, else to `{reason}`.
 */
export function confirmAction({ title, text, confirm, reason = false }) {
  const dialog = $("confirm-dialog");
  $("confirm-heading").textContent = title;
  $("confirm-text").textContent = text;
  $("confirm-ok").textContent = confirm;
  $("confirm-reason-row").hidden = !reason;
  $("confirm-reason").value = "";
  return new Promise((resolve) => {
    const done = (value) => {
      dialog.removeEventListener("close", onClose);
      resolve(value);
    };
    const onClose = () => done(dialog.returnValue === "ok" ? { reason: $("confirm-reason").value.trim() } : null);
    dialog.addEventListener("close", onClose);
    dialog.returnValue = "";
    dialog.showModal();
  });
}
