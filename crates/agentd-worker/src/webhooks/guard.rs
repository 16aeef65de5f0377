//! The SSRF guard: a webhook URL must not reach the service's own network. Refused by default
//! (`webhooks.allow_private_networks = false`): loopback, link-local (169.254.0.0/16 with the
//! cloud metadata address, fe80::/10), private (RFC 1918, RFC 6598's 100.64.0.0/10, fc00::/7),
//! unspecified (0.0.0.0/8, ::), multicast and broadcast addresses, reserved ones (192.0.0.0/24,
//! 198.18.0.0/15, 240.0.0.0/4, site-local fec0::/10), and IPv4 addresses written as IPv6 —
//! IPv4-mapped, IPv4-compatible, SIIT's IPv4-translated (`::ffff:0:0/96`), NAT64
//! (`64:ff9b::/96`, `64:ff9b:1::/48`) and 6to4 (`2002::/16`), each classified as the IPv4
//! address it reaches — and Teredo (`2001::/32`), a tunnel whose relay reaches an IPv4
//! address the guard cannot check, refused as a whole. Checked twice:
//! when a subscription is made (IP literals, `localhost` names, and what the name resolves to
//! then) and at every delivery, on the addresses the connection will actually use (a resolver
//! installed in the delivery client, so a name that changes its answer later — DNS rebinding —
//! is caught). Only `http`/`https` URLs are accepted at all (`validate_url`).

use crate::config::Invalid;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

/// How long registration waits for DNS; unresolved names are accepted (delivery re-checks).
const REGISTRATION_DNS_TIMEOUT: Duration = Duration::from_secs(2);

/// The class of an address webhooks may not reach, or `None` for a public one.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => v4_class(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped().or_else(|| embedded_v4(v6)) {
                return v4_class(v4);
            }
            let first = v6.segments()[0];
            if v6.is_loopback() {
                Some("loopback")
            } else if v6.is_unspecified() {
                Some("unspecified")
            } else if v6.is_multicast() {
                Some("multicast")
            } else if first & 0xffc0 == 0xfe80 {
                Some("link-local")
            } else if first & 0xfe00 == 0xfc00 || first & 0xffc0 == 0xfec0 {
                // Unique local (fc00::/7) and the deprecated site-local fec0::/10.
                Some("private")
            } else if first == 0x2001 && v6.segments()[1] == 0 {
                // Teredo (2001::/32, RFC 4380): a relay tunnels it to the IPv4 client address
                // in the last 32 bits (inverted), on the deployment's network if it runs one
                // (review D12).
                Some("teredo")
            } else {
                None
            }
        }
    }
}

/// The IPv4 address carried inside an IPv6 one that a gateway or tunnel turns back into IPv4:
/// NAT64 (`64:ff9b::/96`, RFC 6052; the local-use `64:ff9b:1::/48`, RFC 8215), SIIT's
/// IPv4-translated `::ffff:0:a.b.c.d` (`::ffff:0:0/96`, RFC 7915; review D12), 6to4
/// (`2002::/16`, the address in segments 1–2) and the deprecated IPv4-compatible `::a.b.c.d`
/// (`::/96`, except `::` and `::1`, which are classified as themselves). Each is classified as
/// the IPv4 address it reaches: `64:ff9b::7f00:1` is loopback.
fn embedded_v4(v6: std::net::Ipv6Addr) -> Option<Ipv4Addr> {
    let s = v6.segments();
    let o = v6.octets();
    let tail = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    if s.starts_with(&[0x64, 0xff9b, 0, 0, 0, 0])
        || s.starts_with(&[0x64, 0xff9b, 1])
        || s.starts_with(&[0, 0, 0, 0, 0xffff, 0])
    {
        Some(tail)
    } else if s[0] == 0x2002 {
        Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]))
    } else if s.starts_with(&[0; 6]) && !v6.is_loopback() && !v6.is_unspecified() {
        Some(tail)
    } else {
        None
    }
}

