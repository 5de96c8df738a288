//! The egress allow-list's data: a rule ([`NetRule`], what
//! `RuntimeConfig::allow_net` holds), and what a run's result says of its
//! connections ([`NetworkReport`]). The proxy that enforces the list is
//! [`crate::proxy`]; this module is a leaf, so the configuration and the
//! result can use it.

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;

/// The port a rule without one allows: HTTPS. Plain HTTP (80) or any other
/// port must be named (`example.com:80`).
pub const DEFAULT_NET_PORT: u16 = 443;

/// Where the program reaches the egress proxy inside a sandboxed run:
/// `http://127.0.0.1:3128` (`HTTP_PROXY`/`HTTPS_PROXY`). The address is the
/// run's own loopback; the socket behind it is the host's.
pub const EGRESS_PROXY_PORT: u16 = 3128;

/// The environment that points a run's HTTP clients at the proxy.
pub fn proxy_env() -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{EGRESS_PROXY_PORT}");
    let mut env = Vec::new();
    for name in ["HTTP_PROXY", "HTTPS_PROXY"] {
        env.push((name.to_owned(), url.clone()));
        env.push((name.to_ascii_lowercase(), url.clone()));
    }
    // Nothing bypasses the proxy (there is nothing else to reach).
    env.push(("NO_PROXY".to_owned(), String::new()));
    env.push(("no_proxy".to_owned(), String::new()));
    env
}

/// Longest host name a rule or a request may name (as DNS allows).
const MAX_NAME_BYTES: usize = 253;

/// A host as a rule or a request names it: a DNS name (lowercase, without
/// a trailing dot), or an IP address literal. Names are compared exactly,
/// never by what they resolve to: `localhost` is not `127.0.0.1`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum NetHost {
    /// A DNS name, resolved on the host when a connection is made.
    Name(String),
    /// An IPv4 address.
    V4(Ipv4Addr),
    /// An IPv6 address (written in brackets with a port).
    V6(Ipv6Addr),
}

impl NetHost {
    /// Parses a host as written in a rule or a request target: an IPv4
    /// literal, an IPv6 literal (bare or in brackets), or a DNS name.
    pub fn parse(text: &str) -> Result<NetHost, NetRuleError> {
        if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            return inner.parse::<Ipv6Addr>().map(NetHost::V6).map_err(|_| NetRuleError::Host(text.to_owned()));
        }
        if let Ok(v4) = text.parse::<Ipv4Addr>() {
            return Ok(NetHost::V4(v4));
        }
        if let Ok(v6) = text.parse::<Ipv6Addr>() {
            return Ok(NetHost::V6(v6));
        }
        if text.contains('*') {
            return Err(NetRuleError::Wildcard(text.to_owned()));
        }
        let name = text.strip_suffix('.').unwrap_or(text).to_ascii_lowercase();
        let label_ok = |l: &str| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        };
        if name.is_empty() || name.len() > MAX_NAME_BYTES || !name.split('.').all(label_ok) {
            return Err(NetRuleError::Host(text.to_owned()));
        }
        Ok(NetHost::Name(name))
    }
}

impl fmt::Display for NetHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NetHost::Name(name) => f.write_str(name),
            NetHost::V4(ip) => write!(f, "{ip}"),
            NetHost::V6(ip) => write!(f, "[{ip}]"),
        }
    }
}

/// One entry of the egress allow-list: a host and one port. Written
/// `HOST[:PORT]` (`api.example.com:443`, `10.0.0.5:8080`, `[::1]:8443`);
/// without a port, [`DEFAULT_NET_PORT`] (443).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct NetRule {
    pub host: NetHost,
    pub port: u16,
}

impl NetRule {
    /// Whether this rule allows `host:port`.
    pub fn allows(&self, host: &NetHost, port: u16) -> bool {
        self.host == *host && self.port == port
    }

