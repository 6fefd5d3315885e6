// Applying a transaction's units in order, with their idempotency keys: the part of group commit
// (batcher.ts) that runs inside the transaction, whichever way the batch read its rows (batch-paths.ts).
import { create, fromBinary, toBinary, type DescMessage } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { ruleViolation, type Claim, type KeyClaim, type Tx } from "@ledger/common";
import type { KeyStatements, StoredAnswer } from "./batch-store.js";
import {
  AtomicRefusal,
  commandsOf,
  isLater,
  keyString,
  wholeResponse,
  type ItemAnswer,
  type LaterAnswer,
  type Submission,
  type Unit,
  type UnitResult,
} from "./batch-units.js";
import type { Book, MoneyCommand, OpenBook } from "./money.js";

/**
 * A cached batch refused a command whose idempotency key it took as new without looking: the key
 * may hold an earlier success, which a retry must get back. Thrown before anything is written.
 */
export class RefusedUnclaimedKey extends Error {
  constructor() {
    super("a keyed command was refused on the cached path; its key must be claimed first");
  }
}

/**
 * Where a key stands while a transaction applies its commands in order: free to use (claimed new
 * for this transaction, or freed by a refusal), answered (a stored response, or one made earlier
 * in this transaction), taken by a whole batch call, or refused at its claim.
 */
type KeyState =
  | { kind: "free" }
  | { kind: "answered"; fingerprint: Buffer; response: Uint8Array; fresh: boolean }
  | { kind: "whole" }
  | { kind: "error"; error: ConnectError };

/** The claim of a key taken as new without looking (a cached batch). */
const NEW_KEY: Claim = { kind: "new" };

/**
 * Applies `units` in order in `tx` and answers each with its result. `open` gives the book over
 * the live units' commands. `keyHandling`: `claim` claims every key before anything is applied,
 * and settles them at the end; `insert` takes every key as new and inserts the fresh ones with
 * their responses at the end, which fails the transaction if one exists (a cached batch: nothing
 * may be read before the write), and throws `RefusedUnclaimedKey` when a keyed command is refused.
 */
export async function applyUnits(
  tx: Tx,
  units: Unit[],
  writes: Promise<unknown>[],
  open: (commands: MoneyCommand[]) => Promise<OpenBook>,
  keyHandling: "claim" | "insert",
  statements: KeyStatements,
): Promise<UnitResult[]> {
  // Claims first, each key once, in key order, so two transactions never wait on each other's keys in a cycle.
  const toClaim = keysToClaim(units);
  const claims = keyHandling === "claim" ? await statements.claim(tx, [...toClaim.values()]) : [...toClaim.keys()].map(() => NEW_KEY);
  const keys = new TransactionKeys(toClaim, claims);
  const results = units.map((unit): UnitResult | undefined => keys.takeWhole(unit));
  const live = units.map((unit, u) => ({ unit, u })).filter(({ u }) => results[u] === undefined);
  let bookWrite: (() => Promise<void>) | undefined;
  const commands = commandsOf(live.map(({ unit }) => unit));
  if (commands.length > 0) {
    const { book, unitDone, write } = await open(commands);
    for (const { unit, u } of live) {
      results[u] = applyUnit(book, unit, keys);
      // A balance alert crosses on what a whole call or batch call leaves, not on each of its items.
      const origin = unit.items.find((item) => !(item.command instanceof ConnectError))?.command as MoneyCommand | undefined;
      if (origin) unitDone(origin);
    }
    bookWrite = write;
  } else {
    // Nothing to apply: every live unit holds only refused items (an atomic one is refused at its first).
    for (const { unit, u } of live) results[u] = answerRefusedItems(unit, keys);
  }
  const { completed, refused } = keys.endings();
  // A key taken as new whose command was refused may have been used already: its first success
  // must be replayed, not the rules checked again (docs/api.md#idempotency). Only a claim can
  // tell, so nothing is written here and the caller applies the units the claiming way.
  if (keyHandling === "insert" && refused.length > 0) throw new RefusedUnclaimedKey();
  // The keys before the book, as a claim comes before the rows: the same lock order everywhere.
  if (keyHandling === "claim") writes.push(...statements.settle(tx, completed, refused));
  else writes.push(...statements.insert(tx, keys.withFingerprints(completed)));
  if (bookWrite) writes.push(bookWrite());
  return results as UnitResult[];
}

