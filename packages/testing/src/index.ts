// Generic test helpers that depend on no service: webhook and OTLP receivers, a NATS server of a
// test's own, free ports, one HTTP/2 request, a plain HTTP/2 server and a Postgres proxy that loses an answer. The whole system (stacks, the REST client, invariants) is @ledger/e2e.
export { startWebhookReceiver, testCertificate, type ReceivedWebhook, type Reply, type WebhookReceiver } from "./webhook-receiver.js";
export { freePort, NATS_SERVER_BIN, ownNats, ownNatsCluster, type OwnNats, type OwnNatsCluster } from "./own-nats.js";
export { startOtlpReceiver, type OtlpReceiver, type ReceivedSpan } from "./otlp-receiver.js";
export { http2Request, type Http2Answer } from "./http2-request.js";
export { startHttp2Server, type Http2TestServer } from "./http2-server.js";
export { answerLosingProxy, type AnswerLosingProxy } from "./answer-losing-proxy.js";
export { partitionByHash } from "./partition-by-hash.js";
