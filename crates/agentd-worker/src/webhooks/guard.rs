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
//!
//! The operator adds to that (review D12, [`Policy`]): `webhooks.denied_cidrs`, networks refused
//! like the built-in classes — at registration and at every delivery, literal or resolved, IPv6
//! forms of an IPv4 address checked as it — and applied even with `allow_private_networks =
//! true` (an explicit deny narrows an explicit allow); and `webhooks.allowed_ports` (80 and 443
//! by default), the ports a URL may name while the guard is on, so the delivery status (visible
//! in `GET /v1/webhooks`) is not a port scan of the public addresses the guard lets through,
//! the service's own among them. With `allow_private_networks = true` the operator has opened
//! the host and its network to receivers on ports of their own (the tests' receivers listen
//! on random ports of 127.0.0.1), so the port list is off with the built-in classes.

use crate::config::{Cidr, Invalid, WebhooksConfig};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
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
pub enum Blocked {
    /// A built-in class of the service's own network.
    #[error(
        "url {what} a {class} address ({addr}), which webhooks may not reach; an operator can allow it with webhooks.allow_private_networks = true"
    )]
    Class {
        /// "is" (an IP literal), "resolves to" or "names".
        what: &'static str,
        class: &'static str,
        addr: String,
    },
    /// Inside a network of `webhooks.denied_cidrs`.
    #[error(
        "url {what} {addr}, inside {cidr} of webhooks.denied_cidrs, which webhooks may not reach"
    )]
    Denied {
        what: &'static str,
        addr: String,
        cidr: String,
    },
    /// A port not in `webhooks.allowed_ports`.
    #[error(
        "url port {port} is not one of webhooks.allowed_ports ({allowed}); an operator can add it there"
    )]
    Port { port: u16, allowed: String },
}

/// What the guard refuses: the built-in classes and the port list unless the operator allowed
/// private networks, and the operator's denied networks always.
#[derive(Debug, Clone)]
pub struct Policy {
    /// The built-in classes, `localhost` names and the port list apply.
    builtin: bool,
    denied: Arc<[Cidr]>,
    /// Empty: any port.
    ports: Arc<[u16]>,
}

impl Policy {
    /// The guard of `[webhooks]`.
    pub fn new(c: &WebhooksConfig) -> Self {
        Self {
            builtin: !c.allow_private_networks,
            denied: c.denied().into(),
            ports: c.allowed_ports.clone().into(),
        }
    }

    /// The built-in guard alone (any port): what [`check_literal`] checks.
    pub fn builtin() -> Self {
        Self {
            builtin: true,
            denied: Arc::from([]),
            ports: Arc::from([]),
        }
    }

    /// Nothing is refused (private networks allowed, no denied networks): names are resolved
    /// as the system does and the environment's proxy is used.
    pub fn is_off(&self) -> bool {
        !self.builtin && self.denied.is_empty()
    }

    /// `ip`'s refusal, if any: a built-in class first, then a denied network.
    fn check_ip(&self, what: &'static str, ip: IpAddr) -> Result<(), Blocked> {
        if self.builtin
            && let Some(class) = forbidden(ip)
        {
            return Err(Blocked::Class {
                what,
                class,
                addr: ip.to_string(),
            });
        }
        if self.denied.is_empty() {
            return Ok(());
        }
        // An IPv6 form of an IPv4 address (mapped, NAT64, 6to4, …) is checked as both.
        let v4 = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().or_else(|| embedded_v4(v6)),
            IpAddr::V4(_) => None,
        };
        let inside = |c: &&Cidr| c.contains(ip) || v4.is_some_and(|v4| c.contains(v4.into()));
        match self.denied.iter().find(inside) {
            Some(c) => Err(Blocked::Denied {
                what,
                addr: ip.to_string(),
                cidr: c.to_string(),
            }),
            None => Ok(()),
        }
    }

    fn check_addrs(&self, what: &'static str, addrs: &[IpAddr]) -> Result<(), Blocked> {
        addrs.iter().try_for_each(|ip| self.check_ip(what, *ip))
    }

    /// The port `url` connects to, against the port list (while the guard is on).
    pub fn check_port(&self, url: &reqwest::Url) -> Result<(), Blocked> {
        if !self.builtin || self.ports.is_empty() {
            return Ok(());
        }
        let port = url.port_or_known_default().unwrap_or(0);
        if self.ports.contains(&port) {
            return Ok(());
        }
        let allowed: Vec<String> = self.ports.iter().map(u16::to_string).collect();
        Err(Blocked::Port {
            port,
            allowed: allowed.join(", "),
        })
    }

    /// The delivery's own checks before it connects: an IP literal host (the resolver never
    /// sees those; a name is checked by [`GuardedResolver`] on what it resolves to), then the
    /// port.
    pub fn check_ip_literal(&self, url: &reqwest::Url) -> Result<(), Blocked> {
        if let Some(ip) = literal_ip(url) {
            self.check_ip("is", ip)?;
        }
        self.check_port(url)
    }

    /// The checks that need no DNS: an IP literal host, a `localhost` name, then the port.
    pub fn check_literal(&self, url: &reqwest::Url) -> Result<(), Blocked> {
        let d = url
            .host_str()
            .unwrap_or_default()
            .trim_end_matches('.')
            .to_ascii_lowercase();
        if literal_ip(url).is_none()
            && self.builtin
            && (d == "localhost" || d.ends_with(".localhost"))
        {
            return Err(Blocked::Class {
                what: "names",
                class: "loopback",
                addr: d,
            });
        }
        self.check_ip_literal(url)
    }
}

