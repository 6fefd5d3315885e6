// Amounts as people read them. The API carries every amount as an integer of minor units and an
// entity's currency as a three-letter ISO 4217 code; the ledger keeps no exponent per currency.
// The exponent is the one the browser's ISO 4217 data gives the code (Intl: 2 for USD and EUR,
// 0 for JPY, 3 for KWD), and the arithmetic is on integers and digit strings, never on floats,
// so 983333 USD minor units reads 9,833.33 USD exactly, whatever its size.

const exponents = new Map();

/** The minor-unit exponent of a currency: the number of digits after its decimal point. */
export function exponentOf(currency) {
  if (!exponents.has(currency)) {
    let digits = 2;
    try {
      digits = new Intl.NumberFormat("en", { style: "currency", currency }).resolvedOptions().maximumFractionDigits;
    } catch {
      // A code Intl does not take: two digits, the most common exponent.
    }
    exponents.set(currency, digits);
  }
  return exponents.get(currency);
}

/** An integer of minor units as a plain decimal string in major units: 983333, 2 → "9833.33". */
export function toDecimal(minor, digits) {
  const value = BigInt(minor);
  const negative = value < 0n;
  const text = (negative ? -value : value).toString().padStart(digits + 1, "0");
  const whole = digits === 0 ? text : text.slice(0, -digits);
  const fraction = digits === 0 ? "" : `.${text.slice(-digits)}`;
  return `${negative ? "-" : ""}${whole}${fraction}`;
}

const formats = new Map();

/** 983333 and "USD" → "9,833.33 USD", in the browser's locale, with the currency's exponent. */
export function formatMoney(minor, currency) {
  const digits = exponentOf(currency);
  if (!formats.has(currency)) {
    formats.set(currency, new Intl.NumberFormat(undefined, { minimumFractionDigits: digits, maximumFractionDigits: digits }));
  }
  // A decimal string keeps every digit: Intl formats it exactly, where a float could round.
  return `${formats.get(currency).format(toDecimal(minor, digits))} ${currency}`;
}

/**
 * "12.5" in a currency with 2 digits → 1250 minor units; null for anything that is not a number
 * with at most that many decimals (the user is asked again rather than the value being rounded).
 */
export function parseMoney(text, currency) {
  const digits = exponentOf(currency);
  const match = /^(-?)(\d{1,16})(?:\.(\d+))?$/.exec(text.trim().replace(/[,\s]/g, ""));
  if (!match || (match[3] ?? "").length > digits) return null;
  const minor = BigInt(match[2] + (match[3] ?? "").padEnd(digits, "0")) * (match[1] ? -1n : 1n);
  return minor > BigInt(Number.MAX_SAFE_INTEGER) || minor < -BigInt(Number.MAX_SAFE_INTEGER) ? null : Number(minor);
}

/** A cell of a CSV file (RFC 4180), and never a formula a spreadsheet would run. */
export function csvCell(value) {
  let text = value === null || value === undefined ? "" : String(value);
  if (/^[=+\-@\t\r]/.test(text) && !/^-?\d+(\.\d+)?$/.test(text)) text = `'${text}`;
  return /[",\r\n]/.test(text) ? `"${text.replaceAll('"', '""')}"` : text;
}
