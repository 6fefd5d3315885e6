import type { CallOptions, Client } from "@connectrpc/connect";
import { ConnectError } from "@connectrpc/connect";
import { appError, errorCodeOf, invalidArgument } from "@ledger/common";
import type { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import {
  BalanceAlertFieldSchema,
  BalanceAlertOperatorSchema,
  Direction,
  EntityStatusSchema,
  TransactionStatus,
  TransactionStatusSchema,
  type EntityStatus,
  type LedgerService,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import type { MessageInitShape } from "@bufbuild/protobuf";
import type {
  CreateTransactionRequestSchema,
  CreateTransactionsItemSchema,
  CreateTransactionsResponse,
} from "@ledger/proto/ledger/v1/ledger_pb.js";
import type { NotificationService } from "@ledger/proto/notification/v1/notification_pb.js";
import {
  amountField,
  arrayField,
  asObject,
  balanceField,
  booleanField,
  enumField,
  limitParam,
  listFilterParams,
  nameFilterParam,
  onlyKnown,
  metadataField,
  optionalStringField,
  objectField,
  overdraftLimitField,
  optionalParam,
  requiredParam,
  stringField,
  timeParam,
  type Fields,
} from "./input.js";
import {
  renderBalanceAlert,
  renderEntity,
  renderGroup,
  renderLeg,
  renderPage,
  renderProgram,
  renderRetrievedLeg,
  renderStatement,
  enumParam,
} from "./render.js";

/** The RPC clients routes call. */
export interface Clients {
  ledger: Client<typeof LedgerService>;
  hold: Client<typeof HoldService>;
  notification: Client<typeof NotificationService>;
}

/** What a route handler gets: the parsed request and the options to forward on every RPC. */
export interface RouteRequest {
  query: Fields;
  body: Fields;
  /** The `program_id` header, or "" for the caller's default program. */
  programId: string;
  call: CallOptions;
}

/** One REST endpoint: its method and path under /v1, the names it accepts, and its mapping. */
export interface Route {
  method: "GET" | "POST" | "PUT" | "DELETE";
  path: string;
  query?: readonly string[];
  body?: readonly string[];
  /** Takes bodies up to the batch limit (GATEWAY_BATCH_BODY_LIMIT_BYTES) instead of the usual one. */
  largeBody?: boolean;
  handle(req: RouteRequest, clients: Clients): Promise<Record<string, unknown>>;
}

const PAGE = ["limit", "cursor"] as const;

/** Most entries in one statement page (docs/api.md#balances-over-time); the ledger checks the same bound. */
const MAX_STATEMENT_PAGE = 1000;

/** The filters of entity and transaction lists (listFilterParams). */
const LIST_FILTERS = ["created_after", "created_before", "metadata"] as const;
const GROUP_ACTION = ["transaction_group_id"] as const;

function transactionStatusParam(query: Fields): TransactionStatus {
  return enumParam(TransactionStatusSchema, optionalParam(query, "status"), "status");
}

function entityStatusParam(query: Fields): EntityStatus {
  return enumParam(EntityStatusSchema, optionalParam(query, "status"), "status");
}

function createStatus(body: Fields): TransactionStatus {
  const word = stringField(body, "status");
  if (word === "" || word === "pending") return TransactionStatus.PENDING;
  if (word === "posted") return TransactionStatus.POSTED;
  throw invalidArgument("status must be pending or posted", { field: "status" });
}

/** The transaction form of POST /transaction: two-party (`amount` + `account`) or multi-leg (`entries`). */
function transactionForm(body: Fields) {
  const entries = arrayField(body, "entries");
  const hasTwoParty = body["account"] !== undefined || body["amount"] !== undefined;
  if (entries && hasTwoParty) throw invalidArgument("give either amount with account {from, to}, or entries, not both");
  if (entries) {
    return {
      case: "entries" as const,
      value: {
        entries: entries.map((raw, i) => {
          const entry = asObject(raw);
          const where = `entries[${i}]`;
          for (const name of Object.keys(entry)) {
            if (!["entity_id", "direction", "amount"].includes(name)) throw invalidArgument(`unknown field ${where}.${name}`);
          }
          const direction = stringField(entry, "direction");
          if (direction !== "debit" && direction !== "credit") throw invalidArgument(`${where}.direction must be debit or credit`);
          const entityId = stringField(entry, "entity_id");
          if (entityId === "") throw invalidArgument(`${where}.entity_id is required`);
          return {
            entityId,
            direction: direction === "debit" ? Direction.DEBIT : Direction.CREDIT,
            amount: amountField(entry, "amount"),
          };
        }),
      },
    };
  }
  if (!hasTwoParty) throw invalidArgument("give either amount with account {from, to}, or entries");
  const account = objectField(body, "account");
  if (!account) throw invalidArgument("account {from, to} is required with amount", { field: "account" });
  for (const name of Object.keys(account)) {
    if (name !== "from" && name !== "to") throw invalidArgument(`unknown field account.${name}; expected from and to`);
  }
  const from = stringField(account, "from");
  const to = stringField(account, "to");
  if (from === "") throw invalidArgument("account.from is required");
  if (to === "") throw invalidArgument("account.to is required");
  return { case: "transfer" as const, value: { fromEntityId: from, toEntityId: to, amount: amountField(body, "amount") } };
}

const TRANSACTION_BODY = ["description", "status", "metadata", "amount", "account", "entries"] as const;

/** The RPC form of a POST /transaction body; throws the 400 the single call answers. */
function transactionRequest(body: Fields, programId: string): MessageInitShape<typeof CreateTransactionRequestSchema> {
  const metadata = metadataField(body);
  return {
    programId,
    description: stringField(body, "description"),
    status: createStatus(body),
    ...(metadata ? { metadata } : {}),
    form: transactionForm(body),
  };
}

/** Most items in one batch (docs/api.md#batches); the ledger checks the same bound. */
const MAX_BATCH_ITEMS = 1000;

/**
 * The items of POST /transaction/batch. The batch itself malformed is a 400 for the whole call.
 * An item malformed as JSON (an unknown field, a float amount) is that item's own refusal: it
 * goes to the ledger empty, which refuses it in its place in the order, and its answer carries
 * the gateway's message instead, so it reads exactly as the single call would have.
 */
function batchItems(body: Fields): {
  items: Array<MessageInitShape<typeof CreateTransactionsItemSchema>>;
  malformed: Map<number, ConnectError>;
} {
  const raw = body["transactions"];
  if (raw === undefined || raw === null)
    throw invalidArgument("transactions is required: an array of 1 to 1000 transactions", { field: "transactions" });
  if (!Array.isArray(raw)) throw invalidArgument("transactions must be an array", { field: "transactions" });
  if (raw.length === 0 || raw.length > MAX_BATCH_ITEMS) {
    throw invalidArgument(`transactions must hold 1 to ${MAX_BATCH_ITEMS} items; got ${raw.length}`, { field: "transactions" });
  }
  const malformed = new Map<number, ConnectError>();
  const items = raw.map((entry, index) => {
    try {
      const item = asObject(entry);
      onlyKnown(item, [...TRANSACTION_BODY, "idempotency_key"], "body");
      const key = item["idempotency_key"];
      if (key !== undefined && (typeof key !== "string" || key.length < 1 || key.length > 255)) {
        throw invalidArgument("idempotency_key must be a string of 1 to 255 characters", { field: "idempotency_key" });
      }
      return { transaction: transactionRequest(item, ""), idempotencyKey: key ?? "" };
    } catch (err) {
      malformed.set(index, ConnectError.from(err));
      return {};
    }
  });
  return { items, malformed };
}

/** The REST form of one item's error. */
function renderItemError(error: { code: string; message: string; details?: unknown }) {
  return { code: error.code, message: error.message, ...(error.details ? { details: error.details } : {}) };
}

/** Every REST path of the ledger (docs/api.md#endpoints; each is described in gateway/openapi.yaml). */
export const ledgerRoutes: Route[] = [
  {
    method: "POST",
    path: "/entity",
    body: ["entity_name", "entity_type", "metadata", "currency_code", "overdraft_limit"],
    async handle({ body, programId, call }, { ledger }) {
      const metadata = metadataField(body);
      const overdraftLimit = overdraftLimitField(body);
      const res = await ledger.createEntity(
        {
          programId,
          entityName: stringField(body, "entity_name"),
          entityType: stringField(body, "entity_type"),
          currencyCode: stringField(body, "currency_code"),
          ...(metadata ? { metadata } : {}),
          ...(overdraftLimit !== undefined ? { overdraftLimit } : {}),
        },
        call,
      );
      return { entity: renderEntity(res.entity!) };
    },
  },
  {
    method: "GET",
    path: "/entity",
    query: ["entity_id", "as_of"],
    async handle({ query, programId, call }, { ledger }) {
      const asOf = timeParam(query, "as_of");
      const res = await ledger.getEntity({ programId, entityId: requiredParam(query, "entity_id"), ...(asOf ? { asOf } : {}) }, call);
      return { entity: renderEntity(res.entity!) };
    },
  },
  {
    method: "GET",
    path: "/entity/statement",
    query: ["entity_id", "from", "to", ...PAGE],
    async handle({ query, programId, call }, { ledger }) {
      const entityId = requiredParam(query, "entity_id");
      const [from, to] = [timeParam(query, "from"), timeParam(query, "to")];
      if (!from) throw invalidArgument("query parameter from is required", { parameter: "from" });
      if (!to) throw invalidArgument("query parameter to is required", { parameter: "to" });
      const res = await ledger.getEntityStatement(
        { programId, entityId, from, to, limit: limitParam(query, MAX_STATEMENT_PAGE), cursor: optionalParam(query, "cursor") },
        call,
      );
      return renderStatement(res);
    },
  },
  {
    method: "PUT",
    path: "/entity",
    body: ["entity_id", "entity_name", "entity_type", "metadata", "overdraft_limit"],
    async handle({ body, programId, call }, { ledger }) {
      const entityName = optionalStringField(body, "entity_name");
      const entityType = optionalStringField(body, "entity_type");
      const metadata = metadataField(body);
      const overdraftLimit = overdraftLimitField(body);
      const res = await ledger.updateEntity(
        {
          programId,
          entityId: stringField(body, "entity_id"),
          ...(entityName !== undefined ? { entityName } : {}),
          ...(entityType !== undefined ? { entityType } : {}),
          ...(metadata ? { metadata } : {}),
          ...(overdraftLimit !== undefined ? { overdraftLimit } : {}),
        },
        call,
      );
      return { entity: renderEntity(res.entity!) };
    },
  },
  {
    method: "GET",
    path: "/entities",
    query: [...PAGE, "entity_type", "status", "name", ...LIST_FILTERS],
    async handle({ query, programId, call }, { ledger }) {
      const res = await ledger.listEntities(
        {
          programId,
          limit: limitParam(query),
          cursor: optionalParam(query, "cursor"),
          entityType: optionalParam(query, "entity_type"),
          status: entityStatusParam(query),
          ...nameFilterParam(query),
          ...listFilterParams(query),
        },
        call,
      );
      return { entities: res.entities.map(renderEntity), pagination: renderPage(res.page) };
    },
  },
  {
    method: "POST",
    path: "/entity/freeze",
    body: ["entity_id", "reason"],
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.freezeEntity(
        { programId, entityId: stringField(body, "entity_id"), reason: stringField(body, "reason") },
        call,
      );
      return { entity: renderEntity(res.entity!) };
    },
  },
  {
    method: "POST",
    path: "/entity/unfreeze",
    body: ["entity_id"],
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.unfreezeEntity({ programId, entityId: stringField(body, "entity_id") }, call);
      return { entity: renderEntity(res.entity!) };
    },
  },
  {
    method: "POST",
    path: "/entity/close",
    body: ["entity_id"],
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.closeEntity({ programId, entityId: stringField(body, "entity_id") }, call);
      return { entity: renderEntity(res.entity!) };
    },
  },
  {
    method: "POST",
    path: "/entity/alert",
    body: ["entity_id", "field", "operator", "value"],
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.createBalanceAlert(
        {
          programId,
          entityId: stringField(body, "entity_id"),
          field: enumField(BalanceAlertFieldSchema, body, "field"),
          operator: enumField(BalanceAlertOperatorSchema, body, "operator"),
          value: balanceField(body, "value"),
        },
        call,
      );
      return { alert: renderBalanceAlert(res.alert!) };
    },
  },
  {
    method: "GET",
    path: "/entity/alerts",
    query: ["entity_id"],
    async handle({ query, programId, call }, { ledger }) {
      const res = await ledger.listBalanceAlerts({ programId, entityId: requiredParam(query, "entity_id") }, call);
      return { alerts: res.alerts.map(renderBalanceAlert) };
    },
  },
  {
    method: "DELETE",
    path: "/entity/alert",
    query: ["alert_id"],
    async handle({ query, programId, call }, { ledger }) {
      await ledger.deleteBalanceAlert({ programId, alertId: requiredParam(query, "alert_id") }, call);
      return {};
    },
  },
  {
    method: "POST",
    path: "/entity/fund",
    body: ["amount", "entity_id", "description"],
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.fundEntity(
        {
          programId,
          entityId: stringField(body, "entity_id"),
          amount: amountField(body, "amount"),
          description: stringField(body, "description"),
        },
        call,
      );
      return { transaction: { credit: renderLeg(res.credit!) } };
    },
  },
  {
    method: "POST",
    path: "/entity/defund",
    body: ["amount", "entity_id", "description"],
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.defundEntity(
        {
          programId,
          entityId: stringField(body, "entity_id"),
          amount: amountField(body, "amount"),
          description: stringField(body, "description"),
        },
        call,
      );
      return { transaction: { debit: renderLeg(res.debit!) } };
    },
  },
  {
    method: "POST",
    path: "/transaction",
    body: TRANSACTION_BODY,
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.createTransaction(transactionRequest(body, programId), call);
      const group = res.transactionGroup!;
      return { transactions: group.legs.map(renderLeg), transaction_group_id: group.transactionGroupId };
    },
  },
  {
    method: "POST",
    path: "/transaction/batch",
    body: ["transactions", "atomic"],
    largeBody: true,
    async handle({ body, programId, call }, { ledger }) {
      const atomic = booleanField(body, "atomic") ?? false;
      const { items, malformed } = batchItems(body);
      let res: CreateTransactionsResponse;
      try {
        res = await ledger.createTransactions({ programId, atomic, transactions: items }, call);
      } catch (err) {
        const error = ConnectError.from(err);
        const index = errorCodeOf(error).details?.["index"];
        const own = typeof index === "number" ? malformed.get(index) : undefined;
        if (!own || typeof index !== "number") throw err;
        const { code, details } = errorCodeOf(own);
        throw appError(own.code, code, `transactions[${index}]: ${own.rawMessage}`, Object.assign({}, details, { index }));
      }
      return {
        succeeded: res.succeeded,
        failed: res.failed,
        results: res.results.map((result, index) => {
          const own = malformed.get(index);
          if (own) {
            const { code, details } = errorCodeOf(own);
            return { status: "error", error: renderItemError({ code, message: own.rawMessage, details }) };
          }
          if (result.result.case === "error") return { status: "error", error: renderItemError(result.result.value) };
          const group = result.result.value!;
          return {
            status: "success",
            transaction_group_id: group.transactionGroupId,
            transactions: group.legs.map(renderLeg),
            replayed: result.replayed,
          };
        }),
      };
    },
  },
  {
    method: "GET",
    path: "/transaction",
    query: ["entity_id", "transaction_id"],
    async handle({ query, programId, call }, { ledger }) {
      const res = await ledger.getTransaction(
        { programId, entityId: requiredParam(query, "entity_id"), transactionId: requiredParam(query, "transaction_id") },
        call,
      );
      return { transaction: renderRetrievedLeg(res.leg!) };
    },
  },
  {
    method: "GET",
    path: "/transactions",
    query: [...PAGE, "entity_id", "status", ...LIST_FILTERS],
    async handle({ query, programId, call }, { ledger }) {
      const res = await ledger.listTransactions(
        {
          programId,
          entityId: requiredParam(query, "entity_id"),
          limit: limitParam(query),
          cursor: optionalParam(query, "cursor"),
          status: transactionStatusParam(query),
          ...listFilterParams(query),
        },
        call,
      );
      return { transactions: res.legs.map(renderLeg), pagination: renderPage(res.page) };
    },
  },
  {
    method: "GET",
    path: "/transaction/group",
    query: ["transaction_group_id"],
    async handle({ query, programId, call }, { ledger }) {
      const res = await ledger.getTransactionGroup({ programId, transactionGroupId: requiredParam(query, "transaction_group_id") }, call);
      return { transaction_group: renderGroup(res.transactionGroup!) };
    },
  },
  {
    method: "GET",
    path: "/transaction/groups",
    query: [...PAGE, "status", ...LIST_FILTERS],
    async handle({ query, programId, call }, { ledger }) {
      const res = await ledger.listTransactionGroups(
        {
          programId,
          limit: limitParam(query),
          cursor: optionalParam(query, "cursor"),
          status: transactionStatusParam(query),
          ...listFilterParams(query),
        },
        call,
      );
      return { transaction_groups: res.transactionGroups.map(renderGroup), pagination: renderPage(res.page) };
    },
  },
  {
    method: "POST",
    path: "/transaction/post",
    body: GROUP_ACTION,
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.postTransaction({ programId, transactionGroupId: stringField(body, "transaction_group_id") }, call);
      return { transaction_group: renderGroup(res.transactionGroup!) };
    },
  },
  {
    method: "POST",
    path: "/transaction/cancel",
    body: GROUP_ACTION,
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.cancelTransaction({ programId, transactionGroupId: stringField(body, "transaction_group_id") }, call);
      return { transaction_group: renderGroup(res.transactionGroup!) };
    },
  },
  {
    method: "POST",
    path: "/transaction/fail",
    body: [...GROUP_ACTION, "reason"],
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.failTransaction(
        { programId, transactionGroupId: stringField(body, "transaction_group_id"), reason: stringField(body, "reason") },
        call,
      );
      return { transaction_group: renderGroup(res.transactionGroup!) };
    },
  },
  {
    method: "POST",
    path: "/transaction/reverse",
    body: [...GROUP_ACTION, "description"],
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.reverseTransaction(
        { programId, transactionGroupId: stringField(body, "transaction_group_id"), description: stringField(body, "description") },
        call,
      );
      return {
        transaction_group: renderGroup(res.transactionGroup!),
        reversal_transaction_group_id: res.reversalTransactionGroupId,
      };
    },
  },
  {
    method: "POST",
    path: "/transaction/dispute",
    body: [...GROUP_ACTION, "reason"],
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.disputeTransaction(
        { programId, transactionGroupId: stringField(body, "transaction_group_id"), reason: stringField(body, "reason") },
        call,
      );
      return { transaction_group: renderGroup(res.transactionGroup!) };
    },
  },
  {
    method: "POST",
    path: "/program",
    body: ["program_name", "currency_code"],
    async handle({ body, call }, { ledger }) {
      const res = await ledger.createProgram(
        { programName: stringField(body, "program_name"), currencyCode: stringField(body, "currency_code") },
        call,
      );
      return { program: renderProgram(res.program!) };
    },
  },
  {
    method: "GET",
    path: "/program",
    query: [],
    async handle({ programId, call }, { ledger }) {
      const res = await ledger.getProgram({ programId }, call);
      return { program: renderProgram(res.program!) };
    },
  },
  {
    method: "GET",
    path: "/programs",
    query: PAGE,
    async handle({ query, call }, { ledger }) {
      const res = await ledger.listPrograms({ limit: limitParam(query), cursor: optionalParam(query, "cursor") }, call);
      return { programs: res.programs.map(renderProgram), pagination: renderPage(res.page) };
    },
  },
  {
    method: "PUT",
    path: "/program",
    body: ["program_name"],
    async handle({ body, programId, call }, { ledger }) {
      const res = await ledger.updateProgram({ programId, programName: stringField(body, "program_name") }, call);
      return { program: renderProgram(res.program!) };
    },
  },
];
