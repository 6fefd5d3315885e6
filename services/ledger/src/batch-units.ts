// The units of work of group commit (batcher.ts): what a caller submits, what a transaction makes
// of it, and what the caller gets back.
import { create, type DescMessage, type JsonObject, type MessageInitShape, type MessageShape } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";
import { errorCodeOf, type KeyClaim } from "@ledger/common";
import type { MoneyCommand, Outcome } from "./money.js";

/** The successful outcome of a command. */
export type Applied = Extract<Outcome, { ok: true }>;

/**
 * One money command with what is needed to answer it and to remember its key. `command` is an
 * error when the item was refused before it got here (a malformed item of a batch): it keeps its
 * place in the order and answers that error.
 */
export interface Submission<O extends DescMessage> {
  command: MoneyCommand | ConnectError;
  idempotency?: KeyClaim;
  responseSchema: O;
  /** Builds the response from the outcome; runs inside the transaction, before the key is stored. */
  respond(outcome: Applied): MessageInitShape<O>;
}

/** What the caller gets: the response, and whether it is a stored one replayed. */
export interface Answer<O extends DescMessage> {
  response: MessageShape<O>;
  replayed: boolean;
}

/** The answer of one item of a batch: its response, or why it was refused. */
export type ItemAnswer = Answer<DescMessage> | ConnectError;

/** A refused item as a batch answer carries it: the single call's error code, message and details. */
export function itemError(error: ConnectError): { code: string; message: string; details?: JsonObject } {
  const { code, details } = errorCodeOf(error);
  return { code, message: error.rawMessage, ...(details ? { details } : {}) };
}

/** A batch call: items applied in order in one transaction, answered as one response. */
export interface BatchSubmission<O extends DescMessage> {
  items: Array<Submission<DescMessage>>;
  /** All items apply or none. */
  atomic: boolean;
  /** The key of the whole call: a repeat replays the whole response. */
  idempotency?: KeyClaim;
  responseSchema: O;
  /** Builds the whole response from the items' answers; runs inside the transaction. */
  respond(answers: ItemAnswer[]): MessageInitShape<O>;
}

/** An atomic batch that applied nothing, because the item at `index` was refused with `error`. */
export class AtomicRefusal extends Error {
  constructor(
    readonly index: number,
    readonly error: ConnectError,
  ) {
    super(error.rawMessage);
  }
}

/**
 * An applied item whose response nothing inside the transaction needs (it has no key to store it
 * under): built after commit, so the row locks are not held while it is.
 */
export interface LaterAnswer {
  later(): Answer<DescMessage>;
}

/**
 * What a unit of work comes to: its items' answers (some still to build after commit), a replayed
 * whole response, or an atomic refusal.
 */
export type UnitResult =
  | { answers: Array<ItemAnswer | LaterAnswer>; whole?: MessageShape<DescMessage> }
  | { replay: Uint8Array }
  | { refused: AtomicRefusal }
  | { error: ConnectError };

/** The unit's answers with every response built, and a batch call's whole response. */
export type FinalResult = Exclude<UnitResult, { answers: unknown }> | { answers: ItemAnswer[]; whole?: MessageShape<DescMessage> };

export const isLater = (a: ItemAnswer | LaterAnswer): a is LaterAnswer => "later" in a;

/** How a batch call builds its whole response from its items' answers. */
interface WholeResponse {
  schema: DescMessage;
  respond(answers: ItemAnswer[]): MessageInitShape<DescMessage>;
}

/**
 * A unit of work in the queue: one single call (one item), or one batch call (many). A unit is
 * never split: all its items go in one transaction, in order.
 */
export interface Unit {
  items: Array<Submission<DescMessage>>;
  atomic: boolean;
  idempotency?: KeyClaim;
  respondWhole?: WholeResponse;
  /** When it was queued (performance.now()), for the linger. */
  queuedAt: number;
  /** Its idempotency keys (items' and the call's), so each key is claimed once per transaction. */
  keys: string[];
  /** Its items: what it takes of a transaction's `maxBatch`. */
  size: number;
  /** The account it acts for (every item of a call is its caller's), for LEDGER_BATCH_ONE_ACCOUNT. */
  account: string;
  resolve(result: FinalResult): void;
  reject(err: unknown): void;
}

/** The commands of `units`' items, in order, without the items refused before they queued. */
export const commandsOf = (units: Unit[]): MoneyCommand[] =>
  units.flatMap((unit) => unit.items.flatMap((item) => (item.command instanceof ConnectError ? [] : [item.command])));

/** An idempotency key as one string: its account and the key. */
export const keyString = (k: { accountId: string; key: string }) => `${k.accountId}\u0000${k.key}`;

/** A batch call's whole response, from its items' answers. */
export function wholeResponse(whole: WholeResponse, answers: ItemAnswer[]): MessageShape<DescMessage> {
  return create(whole.schema, whole.respond(answers));
}

/** Builds, after commit, the responses the transaction left for later. */
export function finish(unit: Unit, result: UnitResult): FinalResult {
  if (!("answers" in result) || result.whole) return result as FinalResult;
  const answers = result.answers.map((a) => (isLater(a) ? a.later() : a));
  if (!unit.respondWhole) return { answers };
  return { answers, whole: wholeResponse(unit.respondWhole, answers) };
}