fn v4_class(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.is_loopback() {
        Some("loopback")
    } else if ip.is_link_local() {
        Some("link-local")
    } else if ip.is_private() || (ip.octets()[0] == 100 && ip.octets()[1] & 0xc0 == 64) {
        // RFC 1918, and RFC 6598 shared space (100.64.0.0/10: carrier NAT, some clouds'
        // internal networks and metadata, e.g. 100.100.100.200).
        Some("private")
    } else if ip.octets()[0] == 0 {
        Some("unspecified")
    } else if ip.octets().starts_with(&[192, 0, 0])
        || (ip.octets()[0] == 198 && ip.octets()[1] & 0xfe == 18)
    {
        // IETF protocol assignments (192.0.0.0/24) and the benchmarking range 198.18.0.0/15,
        // which networks use internally.
        Some("reserved")
    } else if ip.octets()[0] >= 240 && !ip.is_broadcast() {
        Some("reserved")
    } else if ip.is_multicast() {
        Some("multicast")
    } else if ip.is_broadcast() {
        Some("broadcast")
    } else {
        None
    }
}

/// Why a URL or a resolved address was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "url {what} a {class} address ({addr}), which webhooks may not reach; an operator can allow it with webhooks.allow_private_networks = true"
)]
pub struct Blocked {
    /// "is" (an IP literal) or "resolves to".
    pub what: &'static str,
    pub class: &'static str,
    pub addr: String,
}

fn check_addrs(what: &'static str, addrs: &[IpAddr]) -> Result<(), Blocked> {
    for ip in addrs {
        if let Some(class) = forbidden(*ip) {
            return Err(Blocked {
                what,
                class,
                addr: ip.to_string(),
            });
        }
    }
    Ok(())
}

