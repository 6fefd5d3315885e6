// Whether a server answers, for `pnpm start` deciding what it must bring itself (PGlite, nats-server).
import { connect } from "node:net";

/** How long a probe waits for a connection: a server on this machine or the LAN answers far sooner. */
export const PROBE_TIMEOUT_MS = 1_000;

/** A probe's answer: reachable, or why not ("ECONNREFUSED", "no answer within 1000 ms", ...). */
export type Probe = { reachable: true } | { reachable: false; reason: string };

/**
 * Tries one TCP connection to host:port. A refused or unroutable address answers at once; one whose
 * packets are dropped is given up after `timeoutMs`, so a start never waits on the kernel's own
 * connect timeout (about two minutes) to decide it must bring its own server.
 */
export function probe(host: string, port: number, timeoutMs = PROBE_TIMEOUT_MS): Promise<Probe> {
  return new Promise((done) => {
    const socket = connect(port, host);
    socket.setTimeout(timeoutMs);
    socket.once("connect", () => {
      socket.destroy();
      done({ reachable: true });
    });
    socket.once("error", (err: NodeJS.ErrnoException) => done({ reachable: false, reason: err.code ?? err.message }));
    socket.once("timeout", () => {
      socket.destroy();
      done({ reachable: false, reason: `no answer within ${timeoutMs} ms` });
    });
  });
}

/** Whether something accepts TCP connections at host:port within a second. */
export async function reachable(host: string, port: number): Promise<boolean> {
  return (await probe(host, port)).reachable;
}
