//! The client IP: who is on the other end, as far as can be trusted.
//!
//! 1. The **peer address** is the TCP peer, read from the request extensions: first
//!    [`PeerAddr`] (set it yourself, e.g. in a hyper accept loop), then, with the default `axum`
//!    feature, axum's `ConnectInfo<SocketAddr>` (present when the app is served with
//!    `into_make_service_with_connect_info::<SocketAddr>()`). Without either the client IP is
//!    unknown and rules keyed on it skip the request (counted as `outcome="skipped"`).
//! 2. Forwarding headers are read **only when the peer is inside a trusted proxy CIDR**, and only
//!    the one header [`ClientIpConfig::header`] names (reading both `X-Forwarded-For` and
//!    `Forwarded` would let a client spoof whichever one the proxy does not rewrite). The list is
//!    walked from the right (the entry the nearest proxy added) past every trusted hop, and the
//!    walk stops at the first entry that is not a trusted address: that entry is the client.
//!    What stands to its left was written by the client and never matters. If every entry is
//!    trusted the leftmost one is the client; at most [`ClientIpConfig::max_entries`] entries
//!    are examined: when more follow, all trusted so far, the client is
//!    [`Client::TOO_MANY_HOPS`] (`ip=?too-many-hops`, one key for all such requests).
//! 3. An entry at the client's position that is no address (junk, `unknown`, an obfuscated
//!    identifier, an empty element) is still the client: [`Client::Unparsed`], counted under a
//!    key of its own (`ip=?junk`), never as the proxy that sent it. Never an error.
//! 4. IPv4-mapped IPv6 (`::ffff:192.0.2.1`) is treated as IPv4; IPv6 addresses are grouped by
//!    [`ClientIpConfig::ipv6_prefix`] (default /64, what one subscriber usually holds).

use std::fmt::Write;
use std::net::{IpAddr, SocketAddr};

use http::HeaderMap;
use ipnet::{IpNet, Ipv4Net, Ipv6Net};

/// The TCP peer of a request, as a request extension. Takes precedence over axum's
/// `ConnectInfo<SocketAddr>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// Which forwarding header a trusted proxy sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For: client, proxy1, proxy2` (all field lines, in order).
    #[default]
    XForwardedFor,
    /// RFC 7239 `Forwarded: for=client;proto=https, for="[2001:db8::1]:4711"`.
    Forwarded,
}

/// How the client IP is found and grouped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientIpConfig {
    /// Proxies whose forwarding header is believed. Empty (the default): headers are ignored
    /// and the peer address is the client.
    pub trusted_proxies: Vec<IpNet>,
    /// The header the trusted proxies set. Default `X-Forwarded-For`.
    pub header: ForwardedHeader,
    /// IPv6 clients are counted per prefix of this length (0..=128). Default 64.
    pub ipv6_prefix: u8,
    /// IPv4 clients are counted per prefix of this length (0..=32). Default 32.
    pub ipv4_prefix: u8,
    /// At most this many header entries are examined, from the right; when all of them are
    /// trusted and more follow, the client is [`Client::TOO_MANY_HOPS`] (a key of its own,
    /// never the proxy's). Default 32.
    pub max_entries: usize,
}

impl Default for ClientIpConfig {
    fn default() -> Self {
        Self {
            trusted_proxies: Vec::new(),
            header: ForwardedHeader::XForwardedFor,
            ipv6_prefix: 64,
            ipv4_prefix: 32,
            max_entries: 32,
        }
    }
}

impl ClientIpConfig {
    /// Whether `ip` is inside a trusted proxy CIDR.
    pub fn is_trusted(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.trusted_proxies.iter().any(|net| net.contains(&ip))
    }

    /// The client of a request from `peer` with `headers` (not grouped): the peer when it is
    /// not a trusted proxy or sent no forwarding header, else the entry the walk stops at.
    pub fn client(&self, peer: IpAddr, headers: &HeaderMap) -> Client {
        let peer = canonical(peer);
        if !self.is_trusted(peer) {
            return Client::Addr(peer);
        }
        self.forwarded_client(headers).unwrap_or(Client::Addr(peer))
    }

    /// `ip` (canonicalised) masked to the configured prefix.
    pub fn group(&self, ip: IpAddr) -> IpNet {
        group(ip, self.ipv4_prefix, self.ipv6_prefix)
    }