    /// Parses `HOST:PORT` where the port is required (a `CONNECT` target),
    /// or optional with `default` (an `http://` URL's authority).
    pub fn parse_authority(text: &str, default: Option<u16>) -> Result<NetRule, NetRuleError> {
        let (host, port) = split_port(text)?;
        let port = match (port, default) {
            (Some(port), _) => port,
            (None, Some(default)) => default,
            (None, None) => return Err(NetRuleError::Port(text.to_owned())),
        };
        Ok(NetRule { host: NetHost::parse(host)?, port })
    }
}

/// `host` and its port, if the text names one. A bare IPv6 literal has
/// no port (its colons are the address's).
fn split_port(text: &str) -> Result<(&str, Option<u16>), NetRuleError> {
    let port_of = |p: &str| match p.parse::<u16>() {
        Ok(port) if port > 0 && p.bytes().all(|b| b.is_ascii_digit()) => Ok(port),
        _ => Err(NetRuleError::Port(text.to_owned())),
    };
    if text.starts_with('[') {
        return match text.rsplit_once("]:") {
            Some((host, port)) => Ok((text.get(..host.len() + 1).unwrap_or(host), Some(port_of(port)?))),
            None => Ok((text, None)),
        };
    }
    match text.rsplit_once(':') {
        Some((host, _)) if host.contains(':') => Ok((text, None)),
        Some((host, port)) => Ok((host, Some(port_of(port)?))),
        None => Ok((text, None)),
    }
}

impl FromStr for NetRule {
    type Err = NetRuleError;

    fn from_str(text: &str) -> Result<NetRule, NetRuleError> {
        let text = text.trim();
        if text.is_empty() {
            return Err(NetRuleError::Host(String::new()));
        }
        if text.contains("://") || text.contains('/') {
            return Err(NetRuleError::Url(text.to_owned()));
        }
        NetRule::parse_authority(text, Some(DEFAULT_NET_PORT))
    }
}

impl fmt::Display for NetRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.host, self.port)
    }
}

/// An allow-list entry that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NetRuleError {
    #[error("{0:?} is not a host name or IP address")]
    Host(String),
    #[error("{0:?} has an invalid port (1 to 65535)")]
    Port(String),
    #[error("{0:?} is a URL; write HOST or HOST:PORT")]
    Url(String),
    #[error("{0:?}: wildcards are not supported; list each host")]
    Wildcard(String),
}

/// The budget a run's connections crossed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetBudget {
    /// `RuntimeConfig::max_net_bytes`: bytes to and from the network.
    Bytes,
    /// `RuntimeConfig::max_net_connections`: connections to the proxy.
    Connections,
}

impl NetBudget {
    /// The configuration field's name (in `RunResult::to_json`).
    pub fn as_str(self) -> &'static str {
        match self {
            NetBudget::Bytes => "max_net_bytes",
            NetBudget::Connections => "max_net_connections",
        }
    }
}

/// One connection the program made to the egress proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Connection {
    /// The request's method: `CONNECT` (a tunnel, for TLS), or the plain
    /// HTTP request's (`GET`, `POST`, ...); empty when no request could be
    /// read.
    pub method: String,
    /// The host the program asked for, as it wrote it (normalized: lower
    /// case, no trailing dot); for a request that could not be read, what
    /// could be (at most 256 bytes), or empty.
    pub host: String,
    /// The port the program asked for (0 when unreadable).
    pub port: u16,
    /// Whether the allow-list let it through.
    pub allowed: bool,
    /// Bytes sent from the program to the network through it.
    pub bytes_up: u64,
    /// Bytes received from the network and passed to the program.
    pub bytes_down: u64,
    /// Why it was refused, or how it ended early (cut by a budget, the
    /// upstream unreachable, the run settled while it was open); `None` for
    /// a connection that ran its course.
    pub reason: Option<String>,
}

