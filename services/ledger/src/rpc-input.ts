import { invalidArgument } from "@ledger/common";

/** An id the request must give; an empty one is refused, naming its field. */
export function requireId(value: string, field: string): string {
  if (value === "") throw invalidArgument(`${field} is required`, { field });
  return value;
}
