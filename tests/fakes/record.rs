//! What a fake was asked and what it answered, written down for the contract check
//! (`tests/contract/check.py`), which judges both against the cloud's own published API
//! model. A fake builds its answer as a [`Reply`] (the same builder calls as wiremock's
//! `ResponseTemplate`, but readable afterwards) and hands it to [`answer`], which records
//! the exchange when `RAYSCALE_CONTRACT_DIR` is set and turns it into the template.
//!
//! One JSON line per exchange in `$RAYSCALE_CONTRACT_DIR/<cloud>-<pid>.jsonl` (one file
//! per test process, appended under a lock, so parallel tests never interleave a line):
//! `{"cloud", "test", "method", "path", "query": [[k, v], ...], "headers": {...},
//! "body": <JSON or text>, "status", "response": <JSON or null>}`. `test` is the name of
//! the test that started the fake, so a finding names the test that sent it.

use std::io::Write as _;
use std::sync::Mutex;

use serde_json::{Value, json};
use wiremock::{Request, ResponseTemplate};

/// An answer under construction: status, headers and an optional JSON body.
#[derive(Debug, Clone)]
pub struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Option<Value>,
}

impl Reply {
    /// An answer with `status` and no body.
    pub fn new(status: u16) -> Self {
        Reply {
            status,
            headers: Vec::new(),
            body: None,
        }
    }

    /// Adds a header.
    pub fn insert_header(mut self, name: &str, value: &str) -> Self {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    /// Sets the JSON body.
    pub fn set_body_json(mut self, body: Value) -> Self {
        self.body = Some(body);
        self
    }

    /// The status.
    pub fn status(&self) -> u16 {
        self.status
    }
}

impl From<Reply> for ResponseTemplate {
    fn from(r: Reply) -> Self {
        let mut t = ResponseTemplate::new(r.status);
        for (k, v) in &r.headers {
            t = t.insert_header(k.as_str(), v.as_str());
        }
        match r.body {
            Some(b) => t.set_body_json(b),
            None => t,
        }
    }
}

/// The name of the calling test (its thread's name; wiremock answers on threads of its
/// own, so a fake takes this when it starts).
pub fn test_name() -> String {
    std::thread::current().name().unwrap_or("?").to_string()
}

/// Records the exchange (when asked to) and returns the template to answer with.
pub fn answer(cloud: &str, test: &str, req: &Request, reply: Reply) -> ResponseTemplate {
    if recording() {
        let response = reply.body.clone().unwrap_or(Value::Null);
        record(cloud, test, req, reply.status, response);
    }
    reply.into()
}

fn recording() -> bool {
    std::env::var_os("RAYSCALE_CONTRACT_DIR").is_some()
}

/// Records one exchange of `cloud` when `RAYSCALE_CONTRACT_DIR` is set; a response that
/// is not JSON (EC2's XML) is recorded as `null`.
pub fn record(cloud: &str, test: &str, req: &Request, status: u16, response: Value) {
    let Some(dir) = std::env::var_os("RAYSCALE_CONTRACT_DIR") else {
        return;
    };
    let body = match serde_json::from_slice::<Value>(&req.body) {
        Ok(v) => v,
        Err(_) => Value::String(String::from_utf8_lossy(&req.body).into_owned()),
    };
    let headers: serde_json::Map<String, Value> = req
        .headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), json!(v.to_str().ok()?))))
        .collect();
    let line = json!({
        "cloud": cloud,
        "test": test,
        "method": req.method.as_str(),
        "path": req.url.path(),
        "query": req.url.query_pairs().map(|(k, v)| [k.into_owned(), v.into_owned()]).collect::<Vec<_>>(),
        "headers": headers,
        "body": if req.body.is_empty() { Value::Null } else { body },
        "status": status,
        "response": response,
    });
    static FILE: Mutex<()> = Mutex::new(());
    let _g = match FILE.lock() {
        Ok(g) => g,
        Err(p) => p.into_inner(),
    };
    let path = std::path::Path::new(&dir).join(format!("{cloud}-{}.jsonl", std::process::id()));
    let written = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .and_then(|mut f| f.write_all(format!("{line}\n").as_bytes()));
    if let Err(e) = written {
        // The contract check counts what it gets and fails on too little: say why here.
        eprintln!("contract record: cannot write {}: {e}", path.display());
    }
}
