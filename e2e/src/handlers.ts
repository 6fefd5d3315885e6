import { afterAll, afterEach, beforeAll, expect } from "vitest";
import { randomBytes } from "node:crypto";
import { createRouterTransport, type ConnectRouter, type Interceptor, type Transport } from "@connectrpc/connect";
import {
  authInterceptor,
  createLogger,
  DEFAULT_RPC_BODY_LIMIT_BYTES,
  newId,
  requestIdInterceptor,
  type Authenticator,
  type InProcessService,
  type Principal,
} from "@ledger/common";
import { startGateway, type GatewayConfig, type GatewayHandle } from "@ledger/gateway";
import { createHoldService } from "@ledger/hold-service";
import { LEDGER_INTERNAL_METHODS, LEDGER_PUBLIC_METHODS, ledgerRpcRoutes } from "@ledger/ledger-service";
import { notificationRpcRoutes } from "@ledger/notification-service";
import { HoldService } from "@ledger/proto/hold/v1/hold_pb.js";
import { restClient, type Api } from "./rest-client.js";

/**
 * The gateway in front of every service's RPC handlers, called in memory through Connect's router
 * transport, with the services' authentication interceptor (one valid API key, one service token),
 * and no database, NATS or other service behind them. For what is decided before any of those is reached: REST and RPC argument checks, API
 * keys and permissions, and how refusals map to the error envelope. Whatever a handler would read
 * or write is "unreachable": touching it fails the call (a 500) and is named in `reached`, so a
 * test of a refusal also proves the refusal changed nothing.
 */
export interface Handlers {
  /** The gateway's REST base URL, ending in /v1. */
  restUrl: string;
  /** A REST client with the one valid API key. */
  api: Api;
  apiKey: string;
  principal: Principal;
  /** The installation's service token (`authorization: Service <token>`). */
  serviceToken: string;
  /** The ledger's RPC handlers with their interceptors, for RPC clients: `createClient(LedgerService, handlers.ledger)`. */
  ledger: Transport;
  /** What a handler touched that it should not have: empty after every test. */
  reached: string[];
  gateway: GatewayHandle;
  close(): Promise<void>;
}

/** Starts the gateway on port 0 in front of the in-memory handlers. */
export async function startHandlers(gateway: Partial<GatewayConfig> = {}): Promise<Handlers> {
  const reached: string[] = [];
  const apiKey = `lsk_test_${randomBytes(12).toString("hex")}`;
  const serviceToken = `service-${randomBytes(12).toString("hex")}`;
  const principal: Principal = { accountId: newId("account"), defaultProgramId: newId("program"), apiKeyId: newId("apiKey") };
  const authenticate: Authenticator = async (key) => (key === apiKey ? principal : null);
  const log = createLogger("handlers", process.env["TEST_LOG_LEVEL"] ?? "silent");
  const serverInterceptors = (publicMethods: string[] = [], internalMethods: string[] = []): Interceptor[] => [
    requestIdInterceptor(log),
    authInterceptor({
      authenticate,
      publicMethods,
      internalMethods,
      service: {
        token: serviceToken,
        resolveAccount: async (accountId) =>
          accountId === principal.accountId ? { accountId, defaultProgramId: principal.defaultProgramId } : null,
      },
    }),
  ];
  /** A stand-in for a dependency a handler must not touch in these tests. */
  const unreachable = (what: string): never => {
    const fail = () => {
      reached.push(what);
      throw new Error(`${what} was reached`);
    };
    // `then` is read by await; answering undefined keeps a mere `await dep` from counting as a use.
    return new Proxy<() => void>(() => {}, { apply: fail, get: (_target, name) => (name === "then" ? undefined : fail()) }) as never;
  };
  const inMemory = (name: string, routes: (router: ConnectRouter) => void, interceptors: Interceptor[]): InProcessService => ({
    name,
    transport: (clientInterceptors: Interceptor[] = []) =>
      createRouterTransport(routes, {
        router: { interceptors, readMaxBytes: DEFAULT_RPC_BODY_LIMIT_BYTES },
        transport: { interceptors: clientInterceptors },
      }),
  });

  const ledger = inMemory(
    "ledger",
    ledgerRpcRoutes({
      sql: unreachable("the ledger's database"),
      outbox: unreachable("the ledger's outbox"),
      batcher: unreachable("the ledger's batcher"),
      // The program a call names, else the key's default: which programs exist is the database's to say.
      resolveProgram: async (caller, requested) => requested || caller.defaultProgramId,
      authenticate,
    }),
    serverInterceptors(LEDGER_PUBLIC_METHODS, LEDGER_INTERNAL_METHODS),
  );
  const hold = inMemory(
    "hold",
    (router) =>
      router.service(
        HoldService,
        createHoldService(unreachable("the hold service's store"), unreachable("the ledger, from the hold service")),
      ),
    serverInterceptors(),
  );
  const notification = inMemory(
    "notification",
    notificationRpcRoutes({
      sql: unreachable("the notification database"),
      secretKey: randomBytes(32),
      urlPolicy: { allowHttp: false, allowPrivateNetworks: false },
      wake: unreachable("the delivery loop"),
    }),
    serverInterceptors(),
  );
  const handle = await startGateway(
    {
      host: "127.0.0.1",
      port: 0,
      opsPort: 0,
      // Never dialled: every service is in memory.
      ledgerUrl: "http://127.0.0.1:9",
      holdUrl: "http://127.0.0.1:9",
      notificationUrl: "http://127.0.0.1:9",
      bodyLimitBytes: 64 * 1024,
      batchBodyLimitBytes: 4 * 1024 * 1024,
      logLevel: process.env["TEST_LOG_LEVEL"] ?? "silent",
      rateLimitPerSecond: 0,
      rateLimitBurst: 1,
      ...gateway,
    },
    { ledger, hold, notification },
  );
  const restUrl = `${handle.server.url}/v1`;
  return {
    restUrl,
    api: restClient(restUrl, apiKey),
    apiKey,
    principal,
    serviceToken,
    ledger: ledger.transport(),
    reached,
    gateway: handle,
    close: () => handle.close(),
  };
}

/**
 * For a file of refusal tests: starts the handlers once for the file, closes them after it, and
 * after each test checks that nothing behind the handlers was reached, so every refusal is also
 * proven to have changed nothing. Call it at the top of the file; it returns the running handlers.
 */
export function refusalHandlers(): () => Handlers {
  let handlers: Handlers | undefined;
  beforeAll(async () => {
    handlers = await startHandlers();
  });
  afterAll(async () => handlers?.close());
  afterEach(() => {
    expect(handlers!.reached.splice(0)).toEqual([]);
  });
  return () => handlers!;
}
