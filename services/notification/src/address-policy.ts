import { lookup } from "node:dns/promises";
import { BlockList, isIP } from "node:net";

// Where deliveries must never go unless WEBHOOK_ALLOW_PRIVATE_NETWORKS=true (DESIGN.md section 6):
// a destination URL is chosen by the client, so without this list it could make the service
// reach its own loopback, the cluster network or a cloud metadata endpoint.
const blocked = new BlockList();
for (const [net, prefix] of [
  ["0.0.0.0", 8], // "this" network
  ["10.0.0.0", 8],
  ["100.64.0.0", 10], // carrier-grade NAT
  ["127.0.0.0", 8],
  ["169.254.0.0", 16], // link-local, including 169.254.169.254 (metadata)
  ["172.16.0.0", 12],
  ["192.0.0.0", 24],
  ["192.168.0.0", 16],
  ["198.18.0.0", 15], // benchmarking
  ["224.0.0.0", 4], // multicast
  ["240.0.0.0", 4], // reserved and broadcast
] as const) {
  blocked.addSubnet(net, prefix, "ipv4");
}
for (const [net, prefix] of [
  ["::", 128], // unspecified
  ["::1", 128], // loopback
  ["64:ff9b::", 96], // NAT64 can reach any IPv4, private ones included
  ["fc00::", 7], // unique local, including fd00:ec2::254 (metadata)
  ["fe80::", 10], // link-local
  ["ff00::", 8], // multicast
] as const) {
  blocked.addSubnet(net, prefix, "ipv6");
}

/** Whether an IP address is one deliveries must not reach. */
export function isBlockedAddress(address: string): boolean {
  const family = isIP(address);
  if (family === 4) return blocked.check(address, "ipv4");
  if (family === 6) {
    // An IPv4-mapped address (::ffff:10.0.0.1) is the IPv4 address in disguise.
    const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
    if (mapped) return blocked.check(mapped[1]!, "ipv4");
    if (/^::ffff:/i.test(address)) return true;
    return blocked.check(address, "ipv6");
  }
  return true;
}

/** An address to connect to, checked. */
export interface ResolvedTarget {
  address: string;
  family: 4 | 6;
}

/** Raised when every address of a host is blocked; the attempt records `blocked_address`. */
export class BlockedAddressError extends Error {
  readonly code = "blocked_address";
}

/** Raised when the host does not resolve; the attempt records `dns`. */
export class DnsError extends Error {
  readonly code = "dns";
}

/**
 * Resolves `hostname` now, at delivery time, and picks an address the policy allows. The caller
 * connects to exactly this address, so a DNS answer that changes between check and connect
 * (DNS rebinding) cannot redirect the request.
 */
export async function resolveTarget(hostname: string, allowPrivate: boolean): Promise<ResolvedTarget> {
  const host = hostname.replace(/^\[|\]$/g, "");
  const literal = isIP(host);
  let candidates: ResolvedTarget[];
  if (literal) {
    candidates = [{ address: host, family: literal as 4 | 6 }];
  } else {
    try {
      candidates = (await lookup(host, { all: true, verbatim: true })).map((a) => ({ address: a.address, family: a.family as 4 | 6 }));
    } catch (err) {
      throw new DnsError(`cannot resolve ${host}: ${(err as { code?: string }).code ?? "error"}`);
    }
  }
  const allowed = allowPrivate ? candidates : candidates.filter((c) => !isBlockedAddress(c.address));
  if (allowed.length === 0) {
    if (candidates.length === 0) throw new DnsError(`${host} has no address`);
    throw new BlockedAddressError(`${host} resolves only to addresses deliveries may not reach`);
  }
  return allowed[0]!;
}