/** The keys of `units` (the calls' and their live items'), each once, in key order. */
function keysToClaim(units: Unit[]): Map<string, KeyClaim> {
  const toClaim = new Map<string, KeyClaim>();
  for (const unit of units) {
    if (unit.idempotency) toClaim.set(keyString(unit.idempotency), unit.idempotency);
    for (const item of unit.items) {
      if (item.idempotency && !(item.command instanceof ConnectError) && !toClaim.has(keyString(item.idempotency))) {
        toClaim.set(keyString(item.idempotency), item.idempotency);
      }
    }
  }
  return new Map([...toClaim].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)));
}

/**
 * The idempotency keys of one transaction: where each stands as its units apply in order, and the
 * responses of the batch calls with a key, stored as they are built.
 */
class TransactionKeys {
  private readonly states = new Map<string, KeyState>();
  /** The keys claimed new for this transaction: each ends stored with its response, or deleted. */
  private readonly claimedNew = new Set<string>();
  /** Whole responses of batch calls with a key, in the order they applied. */
  private readonly wholes: StoredAnswer[] = [];

  /** `claims`: what each key of `toClaim` holds, in its order. */
  constructor(
    private readonly toClaim: Map<string, KeyClaim>,
    claims: Array<Claim | Error>,
  ) {
    [...toClaim.keys()].forEach((k, n) => {
      const claim = claims[n]!;
      if (claim instanceof Error) this.states.set(k, { kind: "error", error: ConnectError.from(claim) });
      else if (claim.kind === "replay")
        this.states.set(k, { kind: "answered", fingerprint: toClaim.get(k)!.fingerprint, response: claim.response, fresh: false });
      else {
        this.states.set(k, { kind: "free" });
        this.claimedNew.add(k);
      }
    });
  }

  stateOf(k: string): KeyState {
    return this.states.get(k)!;
  }

  /** Keeps the key changes of a unit that applied. */
  keep(changes: Map<string, KeyState>): void {
    for (const [k, state] of changes) this.states.set(k, state);
  }

  /**
   * A batch call's key: its result when the key answers for it already (a stored response, or an
   * error at its claim); otherwise undefined, and the key is the call's from now on.
   */
  takeWhole(unit: Unit): UnitResult | undefined {
    if (!unit.idempotency) return undefined;
    const k = keyString(unit.idempotency);
    const state = this.stateOf(k);
    if (state.kind === "error") return { error: state.error };
    if (state.kind === "answered") return { replay: state.response };
    this.states.set(k, { kind: "whole" });
    return undefined;
  }

  /** Frees the key of a batch call that applied nothing. */
  freeWhole(unit: Unit): void {
    if (unit.idempotency) this.states.set(keyString(unit.idempotency), { kind: "free" });
  }

  storeWhole(claim: KeyClaim, response: Uint8Array): void {
    this.wholes.push({ accountId: claim.accountId, key: claim.key, response });
  }

  /** Each key claimed here ends stored with its response, or deleted so a retry is tried afresh. */
  endings(): { completed: StoredAnswer[]; refused: Array<{ accountId: string; key: string }> } {
    const completed = [...this.wholes];
    const refused: Array<{ accountId: string; key: string }> = [];
    for (const k of this.claimedNew) {
      const state = this.states.get(k)!;
      const { accountId, key } = this.toClaim.get(k)!;
      if (state.kind === "answered" && state.fresh) completed.push({ accountId, key, response: state.response });
      else if (state.kind === "free") refused.push({ accountId, key });
    }
    return { completed, refused };
  }