/// The host of `url` as an address, when it is an IP literal (`[::1]` without brackets).
fn literal_ip(url: &reqwest::Url) -> Option<IpAddr> {
    let h = url.host_str()?;
    h.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

/// The delivery's own check: an IP literal host (the resolver never sees those).
pub fn check_ip_literal(url: &reqwest::Url) -> Result<(), Blocked> {
    match literal_ip(url) {
        Some(ip) => check_addrs("is", &[ip]),
        None => Ok(()),
    }
}

/// The check that needs no DNS: an IP literal host, or a `localhost` name.
pub fn check_literal(url: &reqwest::Url) -> Result<(), Blocked> {
    check_ip_literal(url)?;
    let d = url
        .host_str()
        .unwrap_or_default()
        .trim_end_matches('.')
        .to_ascii_lowercase();
    if d == "localhost" || d.ends_with(".localhost") {
        return Err(Blocked {
            what: "names",
            class: "loopback",
            addr: d,
        });
    }
    Ok(())
}

/// The registration check (after `validate_url`): the literal check, then what the name
/// resolves to now. A name that does not resolve within 2 s is accepted: every delivery checks
/// again. `allow_private`: the operator turned the guard off.
pub async fn check_registration(url: &str, allow_private: bool) -> Result<(), Invalid> {
    if allow_private {
        return Ok(());
    }
    let u = super::parse_url(url)?;
    let blocked = |e: Blocked| Invalid::new("url", e.to_string());
    check_literal(&u).map_err(blocked)?;
    if let (None, Some(d)) = (literal_ip(&u), u.host_str()) {
        let port = u.port_or_known_default().unwrap_or(443);
        let lookup = tokio::net::lookup_host((d, port));
        if let Ok(Ok(addrs)) = tokio::time::timeout(REGISTRATION_DNS_TIMEOUT, lookup).await {
            let ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
            check_addrs("resolves to", &ips).map_err(blocked)?;
        }
    }
    Ok(())
}

/// The delivery client's resolver: resolves like the system does, then refuses the name when
/// any of its addresses is forbidden (the connection could otherwise land on it).
#[derive(Debug, Clone, Copy)]
pub struct GuardedResolver;

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
            check_addrs("resolves to", &ips)
                .map_err(|e| Box::new(e) as Box<dyn std::error::Error + Send + Sync>)?;
            Ok(Box::new(addrs.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// The guard's error somewhere in `e`'s chain of causes.
pub fn blocked_in<'a>(e: &'a (dyn std::error::Error + 'static)) -> Option<&'a Blocked> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(b) = err.downcast_ref::<Blocked>() {
            return Some(b);
        }
        cur = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_class_of_internal_address_is_named() {
        // Each class with its addresses; `None`: public (the edges of the ranges above).
        let classes: [(Option<&str>, &[&str]); 9] = [
            (
                Some("loopback"),
                &[
                    "127.0.0.1",
                    "127.255.0.9",
                    "::1",
                    "::ffff:127.0.0.1",
                    // NAT64 (well-known and local-use prefixes), 6to4 and IPv4-compatible
                    // forms of 127.0.0.1.
                    "64:ff9b::7f00:1",
                    "64:ff9b:1::7f00:1",
                    "2002:7f00:1::1",
                    "::127.0.0.1",
                    // SIIT's IPv4-translated form (review D12).
                    "::ffff:0:7f00:1",
                    "::ffff:0:127.0.0.1",
                ],
            ),
            (
                Some("link-local"),
                &[
                    "169.254.169.254",
                    "fe80::1",
                    "64:ff9b::a9fe:a9fe",
                    "::ffff:0:a9fe:a9fe",
                ],
            ),
            (
                Some("private"),
                &[
                    "10.1.2.3",
                    "172.16.0.1",
                    "172.31.255.255",
                    "192.168.1.1",
                    "::ffff:192.168.1.1",
                    "100.64.0.1",
                    "100.100.100.200",
                    "100.127.255.255",
                    "fc00::1",
                    "fd12:3456::1",
                    "fec0::1",
                    "64:ff9b::a00:5",
                    "2002:c0a8:101::1",
                    "::10.0.0.5",
                    "::ffff:0:a00:5",
                    "::ffff:0:192.168.1.1",
                ],
            ),
            (
                Some("unspecified"),
                &["0.0.0.0", "0.1.2.3", "::", "::ffff:0:0.0.0.0"],
            ),
            (
                // Teredo, whatever the server and client it names (review D12).
                Some("teredo"),
                &[
                    "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                    "2001::1",
                    "2001:0:ffff:ffff:ffff:ffff:ffff:ffff",
                    // Client 127.0.0.1 (inverted in the last 32 bits), server 10.0.0.5.
                    "2001:0:a00:5::80ff:fffe",
                ],
            ),
            (
                Some("multicast"),
                &["224.0.0.1", "239.255.255.250", "ff02::1"],
            ),
            (Some("broadcast"), &["255.255.255.255"]),
            (
                Some("reserved"),
                &[
                    "192.0.0.1",
                    "198.18.0.1",
                    "198.19.255.255",
                    "240.0.0.1",
                    "250.1.2.3",
                ],
            ),
            (
                None,
                &[
                    "100.128.0.1",
                    "100.63.255.255",
                    "93.184.216.34",
                    "172.32.0.1",
                    "2606:4700::1111",
                    "64:ff9b::5db8:d822",
                    "2002:5db8:d822::1",
                    "::ffff:0:5db8:d822",
                    // Next to Teredo's /32: 2001:1::/32 and Google's 2001:4860::/32.
                    "2001:1::1",
                    "2001:4860:4860::8888",
                    "198.20.0.1",
                    "192.0.2.1",
                ],
            ),
        ];
        for (want, ips) in classes {
            for ip in ips {
                assert_eq!(forbidden(ip.parse().unwrap()), want, "{ip}");
            }
        }
    }

    #[test]
    fn literal_hosts_and_localhost_names_are_refused_without_dns() {
        for url in [
            "http://127.0.0.1:8080/hook",
            "http://[::1]/hook",
            "http://169.254.169.254/latest/meta-data/",
            "https://10.0.0.5/x",
            "http://[fd00::5]/x",
            "http://0.0.0.0/",
            "http://localhost:9000/hook",
            "http://LOCALHOST./hook",
            "http://api.localhost/hook",
            // Shorthand forms the URL parser normalises to 127.0.0.1.
            "http://2130706433/hook",
            "http://0x7f.1/hook",
            // Loopback through a NAT64 gateway (review N16).
            "http://[64:ff9b::7f00:1]/hook",
            // SIIT and Teredo (review D12).
            "http://[::ffff:0:7f00:1]/hook",
            "http://[2001:0:a00:5::80ff:fffe]/hook",
        ] {
            let u = reqwest::Url::parse(url).unwrap();
            let e = check_literal(&u).unwrap_err();
            assert!(
                e.to_string().contains("webhooks.allow_private_networks"),
                "{url}: {e}"
            );
        }
        for url in ["https://example.com/hook", "http://93.184.216.34/hook"] {
            assert_eq!(check_literal(&reqwest::Url::parse(url).unwrap()), Ok(()));
        }
    }
}
