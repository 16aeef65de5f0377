//! An IP network written `address/prefix` (`10.0.0.0/8`, `fd00::/8`; a bare address is one
//! host), for `webhooks.denied_cidrs` (review D12). Parsed strictly: a network with host bits set
//! (`10.0.0.1/8`) is refused with the network it probably meant, so a typo does not silently
//! deny a different range.

use std::net::IpAddr;

/// One network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    net: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `a.b.c.d/n`, `x:y::/n` or a bare address; the message says what is wrong.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let s = s.trim();
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not an IP network (a.b.c.d/n or x:y::/n)"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(n) if n <= max => n,
                _ => return Err(format!("{s:?}: the prefix length must be 0–{max}")),
            },
        };
        let c = Cidr { net, prefix };
        let masked = c.masked(net);
        if masked != net {
            return Err(format!(
                "{s:?} has host bits set; the network is {}/{prefix}",
                masked
            ));
        }
        Ok(c)
    }

    /// `ip` with the bits past the prefix cleared (an address of the other family: itself).
    fn masked(&self, ip: IpAddr) -> IpAddr {
        match ip {
            IpAddr::V4(v4) => {
                let bits = u32::from(v4);
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V4((bits & mask).into())
            }
            IpAddr::V6(v6) => {
                let bits = u128::from(v6);
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                IpAddr::V6((bits & mask).into())
            }
        }
    }

    /// Whether `ip` is inside (of the same family: an IPv4 network holds no IPv6 address; the
    /// webhook guard classifies IPv6 forms of IPv4 addresses as the IPv4 address first).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.net.is_ipv4() && self.masked(ip) == self.net
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.net, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn networks_parse_strictly_and_hold_their_addresses_only() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let n = Cidr::parse("10.0.0.0/8").unwrap();
        assert!(n.contains(ip("10.255.1.2")) && !n.contains(ip("11.0.0.1")));
        assert!(!n.contains(ip("::ffff:10.0.0.1")), "families apart");
        let host = Cidr::parse("168.63.129.16").unwrap();
        assert_eq!(host.to_string(), "168.63.129.16/32");
        assert!(host.contains(ip("168.63.129.16")) && !host.contains(ip("168.63.129.17")));
        let all = Cidr::parse("0.0.0.0/0").unwrap();
        assert!(all.contains(ip("93.184.216.34")));
        let v6 = Cidr::parse("fd00:ec2::/32").unwrap();
        assert!(v6.contains(ip("fd00:ec2::254")) && !v6.contains(ip("fd00:ec3::1")));
        assert!(Cidr::parse("::/0").unwrap().contains(ip("2606:4700::1111")));
        for (bad, says) in [
            ("10.0.0.1/8", "the network is 10.0.0.0/8"),
            ("10.0.0.0/33", "0–32"),
            ("fd00::/129", "0–128"),
            ("10.0.0.0/-1", "0–32"),
            ("10.0.0.0/", "0–32"),
            ("example.com/24", "not an IP network"),
            ("", "not an IP network"),
        ] {
            let e = Cidr::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }
}
