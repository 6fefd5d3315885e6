import type { ConnectRouter } from "@connectrpc/connect";
import { NotificationService } from "@ledger/proto/notification/v1/notification_pb.js";
import { createNotificationService, type NotificationDeps } from "./notification-rpc.js";

/** The notification service's RPC routes; every method needs an API key. */
export default (deps: NotificationDeps) => (router: ConnectRouter) => {
  router.service(NotificationService, createNotificationService(deps));
};
