//! HTTP bindings: one POST per call.
//!
//! The call's arguments are the request body (canonical JSON,
//! `Content-Type: application/json`); a 2xx response whose body is one JSON
//! document is the call's value. Anything else rejects the call: a non-2xx
//! status with the first [`MAX_ERROR_BODY_BYTES`] of the body, a body that
//! is not JSON, a body over [`MAX_RESPONSE_BYTES`], a timeout, a connection
//! error. Redirects are not followed (a 3xx is a rejection): a redirect
//! could carry the configured headers to another origin.
//!
//! Header values may come from the host's environment (`{ env = "API_TOKEN" }`),
//! resolved once when the bindings file is loaded. They go to the endpoint
//! only: the program sees the response, never the request, and rejection
//! messages name the endpoint by [`endpoint_label`], which drops userinfo
//! and the query string (where a secret might also have been put).

use std::time::Duration;

use pycage_runtime::{BindingError, JsonValue};
use reqwest::header::{HeaderName, HeaderValue, ACCEPT, CONTENT_TYPE};

use crate::secret::Secret;

/// Per-call timeout when the file sets none.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Largest response body read (16 MiB); more rejects the call.
pub const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// Body bytes quoted in a rejection for a non-2xx status (2 KiB).
pub const MAX_ERROR_BODY_BYTES: usize = 2 * 1024;

/// One HTTP function of a bindings file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpSpec {
    pub url: reqwest::Url,
    pub timeout: Duration,
    /// Sent with every request; values may be secrets.
    pub headers: Vec<(HeaderName, Secret)>,
}

/// The client every HTTP binding of a file shares (one connection pool).
pub fn client() -> Result<reqwest::Client, reqwest::Error> {
    reqwest::Client::builder().redirect(reqwest::redirect::Policy::none()).build()
}

/// `scheme://host:port/path` of a URL: what messages may show.
pub fn endpoint_label(url: &reqwest::Url) -> String {
    let mut u = url.clone();
    let _ = u.set_username("");
    let _ = u.set_password(None);
    u.set_query(None);
    u.set_fragment(None);
    u.to_string()
}

/// One call: POST `args`, return the JSON body.
pub async fn call(client: &reqwest::Client, spec: &HttpSpec, args: JsonValue) -> Result<JsonValue, BindingError> {
    let label = endpoint_label(&spec.url);
    match tokio::time::timeout(spec.timeout, exchange(client, spec, args, &label)).await {
        Ok(r) => r,
        Err(_) => Err(BindingError::new(format!("POST {label} timed out after {} ms", spec.timeout.as_millis()))),
    }
}

async fn exchange(
    client: &reqwest::Client,
    spec: &HttpSpec,
    args: JsonValue,
    label: &str,
) -> Result<JsonValue, BindingError> {
    let mut req = client
        .post(spec.url.clone())
        .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
        .header(ACCEPT, HeaderValue::from_static("application/json"))
        .body(args.to_canonical_string());
    for (name, value) in &spec.headers {
        // Checked when the file was loaded; a value that stopped parsing is skipped.
        if let Ok(mut v) = HeaderValue::from_str(value.expose()) {
            v.set_sensitive(true);
            req = req.header(name.clone(), v);
        }
    }
    let mut resp = req.send().await.map_err(|e| BindingError::new(format!("POST {label}: {}", error_chain(&e))))?;
    let status = resp.status();
    let mut body = Vec::new();
    let mut over = false;
    let cap = if status.is_success() { MAX_RESPONSE_BYTES } else { MAX_ERROR_BODY_BYTES };
    loop {
        let chunk = resp
            .chunk()
            .await
            .map_err(|e| BindingError::new(format!("POST {label}: reading the response: {}", error_chain(&e))))?;
        let Some(chunk) = chunk else { break };
        let room = cap - body.len();
        if chunk.len() > room {
            body.extend_from_slice(chunk.get(..room).unwrap_or_default());
            over = true;
            break;
        }
        body.extend_from_slice(&chunk);
    }
    if !status.is_success() {
        let text = String::from_utf8_lossy(&body);
        let text = text.trim();
        let mark = if over { format!(" [body truncated at {MAX_ERROR_BODY_BYTES} bytes]") } else { String::new() };
        let sep = if text.is_empty() { "" } else { ": " };
        return Err(BindingError::new(format!("POST {label} answered {status}{sep}{text}{mark}")));
    }
    if over {
        return Err(BindingError::new(format!("POST {label}: the response is over {MAX_RESPONSE_BYTES} bytes")));
    }
    JsonValue::parse(&body).map_err(|e| {
        BindingError::new(format!("POST {label} answered {status} but the body is not one JSON document ({e})"))
    })
}

/// An error and its causes on one line (reqwest's own text is terse).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_drop_secrets() {
        let u = reqwest::Url::parse("http://user:pw@127.0.0.1:8080/a/b?token=s3cret#frag").unwrap();
        assert_eq!(endpoint_label(&u), "http://127.0.0.1:8080/a/b");
    }
}