    /// Walks the forwarding header from the right past trusted hops and stops at the first
    /// entry that is not a trusted address. `None` when the header is absent.
    fn forwarded_client(&self, headers: &HeaderMap) -> Option<Client> {
        let name = match self.header {
            ForwardedHeader::XForwardedFor => "x-forwarded-for",
            ForwardedHeader::Forwarded => "forwarded",
        };
        let mut client = None;
        let mut examined = 0;
        // Field lines from the last one, each line's elements from the right: the order in
        // which the proxies appended them, nearest first. Nothing is collected.
        for line in headers.get_all(name).iter().rev() {
            // Split as bytes: a proxy such as nginx appends its entry to the client's own line
            // (`$proxy_add_x_forwarded_for`), so bytes that are no text in the client's part
            // must not hide the address the proxy wrote.
            for element in line.as_bytes().rsplit(|b| *b == b',') {
                if examined == self.max_entries {
                    // More entries than may be examined, all trusted so far: the client
                    // stands beyond reach. A key of its own, never the last proxy's.
                    return client.map(|_| Client::Unparsed(Client::TOO_MANY_HOPS.to_owned()));
                }
                examined += 1;
                let Ok(element) = std::str::from_utf8(element) else {
                    return Some(Client::unparsed(&String::from_utf8_lossy(element)));
                };
                let node = match self.header {
                    ForwardedHeader::XForwardedFor => Node::of(element.trim()),
                    ForwardedHeader::Forwarded => forwarded_for(element),
                };
                match node {
                    Node::Addr(ip) => {
                        let ip = canonical(ip);
                        client = Some(Client::Addr(ip));
                        if !self.is_trusted(ip) {
                            return client;
                        }
                    }
                    Node::Unparsed(text) => return Some(Client::unparsed(text)),
                }
            }
        }
        client
    }
}

/// Who sent a request, as far as it can be trusted ([`ClientIpConfig::client`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Client {
    /// An address (IPv4-mapped IPv6 already made IPv4), not yet grouped.
    Addr(IpAddr),
    /// The entry at the client's position of a trusted proxy's forwarding header is no
    /// address (`unknown`, an obfuscated identifier, junk, an empty element): its text, at most
    /// [`Client::MAX_UNPARSED`] bytes, counted under a key of its own (`ip=?<text>`).
    Unparsed(String),
}

impl Client {
    /// The longest [`Client::Unparsed`] text kept; a longer entry is cut there.
    pub const MAX_UNPARSED: usize = 64;

    /// The [`Client::Unparsed`] text of a forwarding header with more entries than
    /// [`ClientIpConfig::max_entries`], all of those examined trusted: one key
    /// (`ip=?too-many-hops`) for every such request, never the proxy's, and not one a client
    /// can vary by writing more entries.
    pub const TOO_MANY_HOPS: &'static str = "too-many-hops";

    fn unparsed(text: &str) -> Self {
        let text = text.trim();
        let mut end = text.len().min(Self::MAX_UNPARSED);
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        Client::Unparsed(text[..end].to_owned())
    }

    /// The address, `None` for [`Client::Unparsed`].
    pub fn addr(&self) -> Option<IpAddr> {
        match self {
            Client::Addr(ip) => Some(*ip),
            Client::Unparsed(_) => None,
        }
    }

    /// The text of a [`Client::Unparsed`] client.
    pub fn unparsed_text(&self) -> Option<&str> {
        match self {
            Client::Addr(_) => None,
            Client::Unparsed(text) => Some(text),
        }
    }
}

/// One hop of a forwarding header.
enum Node<'a> {
    Addr(IpAddr),
    Unparsed(&'a str),
}

impl<'a> Node<'a> {
    fn of(text: &'a str) -> Self {
        match parse_addr(text) {
            Some(ip) => Node::Addr(ip),
            None => Node::Unparsed(text),
        }
    }
}

/// `ip` (canonicalised) masked to `/ipv4_prefix` or `/ipv6_prefix` (clamped to 32 and 128).
pub fn group(ip: IpAddr, ipv4_prefix: u8, ipv6_prefix: u8) -> IpNet {
    match canonical(ip) {
        IpAddr::V4(v4) => IpNet::V4(
            Ipv4Net::new(v4, ipv4_prefix.min(32))
                .expect("prefix clamped to 32")
                .trunc(),
        ),
        IpAddr::V6(v6) => IpNet::V6(
            Ipv6Net::new(v6, ipv6_prefix.min(128))
                .expect("prefix clamped to 128")
                .trunc(),
        ),
    }
}

/// `::ffff:a.b.c.d` becomes `a.b.c.d`; everything else is unchanged.
pub fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6
            .to_ipv4_mapped()
            .map(IpAddr::V4)
            .unwrap_or(IpAddr::V6(v6)),
        v4 => v4,
    }
}

