//! The webhook URL guard and the receiver's signature check:
//! - no panic on any URL or signature header;
//! - the guard never accepts an address of the service's own networks, by an oracle written
//!   apart from it: loopback, private (RFC 1918, RFC 6598, fc00::/7, site-local fec0::/10),
//!   link-local, unspecified, multicast, broadcast — also when the IPv4 address is written as
//!   IPv6 (IPv4-mapped, IPv4-compatible, NAT64 `64:ff9b::/96` and `64:ff9b:1::/48`, 6to4
//!   `2002::/16`) or in the shorthand IPv4 forms the URL parser normalises (`0x7f.1`,
//!   `2130706433`);
//! - a signature made by `sign` verifies, and one over another body does not.
#![no_main]

use agentd::webhooks::guard::{check_literal, forbidden};
use agentd::webhooks::{signature_header, validate_url, verify};
use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

fn v4_internal(ip: Ipv4Addr) -> bool {
    let o = ip.octets();
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || o[0] == 0
        || (o[0] == 100 && (64..128).contains(&o[1]))
}

/// `FUZZ_GUARD_MAPPED_ONLY=1`: the oracle knows only IPv4-mapped addresses and no site-local,
/// for a tree without the ranges of review N16 (each of those is a finding there).
static MAPPED_ONLY: std::sync::LazyLock<bool> =
    std::sync::LazyLock::new(|| std::env::var_os("FUZZ_GUARD_MAPPED_ONLY").is_some());

/// The IPv4 address an IPv6 one reaches through mapping, compatibility, NAT64 or 6to4.
fn v4_inside(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let o = ip.octets();
    let tail = Ipv4Addr::new(o[12], o[13], o[14], o[15]);
    if s[..5] == [0; 5] && s[5] == 0xffff {
        Some(tail)
    } else if *MAPPED_ONLY {
        None
    } else if s[..5] == [0; 5] && s[5] == 0 && u32::from(tail) > 1 {
        Some(tail)
    } else if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] || s[..3] == [0x64, 0xff9b, 1] {
        Some(tail)
    } else if s[0] == 0x2002 {
        Some(Ipv4Addr::new(o[2], o[3], o[4], o[5]))
    } else {
        None
    }
}

fn internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4_internal(v4),
        IpAddr::V6(v6) => {
            let s0 = v6.segments()[0];
            v6.is_loopback()
                || v6.is_unspecified()
                || v6.is_multicast()
                || s0 & 0xffc0 == 0xfe80
                || s0 & 0xfe00 == 0xfc00
                || (s0 & 0xffc0 == 0xfec0 && !*MAPPED_ONLY)
                || v4_inside(v6).is_some_and(v4_internal)
        }
    }
}

#[derive(Debug, Arbitrary)]
enum Written {
    V4([u8; 4]),
    V6([u8; 16]),
    /// An IPv4 address as one number, in decimal or hex.
    V4Number(u32, bool),
    /// `a.b` / `a.b.c` shorthand with hex or octal parts.
    V4Short([u8; 4], u8),
}

fn url_of(w: &Written) -> (String, IpAddr) {
    match *w {
        Written::V4(o) => (
            format!("http://{}/hook", Ipv4Addr::from(o)),
            Ipv4Addr::from(o).into(),
        ),
        Written::V6(o) => {
            let ip = Ipv6Addr::from(o);
            (format!("https://[{ip}]:8443/hook"), ip.into())
        }
        Written::V4Number(n, hex) => {
            let host = if hex {
                format!("0x{n:x}")
            } else {
                n.to_string()
            };
            (format!("http://{host}/hook"), Ipv4Addr::from(n).into())
        }
        Written::V4Short(o, style) => {
            let rest = u32::from(o[1]) << 16 | u32::from(o[2]) << 8 | u32::from(o[3]);
            let host = match style % 3 {
                0 => format!("{}.{}", o[0], rest),
                1 => format!("0x{:x}.0x{:x}", o[0], rest),
                _ => format!(
                    "0{:o}.{}.{}",
                    o[0],
                    o[1],
                    u32::from(o[2]) << 8 | u32::from(o[3])
                ),
            };
            (format!("http://{host}/hook"), Ipv4Addr::from(o).into())
        }
    }
}

#[derive(Debug, Arbitrary)]
struct Signed {
    secret: String,
    t: i64,
    now: i64,
    body: Vec<u8>,
    other: Vec<u8>,
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut u = Unstructured::new(rest);
    match mode % 4 {
        0 => {
            // Any text as a URL.
            let text = String::from_utf8_lossy(rest);
            if validate_url(&text).is_ok() {
                let url = reqwest::Url::parse(&text).expect("validated");
                let host = url.host_str().unwrap_or_default();
                let ip = host
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>();
                if let Ok(ip) = ip
                    && internal(ip)
                {
                    assert!(check_literal(&url).is_err(), "{text} ({ip}) accepted");
                }
            }
        }
        1 => {
            let Ok(w) = Written::arbitrary(&mut u) else {
                return;
            };
            let (text, ip) = url_of(&w);
            let url = reqwest::Url::parse(&text).expect("a URL we wrote");
            if internal(ip) {
                assert!(forbidden(ip).is_some(), "{ip} is not forbidden");
                assert!(check_literal(&url).is_err(), "{text} ({ip}) accepted");
            }
        }
        2 => {
            // Any signature header.
            let header = String::from_utf8_lossy(rest);
            let _ = verify("secret", &header, b"{}", 1_700_000_000);
            let _ = verify("secret", &header, b"{}", i64::MIN);
            let _ = verify("secret", &header, b"{}", i64::MAX);
        }
        _ => {
            let Ok(s) = Signed::arbitrary(&mut u) else {
                return;
            };
            let header = signature_header(&s.secret, s.t, &s.body);
            let in_window = s
                .now
                .checked_sub(s.t)
                .is_some_and(|d| d.unsigned_abs() <= 300);
            assert_eq!(
                verify(&s.secret, &header, &s.body, s.now).is_ok(),
                in_window,
                "{header} at {}",
                s.now
            );
            if s.other != s.body {
                assert!(verify(&s.secret, &header, &s.other, s.now).is_err());
            }
        }
    }
});