/// What a sandboxed run with egress did on the network (`RunResult::network`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkReport {
    /// Every connection to the proxy, in the order they were accepted (at
    /// most `max_net_connections`).
    pub connections: Vec<Connection>,
    /// Bytes sent, all connections together.
    pub bytes_up: u64,
    /// Bytes received, all connections together.
    pub bytes_down: u64,
    /// Connections refused because `max_net_connections` were already
    /// made (not listed one by one).
    pub refused_over_budget: u64,
    /// The first budget the run crossed, if any.
    pub budget_exceeded: Option<NetBudget>,
}

impl NetworkReport {
    pub fn write_json(&self, b: &mut pycage_protocol::JsonBuilder) -> Result<(), pycage_protocol::BuildError> {
        b.begin_object()?;
        b.key("connections")?;
        b.begin_array()?;
        for c in &self.connections {
            b.begin_object()?;
            b.key("method")?;
            b.string(&c.method)?;
            b.key("host")?;
            b.string(&c.host)?;
            b.key("port")?;
            b.number(&c.port.to_string())?;
            b.key("allowed")?;
            b.bool(c.allowed)?;
            b.key("bytes_up")?;
            b.number(&c.bytes_up.to_string())?;
            b.key("bytes_down")?;
            b.number(&c.bytes_down.to_string())?;
            if let Some(reason) = &c.reason {
                b.key("reason")?;
                b.string(reason)?;
            }
            b.end()?;
        }
        b.end()?;
        b.key("bytes_up")?;
        b.number(&self.bytes_up.to_string())?;
        b.key("bytes_down")?;
        b.number(&self.bytes_down.to_string())?;
        b.key("refused_over_budget")?;
        b.number(&self.refused_over_budget.to_string())?;
        if let Some(budget) = self.budget_exceeded {
            b.key("budget_exceeded")?;
            b.string(budget.as_str())?;
        }
        b.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(text: &str) -> Result<NetRule, NetRuleError> {
        text.parse()
    }

    #[test]
    fn rules_parse_and_print() {
        assert_eq!(rule("api.example.com").unwrap().to_string(), "api.example.com:443");
        assert_eq!(rule("API.Example.COM.:8443").unwrap().to_string(), "api.example.com:8443");
        assert_eq!(rule("127.0.0.1:80").unwrap().host, NetHost::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(rule("[::1]:8080").unwrap().to_string(), "[::1]:8080");
        assert_eq!(rule("::1").unwrap().to_string(), "[::1]:443");
        assert_eq!(rule("[::1]").unwrap().to_string(), "[::1]:443");
        assert_eq!(rule(" host_1.internal ").unwrap().to_string(), "host_1.internal:443");
        for bad in ["", ":443", "a..b", "-a.com", "a.com:0", "a.com:65536", "a.com:+1", "a.com:x", "a b", "[::1"] {
            assert!(rule(bad).is_err(), "{bad:?}");
        }
        assert!(matches!(rule("https://a.com"), Err(NetRuleError::Url(_))));
        assert!(matches!(rule("*.a.com"), Err(NetRuleError::Wildcard(_))));
        assert!(rule(&format!("{}.com", "a".repeat(64))).is_err());
    }

    #[test]
    fn matching_is_by_name_and_port_exactly() {
        let r = rule("Example.com:443").unwrap();
        assert!(r.allows(&NetHost::parse("example.COM.").unwrap(), 443));
        assert!(!r.allows(&NetHost::parse("example.com").unwrap(), 80));
        assert!(!r.allows(&NetHost::parse("www.example.com").unwrap(), 443));
        let ip = rule("127.0.0.1:8080").unwrap();
        assert!(!ip.allows(&NetHost::parse("localhost").unwrap(), 8080));
        assert!(!ip.allows(&NetHost::parse("127.1").unwrap(), 8080), "127.1 is a name, never 127.0.0.1");
        assert_eq!(NetRule::parse_authority("a.com", None), Err(NetRuleError::Port("a.com".into())));
        assert_eq!(NetRule::parse_authority("a.com", Some(80)).unwrap().port, 80);
        assert_eq!(NetRule::parse_authority("[::1]:81", None).unwrap().to_string(), "[::1]:81");
    }
}
