//! `rayscale status --why`: the reasons the active rayscale stored in the GCS KV with
//! its last iteration (pending demand by reason, worker nodes by reason, largest first),
//! for one cluster or every cluster the GCS holds an explanation of.

use anyhow::Result;
use rayscale_core::driver::table::NAMESPACE;
use rayscale_core::explain::{Explanation, why_key};
use rayscale_gcs_client::client::GcsClient;

/// A stored explanation older than this is said to be stale.
const STALE_S: i64 = 300;

/// The text of `status --why` at `now_ns`.
pub async fn why(gcs: &GcsClient, cluster: Option<&str>, now_ns: i64) -> Result<String> {
    let clusters: Vec<String> = match cluster {
        Some(c) => vec![c.to_string()],
        None => {
            let prefix = why_key("");
            let mut names: Vec<String> = gcs
                .kv_keys(NAMESPACE, prefix.as_bytes())
                .await?
                .into_iter()
                .filter_map(|k| String::from_utf8(k).ok())
                .filter_map(|k| k.strip_prefix(&prefix).map(str::to_string))
                .collect();
            names.sort();
            names
        }
    };
    if clusters.is_empty() {
        return Ok(
            "no explanation stored: no rayscale has run an iteration against this GCS \
                   (`rayscale explain --config C.yaml --gcs H:P` works out one now)"
                .into(),
        );
    }
    let mut out = String::new();
    for c in clusters {
        let Some(bytes) = gcs.kv_get(NAMESPACE, why_key(&c).as_bytes()).await? else {
            out.push_str(&format!("cluster {c}: no explanation stored\n"));
            continue;
        };
        match Explanation::from_json(&bytes) {
            Ok(e) => out.push_str(&render(&c, &e, now_ns)),
            Err(e) => out.push_str(&format!("cluster {c}: the stored explanation {e}\n")),
        }
    }
    Ok(out)
}

/// One cluster's explanation with its age.
pub fn render(cluster: &str, e: &Explanation, now_ns: i64) -> String {
    let age_s = now_ns.saturating_sub(e.at_ns) / 1_000_000_000;
    let stale = if age_s > STALE_S {
        " (stale: is rayscale running?)"
    } else {
        ""
    };
    let mut out = format!("cluster {cluster}, as rayscale saw it {age_s} s ago{stale}:\n");
    for l in e.lines() {
        out.push_str(&l);
        out.push('\n');
    }
    out
}
