//! pycage's egress: how a sandboxed run with an allow-list reaches the
//! network, and the only way it can.
//!
//! # Layers
//!
//! Each module uses only those listed before it:
//!
//! 1. `sync` (locks that survive a panic elsewhere), [`rules`] (the
//!    allow-list's rules and the network report: data only, no I/O);
//! 2. [`proxy`]: the host-side HTTP proxy serving one run's listener.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used, clippy::panic))]

pub mod proxy;
pub mod rules;
mod sync;

pub use proxy::{Egress, Limits};
pub use rules::{
    proxy_env, Connection, NetBudget, NetHost, NetRule, NetRuleError, NetworkReport, DEFAULT_NET_PORT,
    EGRESS_PROXY_PORT,
};