/// A grouped client network as written in keys: the bare address for a full-length prefix
/// (`203.0.113.7`), `address/len` otherwise (`2001:db8:1:2::/64`).
pub fn format_net(net: IpNet) -> String {
    let mut out = String::new();
    push_net(&mut out, net);
    out
}

/// Appends [`format_net`]`(net)` to `out`.
pub(crate) fn push_net(out: &mut String, net: IpNet) {
    match net {
        // The usual key (one IPv4 client), written without the formatting machinery.
        IpNet::V4(v4) if v4.prefix_len() == 32 => {
            let mut digits = itoa::Buffer::new();
            for (i, octet) in v4.addr().octets().into_iter().enumerate() {
                if i > 0 {
                    out.push('.');
                }
                out.push_str(digits.format(octet));
            }
        }
        _ if net.prefix_len() == net.max_prefix_len() => {
            let _ = write!(out, "{}", net.addr());
        }
        _ => {
            let _ = write!(out, "{net}");
        }
    }
}

/// An address as found in `X-Forwarded-For`: `1.2.3.4`, `1.2.3.4:80`, `2001:db8::1`,
/// `[2001:db8::1]:80` or `[2001:db8::1]`.
fn parse_addr(text: &str) -> Option<IpAddr> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some(ip);
    }
    if let Ok(sock) = text.parse::<SocketAddr>() {
        return Some(sock.ip());
    }
    text.strip_prefix('[')
        .and_then(|t| t.strip_suffix(']'))
        .and_then(|t| t.parse::<IpAddr>().ok())
}

/// The `for=` node of one RFC 7239 `Forwarded` element: its address, or its text when it is
/// `unknown` or an obfuscated identifier (the whole element when it has no `for=`).
fn forwarded_for(element: &str) -> Node<'_> {
    let value = element.split(';').find_map(|pair| {
        let (name, value) = pair.split_once('=')?;
        name.trim()
            .eq_ignore_ascii_case("for")
            .then_some(value.trim())
    });
    let Some(value) = value else {
        return Node::Unparsed(element.trim());
    };
    let value = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    Node::of(value)
}

