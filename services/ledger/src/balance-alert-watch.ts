// Which money writes turn a balance alert, and what they write for it (docs/api.md#balance-alerts).
//
// A money batch's book rests on entity rows read under lock or taken from the process's cache, and
// each row carries its entity's alerts as of that row version: the locked read loads them, and
// every alert change writes a new version of the row (balance-alerts.ts), which a cached write
// then fails to find. So the process knows every alert and its `triggered` without asking
// Postgres, and a batch on entities without alerts costs nothing more. After each unit of the
// batch (a call, or a batch call as a whole) the watch compares each alert's condition with the
// balances the unit left: a change is a crossing, with its event. The write then stores the new
// `triggered` of the alerts that changed, in its one statement (money-persist.ts).
import { availableOf } from "./entities.js";
import { type AlertBalances, type AlertOrigin, type EncodedAlertEvent, encodeBalanceAlertEvent } from "./balance-alert-events.js";
import { conditionHolds, type BalanceAlertRow } from "./balance-alerts.js";
import type { Book, BookEntity, EntityState } from "./money-rules.js";

/** An alert whose `triggered` a write changes. */
export interface AlertChange {
  id: string;
  account_id: string;
  triggered: boolean;
}

/** What a batch's crossings leave to write: their events, the alerts' new state, each entity's alerts after. */
export interface AlertWrites {
  events: EncodedAlertEvent[];
  /** Alerts whose `triggered` differs from the stored one (crossed an odd number of times). */
  changes: AlertChange[];
  /** The alerts of each watched entity as the write leaves them, for the cached row. */
  alertsOf: Map<string, readonly BalanceAlertRow[]>;
}

/** The writes of a batch that crossed nothing, as nearly every batch: shared, never changed. */
const NOTHING_CROSSED: AlertWrites = Object.freeze({ events: [], changes: [], alertsOf: new Map() });

interface Crossing {
  alert: BalanceAlertRow;
  balances: AlertBalances;
  origin: AlertOrigin;
}

/** The balance alerts of one book's entities, followed unit by unit. */
export class AlertWatch {
  /** Each ordinary entity of the book that has alerts, with its alerts as the last unit left them. */
  private readonly watched: Array<{ row: BookEntity; alerts: readonly BalanceAlertRow[] }> = [];
  private readonly crossings: Crossing[] = [];

  constructor(private readonly book: Book) {
    for (const row of book.rows()) {
      if (!row.is_external && row.alerts && row.alerts.length > 0) this.watched.push({ row, alerts: row.alerts });
    }
  }

  /**
   * Notes the crossings of the unit just applied: each alert whose condition on the balances the
   * unit left differs from where the alert stood. A refused unit changed no balance, so it crosses
   * nothing; a unit that crosses and crosses back counts once each way.
   */
  unitDone(origin: AlertOrigin): void {
    for (const entity of this.watched) {
      const state = this.book.entity(entity.row.id)!;
      const balances = balancesOf(state);
      let alerts: BalanceAlertRow[] | undefined;
      entity.alerts.forEach((alert, i) => {
        const holds = conditionHolds(alert, balances);
        if (holds === alert.triggered) return;
        const crossed = Object.assign({}, alert, { triggered: holds });
        this.crossings.push({ alert: crossed, balances, origin });
        alerts ??= [...entity.alerts];
        alerts[i] = crossed;
      });
      if (alerts) entity.alerts = alerts;
    }
  }

  /** The events of every crossing, in order, and the alerts as the batch leaves them. */
  writes(at: Date): AlertWrites {
    if (this.crossings.length === 0) return NOTHING_CROSSED;
    const writes: AlertWrites = {
      events: this.crossings.map((c) => encodeBalanceAlertEvent(c.alert, c.balances, c.origin, at)),
      changes: [],
      alertsOf: new Map(),
    };
    for (const entity of this.watched) {
      const stored = new Map((entity.row.alerts ?? []).map((a) => [a.id, a.triggered]));
      for (const alert of entity.alerts) {
        if (stored.get(alert.id) !== alert.triggered)
          writes.changes.push({ id: alert.id, account_id: alert.account_id, triggered: alert.triggered });
      }
      writes.alertsOf.set(entity.row.id, entity.alerts);
    }
    return writes;
  }
}

function balancesOf(state: EntityState): AlertBalances {
  const balances = { posted: state.posted, pending_debits: state.pendingDebits, held: state.held };
  return {
    posted: state.posted,
    pendingDebits: state.pendingDebits,
    pendingCredits: state.pendingCredits,
    held: state.held,
    available: availableOf(balances),
  };
}