/// The host of `url` as an address, when it is an IP literal (`[::1]` without brackets).
fn literal_ip(url: &reqwest::Url) -> Option<IpAddr> {
    let h = url.host_str()?;
    h.trim_start_matches('[').trim_end_matches(']').parse().ok()
}

/// The built-in check that needs no DNS: an IP literal host, or a `localhost` name (any port).
pub fn check_literal(url: &reqwest::Url) -> Result<(), Blocked> {
    Policy::builtin().check_literal(url)
}

/// The registration check (after `validate_url`): the literal checks, then what the name
/// resolves to now. A name that does not resolve within 2 s is accepted: every delivery checks
/// again.
pub async fn check_registration(url: &str, policy: &Policy) -> Result<(), Invalid> {
    if policy.is_off() {
        return Ok(());
    }
    let u = super::parse_url(url)?;
    let blocked = |e: Blocked| Invalid::new("url", e.to_string());
    policy.check_literal(&u).map_err(blocked)?;
    if let (None, Some(d)) = (literal_ip(&u), u.host_str()) {
        let port = u.port_or_known_default().unwrap_or(443);
        let lookup = tokio::net::lookup_host((d, port));
        if let Ok(Ok(addrs)) = tokio::time::timeout(REGISTRATION_DNS_TIMEOUT, lookup).await {
            let ips: Vec<IpAddr> = addrs.map(|a| a.ip()).collect();
            policy.check_addrs("resolves to", &ips).map_err(blocked)?;
        }
    }
    Ok(())
}

/// The delivery client's resolver: resolves like the system does, then refuses the name when
/// any of its addresses is refused by the policy (the connection could otherwise land on it).
#[derive(Debug, Clone)]
pub struct GuardedResolver(pub Policy);

impl reqwest::dns::Resolve for GuardedResolver {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let host = name.as_str().to_string();
        let policy = self.0.clone();
        Box::pin(async move {
            let addrs: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let ips: Vec<IpAddr> = addrs.iter().map(SocketAddr::ip).collect();
            policy
                .check_addrs("resolves to", &ips)
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

    fn policy(allow_private: bool, denied: &[&str], ports: &[u16]) -> Policy {
        Policy::new(&WebhooksConfig {
            allow_private_networks: allow_private,
            denied_cidrs: denied.iter().map(|c| c.to_string()).collect(),
            allowed_ports: ports.to_vec(),
        })
    }

    #[test]
    fn denied_networks_are_refused_in_every_form_even_with_private_networks_allowed() {
        let denied = ["168.63.129.16", "203.0.113.0/24", "2001:db8:64::/96"];
        for allow_private in [false, true] {
            let p = policy(allow_private, &denied, &[]);
            for ip in [
                "168.63.129.16",
                "203.0.113.7",
                // IPv6 forms of a denied IPv4 address: mapped, SIIT, NAT64, 6to4.
                "::ffff:203.0.113.7",
                "::ffff:0:a83f:8110",
                "64:ff9b::cb00:7107",
                "2002:cb00:7107::1",
                "2001:db8:64::a00:1",
            ] {
                let e = p.check_ip("is", ip.parse().unwrap()).unwrap_err();
                assert!(
                    matches!(e, Blocked::Denied { .. })
                        && e.to_string().contains("webhooks.denied_cidrs"),
                    "{ip} ({allow_private}): {e}"
                );
            }
            for ip in ["168.63.129.17", "203.0.114.1", "2001:db8:65::1"] {
                assert_eq!(p.check_ip("is", ip.parse().unwrap()), Ok(()), "{ip}");
            }
            // The built-in classes: refused with the guard on, allowed with it off.
            assert_eq!(
                p.check_ip("is", "10.0.0.5".parse().unwrap()).is_err(),
                !allow_private
            );
        }
        assert!(policy(true, &[], &[]).is_off());
        assert!(!policy(true, &["10.0.0.0/8"], &[]).is_off());
    }

    #[test]
    fn the_port_list_applies_while_the_guard_is_on() {
        let url = |s: &str| reqwest::Url::parse(s).unwrap();
        let on = policy(false, &[], &[80, 443]);
        for ok in [
            "https://hooks.example.com/x",
            "http://hooks.example.com/x",
            "https://hooks.example.com:443/x",
            "http://93.184.216.34:80/x",
            // The scheme's port, not the scheme: http on 443 is port 443.
            "http://hooks.example.com:443/x",
        ] {
            assert_eq!(on.check_literal(&url(ok)), Ok(()), "{ok}");
        }
        for (bad, port) in [
            ("https://hooks.example.com:8443/x", 8443),
            ("http://93.184.216.34:22/x", 22),
            ("http://[2606:4700::1111]:6379/x", 6379),
            ("https://hooks.example.com:1/x", 1),
        ] {
            let e = on.check_ip_literal(&url(bad)).unwrap_err();
            assert_eq!(
                e,
                Blocked::Port {
                    port,
                    allowed: "80, 443".into()
                },
                "{bad}"
            );
            assert!(e.to_string().contains("webhooks.allowed_ports"), "{e}");
        }
        // Empty: any port; private networks allowed: no port list.
        let any = url("https://hooks.example.com:8443/x");
        assert_eq!(policy(false, &[], &[]).check_literal(&any), Ok(()));
        assert_eq!(policy(true, &[], &[80, 443]).check_literal(&any), Ok(()));
        // The built-in check alone takes any port.
        assert_eq!(check_literal(&any), Ok(()));
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