  /** `completed` as keys never claimed are inserted: with their fingerprints, in key order. */
  withFingerprints(completed: StoredAnswer[]): Array<StoredAnswer & { fingerprint: Buffer }> {
    const stored = completed.map((c) => Object.assign({}, c, { fingerprint: this.toClaim.get(keyString(c))!.fingerprint }));
    return stored.sort((a, b) => (keyString(a) < keyString(b) ? -1 : 1));
  }
}

/**
 * Applies one live unit's items in order on `book`. An atomic unit applies all its items or, at
 * its first refused item, none: the book goes back to where the unit started, and its key is freed.
 */
function applyUnit(book: Book, unit: Unit, keys: TransactionKeys): UnitResult {
  const start = book.checkpoint();
  // Key changes of this unit; kept only if the unit is.
  const local = new Map<string, KeyState>();
  const answers = unit.items.map((item) => applyItem(book, item, (k) => local.get(k) ?? keys.stateOf(k), local));
  const refusedAt = unit.atomic ? answers.findIndex((a) => a instanceof ConnectError) : -1;
  if (refusedAt >= 0) {
    book.rollback(start);
    keys.freeWhole(unit);
    return { refused: new AtomicRefusal(refusedAt, answers[refusedAt] as ConnectError) };
  }
  keys.keep(local);
  return answered(unit, answers, keys);
}

const keyConflict = () => ruleViolation("idempotency_conflict", "this idempotency key was already used with a different request");

/**
 * One item's answer: the error it was refused with before it queued, what its key already
 * answers, or what applying its command on `book` gives. A keyed success is noted in `local`.
 */
function applyItem(
  book: Book,
  item: Submission<DescMessage>,
  stateOf: (k: string) => KeyState,
  local: Map<string, KeyState>,
): ItemAnswer | LaterAnswer {
  if (item.command instanceof ConnectError) return item.command;
  const claim = item.idempotency;
  if (claim) {
    const state = stateOf(keyString(claim));
    if (state.kind === "error") return state.error;
    if (state.kind === "whole") return keyConflict();
    if (state.kind === "answered") {
      if (!state.fingerprint.equals(claim.fingerprint)) return keyConflict();
      return { response: fromBinary(item.responseSchema, state.response), replayed: true };
    }
  }
  const outcome = book.apply(item.command);
  if (!outcome.ok) return outcome.error;
  if (!claim) return { later: () => ({ response: create(item.responseSchema, item.respond(outcome)), replayed: false }) };
  const response = create(item.responseSchema, item.respond(outcome));
  local.set(keyString(claim), {
    kind: "answered",
    fingerprint: claim.fingerprint,
    response: toBinary(item.responseSchema, response),
    fresh: true,
  });
  return { response, replayed: false };
}

/** A unit none of whose items reached the book: each was refused before it queued. */
function answerRefusedItems(unit: Unit, keys: TransactionKeys): UnitResult {
  const answers = unit.items.map((item) => item.command as ConnectError);
  if (!unit.atomic) return answered(unit, answers, keys);
  keys.freeWhole(unit);
  return { refused: new AtomicRefusal(0, answers[0]!) };
}

/**
 * A unit that applied: its answers, and for a batch call its whole response. A batch call with
 * a key stores its whole response, so that is built now; otherwise the responses wait for commit.
 */
function answered(unit: Unit, pending: Array<ItemAnswer | LaterAnswer>, keys: TransactionKeys): UnitResult {
  if (!unit.respondWhole || !unit.idempotency) return { answers: pending };
  const answers = pending.map((a) => (isLater(a) ? a.later() : a));
  const whole = wholeResponse(unit.respondWhole, answers);
  keys.storeWhole(unit.idempotency, toBinary(unit.respondWhole.schema, whole));
  return { answers, whole };
}
