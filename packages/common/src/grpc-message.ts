// gRPC's status message (`grpc-message`) on the wire as the gRPC over HTTP/2 protocol defines it:
// UTF-8, then percent-encoded, where only bytes outside 0x20-0x7E, and `%` itself, are encoded.
//
// Connect's gRPC handler (connect-node) writes it with encodeURIComponent, which also encodes
// `:`, `/`, `,`, spaces and more. Connect's own clients decode it with decodeURIComponent and see
// the message, but grpc-js decodes it with decodeURI, which leaves reserved characters such as
// `%3A` (`:`) and `%2F` (`/`) encoded: its callers read "header%3A send". So the port re-encodes
// the value Connect wrote, on the HTTP/2 stream of each gRPC call, before it is sent; no
// interceptor can, as Connect encodes after them (docs/dependencies.md).
import type * as http2 from "node:http2";

const GRPC_MESSAGE = "grpc-message";

/** `message` percent-encoded as gRPC's spec says: printable ASCII other than `%` as it is. */
export function encodeGrpcMessage(message: string): string {
  let out = "";
  for (const byte of Buffer.from(message, "utf8")) {
    out +=
      byte >= 0x20 && byte <= 0x7e && byte !== 0x25 ? String.fromCharCode(byte) : `%${byte.toString(16).toUpperCase().padStart(2, "0")}`;
  }
  return out;
}

/** A header value Connect encoded with encodeURIComponent, encoded as gRPC's spec says instead. */
export function respecGrpcMessage(connectEncoded: string): string {
  try {
    return encodeGrpcMessage(decodeURIComponent(connectEncoded));
  } catch {
    // Not Connect's encoding after all (a malformed escape): sent as it was written.
    return connectEncoded;
  }
}

/** Whether a request is gRPC proper (not gRPC-Web, whose status travels in the body). */
export function isGrpcRequest(headers: http2.IncomingHttpHeaders): boolean {
  const type = headers["content-type"];
  return type !== undefined && /^application\/grpc(?:[+;]|$)/.test(type);
}

function respecHeaders<T extends http2.OutgoingHttpHeaders | undefined>(headers: T): T {
  if (!headers) return headers;
  const name = Object.keys(headers).find((key) => key.toLowerCase() === GRPC_MESSAGE);
  const value = name === undefined ? undefined : headers[name];
  if (typeof value !== "string") return headers;
  return Object.assign({}, headers, { [name!]: respecGrpcMessage(value) });
}

/**
 * Has `stream`, a gRPC call's, send its `grpc-message` encoded as gRPC's spec says, whether it
 * goes in the trailers (after a body) or in the headers (a trailers-only answer). Node's
 * compatibility response sends both through these two methods of the stream.
 */
export function specGrpcMessageOn(stream: http2.ServerHttp2Stream): void {
  const respond = stream.respond.bind(stream);
  stream.respond = (headers, options) => respond(respecHeaders(headers), options);
  const sendTrailers = stream.sendTrailers.bind(stream);
  stream.sendTrailers = (trailers) => sendTrailers(respecHeaders(trailers));
}
