// The workloads `accounts` and `accounts-one` (bench/README.md): posted two-party transfers, each
// client acting for one of ACCOUNTS accounts, so concurrent calls are of different accounts, as
// they are in a ledger of many tenants. `accounts` goes to the system's ledger, whose group commit
// mixes accounts in a transaction; `accounts-one` to a second ledger process on the same database
// with LEDGER_BATCH_ONE_ACCOUNT=true, which keeps one account per transaction (what a Postgres
// distributed by account needs, docs/scaling.md). Same load, same concurrency: the ratio of the
// two cells is what the setting costs on one primary.
import { TransactionStatus } from "@ledger/proto/ledger/v1/ledger_pb.js";
import type { Operation } from "./closed-loop.js";
import { rpcClients, type Rpc } from "./connect.js";
import { createFixtures, type Fixtures } from "./workloads.js";

export const ACCOUNT_WORKLOADS = ["accounts", "accounts-one"] as const;
export type AccountWorkloadName = (typeof ACCOUNT_WORKLOADS)[number];

/** Accounts the clients are spread over, client i acting for account i mod ACCOUNTS. */
export const ACCOUNTS = 8;
/** Funded entities per account. */
export const ENTITIES_PER_ACCOUNT = 50;
/** The second ledger's setting for `accounts-one`. */
export const ONE_ACCOUNT_ENV = { LEDGER_BATCH_ONE_ACCOUNT: "true" };

export const ACCOUNT_WORKLOAD_DESCRIPTIONS: Record<AccountWorkloadName, string> = {
  accounts: `posted transfer between two random entities of one of ${ACCOUNTS} accounts (client i acts for account i mod ${ACCOUNTS}); group commit mixes accounts`,
  "accounts-one": "the same, on a second ledger process with LEDGER_BATCH_ONE_ACCOUNT=true: one account per transaction",
};

export function isAccountWorkload(name: string): name is AccountWorkloadName {
  return (ACCOUNT_WORKLOADS as readonly string[]).includes(name);
}

/** The accounts of the workloads: each one's API key and funded entities. */
export interface AccountFixtures {
  accounts: Array<{ accountId: string; apiKey: string; fixtures: Fixtures }>;
}

/** Creates the accounts (through `createAccount`, the ledger's own) and funds their entities over RPC to `ledgerUrl`. */
export async function createAccountFixtures(
  createAccount: (name: string) => Promise<{ account_id: string; api_key: string }>,
  ledgerUrl: string,
  holdUrl: string,
): Promise<AccountFixtures> {
  const accounts: AccountFixtures["accounts"] = [];
  for (let i = 0; i < ACCOUNTS; i++) {
    const account = await createAccount(`bench accounts ${i}`);
    const rpc = rpcClients(ledgerUrl, holdUrl, account.api_key);
    try {
      accounts.push({ accountId: account.account_id, apiKey: account.api_key, fixtures: await createFixtures(rpc, ENTITIES_PER_ACCOUNT) });
    } finally {
      rpc.close();
    }
  }
  return { accounts };
}

/**
 * The operation of both workloads against `ledgerUrl`: worker w transfers 1 between two random
 * entities of account w mod ACCOUNTS. `close` ends the clients.
 */
export function accountsOperation(fixtures: AccountFixtures, ledgerUrl: string, holdUrl: string): { operation: Operation; close(): void } {
  const clients: Rpc[] = fixtures.accounts.map((a) => rpcClients(ledgerUrl, holdUrl, a.apiKey));
  const operation: Operation = async (worker) => {
    const i = worker % fixtures.accounts.length;
    const entities = fixtures.accounts[i]!.fixtures.entities;
    const from = entities[Math.floor(Math.random() * entities.length)]!;
    let to = from;
    while (to === from) to = entities[Math.floor(Math.random() * entities.length)]!;
    await clients[i]!.ledger.createTransaction({
      description: "bench accounts",
      status: TransactionStatus.POSTED,
      form: { case: "transfer", value: { fromEntityId: from, toEntityId: to, amount: 1n } },
    });
    return 1;
  };
  const close = () => {
    for (const client of clients) client.close();
  };
  return { operation, close };
}
