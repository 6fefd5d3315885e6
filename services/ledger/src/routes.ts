import type { ConnectRouter } from "@connectrpc/connect";
import type { Authenticator } from "@ledger/common";
import { IdentityService } from "@ledger/proto/ledger/v1/identity_pb.js";
import { LedgerService } from "@ledger/proto/ledger/v1/ledger_pb.js";
import { ReservationService } from "@ledger/proto/ledger/v1/reservation_pb.js";
import { createIdentityService } from "./identity-rpc.js";
import type { LedgerDeps } from "./handler-kit.js";
import { createLedgerService } from "./ledger-rpc.js";
import { createReservationService } from "./reservation-rpc.js";

/** The ledger's RPC routes: the ledger, the reservations under holds, and the identity look-up. */
export default (deps: LedgerDeps & { authenticate: Authenticator }) => (router: ConnectRouter) => {
  router.service(LedgerService, createLedgerService(deps));
  router.service(ReservationService, createReservationService(deps));
  router.service(IdentityService, createIdentityService(deps.authenticate));
};

/** Methods callable without an API key header: they check a key given in the request itself. */
export const PUBLIC_METHODS = [`${IdentityService.typeName}/Authenticate`];

/** Methods only the installation's services may call: holds are the hold service's to keep in step with `held`. */
export const INTERNAL_METHODS = ReservationService.methods.map((method) => `${ReservationService.typeName}/${method.name}`);