/// The peer address from the request extensions: [`PeerAddr`], then (feature `axum`) axum's
/// `ConnectInfo<SocketAddr>`.
pub fn peer_addr(extensions: &http::Extensions) -> Option<SocketAddr> {
    if let Some(PeerAddr(addr)) = extensions.get::<PeerAddr>() {
        return Some(*addr);
    }
    #[cfg(feature = "axum")]
    if let Some(axum::extract::ConnectInfo(addr)) =
        extensions.get::<axum::extract::ConnectInfo<SocketAddr>>()
    {
        return Some(*addr);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn addr(s: &str) -> Client {
        Client::Addr(ip(s))
    }

    fn unparsed(s: &str) -> Client {
        Client::Unparsed(s.to_owned())
    }

    fn trusting(nets: &[&str]) -> ClientIpConfig {
        ClientIpConfig {
            trusted_proxies: nets.iter().map(|n| n.parse().unwrap()).collect(),
            ..ClientIpConfig::default()
        }
    }

    fn xff(values: &[&str]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for v in values {
            h.append("x-forwarded-for", HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn untrusted_peer_headers_are_ignored() {
        let cfg = trusting(&["10.0.0.0/8"]);
        let h = xff(&["198.51.100.9"]);
        assert_eq!(cfg.client(ip("203.0.113.5"), &h), addr("203.0.113.5"));
        // No trusted proxies configured at all.
        assert_eq!(
            ClientIpConfig::default().client(ip("10.0.0.1"), &h),
            addr("10.0.0.1")
        );
    }

    #[test]
    fn trusted_hops_are_skipped_from_the_right() {
        let cfg = trusting(&["10.0.0.0/8"]);
        // The client wrote a fake leftmost entry; the proxies appended the real ones.
        let h = xff(&["1.1.1.1, 198.51.100.9", "10.0.0.7"]);
        assert_eq!(cfg.client(ip("10.0.0.2"), &h), addr("198.51.100.9"));
        // Every entry trusted: the leftmost is the client.
        let h = xff(&["10.1.1.1, 10.0.0.7"]);
        assert_eq!(cfg.client(ip("10.0.0.2"), &h), addr("10.1.1.1"));
    }

    #[test]
    fn junk_left_of_the_client_never_matters() {
        // The case: with 127.0.0.1 trusted, `junk, 203.0.113.10` charged the proxy.
        let cfg = trusting(&["127.0.0.1/32"]);
        let h = xff(&["junk, 203.0.113.10"]);
        assert_eq!(cfg.client(ip("127.0.0.1"), &h), addr("203.0.113.10"));
        let cfg = trusting(&["10.0.0.0/8"]);
        for left in [
            "not-an-ip",
            "1.2.3.999",
            "unknown",
            "",
            " , ",
            "1.1.1.1, junk",
        ] {
            let h = xff(&[&format!("{left}, 198.51.100.9, 10.0.0.7")]);
            assert_eq!(
                cfg.client(ip("10.0.0.2"), &h),
                addr("198.51.100.9"),
                "{left:?}"
            );
        }
        // Bytes that are no text in the client's part of the line (nginx appends to it).
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"\xff\xfe, 198.51.100.9").unwrap(),
        );
        assert_eq!(cfg.client(ip("10.0.0.2"), &h), addr("198.51.100.9"));
    }

    #[test]
    fn an_unparsable_entry_at_the_clients_position_is_the_client_not_the_proxy() {
        let cfg = trusting(&["10.0.0.0/8"]);
        for (header, client) in [
            ("not-an-ip", "not-an-ip"),
            ("1.2.3.4, junk", "junk"),
            ("198.51.100.9, 1.2.3.999, 10.0.0.7", "1.2.3.999"),
            ("unknown", "unknown"),
            ("", ""),
            ("1.2.3.4, , 10.0.0.5", ""),
        ] {
            let got = cfg.client(ip("10.0.0.2"), &xff(&[header]));
            assert_eq!(got, unparsed(client), "{header:?}");
            assert_ne!(got, addr("10.0.0.2"), "{header:?}");
        }
        let mut h = HeaderMap::new();
        h.insert(
            "x-forwarded-for",
            HeaderValue::from_bytes(b"198.51.100.9, \xff\xfe").unwrap(),
        );
        assert_eq!(cfg.client(ip("10.0.0.2"), &h), unparsed("\u{fffd}\u{fffd}"));
        // A long entry is cut, so a key stays short.
        let long = "x".repeat(500);
        assert_eq!(
            cfg.client(ip("10.0.0.2"), &xff(&[&long])),
            unparsed(&long[..Client::MAX_UNPARSED])
        );
    }

    #[test]
    fn at_most_max_entries_are_examined_from_the_right() {
        let cfg = trusting(&["10.0.0.0/8"]);
        // 40 trusted hops: the client is beyond reach, a key of its own, never a proxy's
        // (it was the 32nd from the right, 10.0.0.9).
        let hops: Vec<String> = (1..=40).map(|i| format!("10.0.0.{i}")).collect();
        assert_eq!(
            cfg.client(ip("10.0.0.200"), &xff(&[&hops.join(",")])),
            unparsed(Client::TOO_MANY_HOPS)
        );
        // The same over several field lines, and with junk written beyond reach.
        let lines: Vec<&str> = hops.iter().map(String::as_str).collect();
        assert_eq!(
            cfg.client(ip("10.0.0.200"), &xff(&lines)),
            unparsed(Client::TOO_MANY_HOPS)
        );
        let junk_led = format!("junk,{}", hops[..32].join(","));
        assert_eq!(
            cfg.client(ip("10.0.0.200"), &xff(&[&junk_led])),
            unparsed(Client::TOO_MANY_HOPS)
        );
        // Exactly 32, all trusted: the leftmost, as documented.
        assert_eq!(
            cfg.client(ip("10.0.0.200"), &xff(&[&hops[..32].join(",")])),
            addr("10.0.0.1")
        );
        // An untrusted client within reach is found however long the list is to its left.
        let mut long: Vec<String> = (0..1000).map(|_| "junk".to_owned()).collect();
        long.push("198.51.100.9".into());
        long.push("10.0.0.7".into());
        assert_eq!(
            cfg.client(ip("10.0.0.2"), &xff(&[&long.join(",")])),
            addr("198.51.100.9")
        );
    }

    #[test]
    fn ports_and_brackets_are_accepted() {
        let cfg = trusting(&["10.0.0.0/8"]);
        assert_eq!(
            cfg.client(ip("10.0.0.2"), &xff(&["198.51.100.9:4711"])),
            addr("198.51.100.9")
        );
        assert_eq!(
            cfg.client(ip("10.0.0.2"), &xff(&["[2001:db8::1]:80"])),
            addr("2001:db8::1")
        );
    }

    #[test]
    fn forwarded_header_for_nodes() {
        let cfg = ClientIpConfig {
            header: ForwardedHeader::Forwarded,
            ..trusting(&["10.0.0.0/8"])
        };
        let mut h = HeaderMap::new();
        h.insert(
            "forwarded",
            HeaderValue::from_static("for=192.0.2.60;proto=http, For=\"[2001:db8:cafe::17]:4711\""),
        );
        assert_eq!(cfg.client(ip("10.0.0.2"), &h), addr("2001:db8:cafe::17"));
        h.insert("forwarded", HeaderValue::from_static("for=unknown"));
        assert_eq!(cfg.client(ip("10.0.0.2"), &h), unparsed("unknown"));
        h.insert(
            "forwarded",
            HeaderValue::from_static("for=_hidden, for=10.0.0.9"),
        );
        assert_eq!(cfg.client(ip("10.0.0.2"), &h), unparsed("_hidden"));
        h.insert(
            "forwarded",
            HeaderValue::from_static("for=junk, for=192.0.2.60;proto=http"),
        );
        assert_eq!(cfg.client(ip("10.0.0.2"), &h), addr("192.0.2.60"));
        // X-Forwarded-For is not read when Forwarded is configured.
        h.remove("forwarded");
        h.insert("x-forwarded-for", HeaderValue::from_static("192.0.2.1"));
        assert_eq!(cfg.client(ip("10.0.0.2"), &h), addr("10.0.0.2"));
    }

    #[test]
    fn ipv6_is_grouped_and_mapped_v4_is_v4() {
        let cfg = ClientIpConfig::default();
        assert_eq!(
            format_net(cfg.group(ip("2001:db8:1:2:aaaa::1"))),
            "2001:db8:1:2::/64"
        );
        assert_eq!(
            cfg.group(ip("2001:db8:1:2:aaaa::1")),
            cfg.group(ip("2001:db8:1:2:ffff::9"))
        );
        assert_ne!(
            cfg.group(ip("2001:db8:1:2::1")),
            cfg.group(ip("2001:db8:1:3::1"))
        );
        assert_eq!(format_net(cfg.group(ip("::ffff:192.0.2.1"))), "192.0.2.1");
        for text in ["0.0.0.0", "10.0.0.1", "255.255.255.255", "203.0.113.70"] {
            assert_eq!(format_net(cfg.group(ip(text))), text);
        }
        let v4_24 = ClientIpConfig {
            ipv4_prefix: 24,
            ..ClientIpConfig::default()
        };
        assert_eq!(
            format_net(v4_24.group(ip("203.0.113.70"))),
            "203.0.113.0/24"
        );
        let wide = ClientIpConfig {
            ipv6_prefix: 48,
            ..ClientIpConfig::default()
        };
        assert_eq!(
            format_net(wide.group(ip("2001:db8:1:2::1"))),
            "2001:db8:1::/48"
        );
        // A mapped peer is matched against IPv4 trusted CIDRs.
        assert!(trusting(&["10.0.0.0/8"]).is_trusted(ip("::ffff:10.0.0.1")));
    }

    proptest::proptest! {
        #[test]
        fn any_header_gives_the_peer_an_address_from_the_header_or_its_own_key(
            raw in proptest::collection::vec(0x20u8..0x7f, 0..80),
            trusted_peer in proptest::bool::ANY,
        ) {
            let cfg = trusting(&["10.0.0.0/8"]);
            let peer = if trusted_peer { ip("10.0.0.2") } else { ip("203.0.113.1") };
            let mut h = HeaderMap::new();
            h.insert("x-forwarded-for", HeaderValue::from_bytes(&raw).unwrap());
            let got = cfg.client(peer, &h);
            if trusted_peer {
                let text = String::from_utf8(raw).unwrap();
                // The rightmost entry that is not a trusted address, if any.
                let stop = text.rsplit(',').map(str::trim).find(|e| {
                    parse_addr(e).map(canonical).is_none_or(|a| !cfg.is_trusted(a))
                });
                match stop {
                    Some(entry) => match parse_addr(entry) {
                        Some(a) => proptest::prop_assert_eq!(got, Client::Addr(canonical(a))),
                        None => proptest::prop_assert_eq!(got, Client::unparsed(entry)),
                    },
                    // Every entry trusted: the leftmost.
                    None => {
                        let first = text.split(',').next().and_then(|e| parse_addr(e.trim()));
                        proptest::prop_assert_eq!(got.addr(), first.map(canonical));
                    }
                }
            } else {
                proptest::prop_assert_eq!(got, Client::Addr(peer));
            }
        }
    }
}
