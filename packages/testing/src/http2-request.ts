import * as http2 from "node:http2";

/** What one HTTP/2 request was answered: status 0 when its stream ended before any headers. */
export interface Http2Answer {
  status: number;
  headers: http2.IncomingHttpHeaders;
  body: Buffer;
}

/**
 * Sends one request on a cleartext HTTP/2 connection of its own and resolves when its stream
 * closes, with whatever arrived; a stream reset or error still resolves. Rejects only when the
 * connection itself fails.
 */
export function http2Request(url: string, headers: http2.OutgoingHttpHeaders, body?: Uint8Array): Promise<Http2Answer> {
  return new Promise((resolve, reject) => {
    const session = http2.connect(url);
    session.on("error", reject);
    const req = session.request(headers);
    let status = 0;
    let answered: http2.IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on("response", (h) => {
      status = Number(h[":status"]);
      answered = h;
    });
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("error", () => {});
    req.on("close", () => {
      session.close();
      resolve({ status, headers: answered, body: Buffer.concat(chunks) });
    });
    req.end(body);
  });
}
