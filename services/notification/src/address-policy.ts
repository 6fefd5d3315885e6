import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import ipaddr from "ipaddr.js";

// Where deliveries may go unless WEBHOOK_ALLOW_PRIVATE_NETWORKS=true: a destination URL is chosen
// by the client, so without this check it could make the service reach its own loopback, the
// cluster network or a cloud metadata endpoint. The ranges come from ipaddr.js, which follows the
// IANA special-purpose registries; only what it calls `unicast` (ordinary public addresses) passes.
//
// Addresses that embed an IPv4 address:
// - IPv4-mapped (::ffff:a.b.c.d) is how a dual-stack socket spells an IPv4 peer: it is judged as
//   that IPv4 address, so ::ffff:8.8.8.8 passes and ::ffff:127.0.0.1 does not.
// - IPv4-compatible (::a.b.c.d, deprecated since RFC 4291), IPv4-translated (::ffff:0:a.b.c.d),
//   6to4 (2002::/16), NAT64 (64:ff9b::/96, 64:ff9b:1::/48) and Teredo (2001::/32) are refused
//   whatever they embed. Each is a way through a relay or translator to an IPv4 address, private
//   ones included, and no webhook receiver needs one: refusing them is simpler and safer than
//   decoding every embedding correctly.

// ipaddr.js calls ::/96 `unicast`; its IPv4-compatible addresses are refused here (see above).
const IPV4_COMPATIBLE = ipaddr.parseCIDR("::/96");

/**
 * The address as the WHATWG URL parser spells it, which is how a destination URL's host is stored:
 * IPv4 in dotted decimal whatever spelling it came in (2130706433, 0x7f.1, 017700000001), IPv6 in
 * hex without a dotted tail (ipaddr.js would read ::127.0.0.1 as ::ffff:127.0.0.1). Undefined
 * when it is not an IP address.
 */
function canonicalAddress(text: string): string | undefined {
  // Only the characters of an address: the URL parser would read `a@10.0.0.1` or `1.2.3.4/x` as hosts.
  if (!/^[0-9a-fx.:]+$/i.test(text)) return undefined;
  let host: string;
  try {
    host = new URL(`https://${isIP(text) === 6 ? `[${text}]` : text}/`).hostname.replace(/^\[|\]$/g, "");
  } catch {
    return undefined;
  }
  return isIP(host) ? host : undefined;
}

function isPublicUnicast(address: ipaddr.IPv4 | ipaddr.IPv6): boolean {
  if (address.kind() === "ipv6") {
    const v6 = address as ipaddr.IPv6;
    if (v6.isIPv4MappedAddress()) return isPublicUnicast(v6.toIPv4Address());
    if (v6.match(IPV4_COMPATIBLE)) return false;
  }
  return address.range() === "unicast";
}

/** Whether deliveries must not reach `address`; anything that is not an IP address is refused. */
export function isBlockedAddress(address: string): boolean {
  const canonical = canonicalAddress(address);
  return canonical === undefined || !isPublicUnicast(ipaddr.parse(canonical));
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
  const literal = canonicalAddress(host);
  let candidates: ResolvedTarget[];
  if (literal) {
    candidates = [{ address: literal, family: isIP(literal) as 4 | 6 }];
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
