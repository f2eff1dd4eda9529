//! Every key of the cluster config's `rayscale:` block, in one table: the readers' "unknown
//! key (known: ...)" errors list the keys of the block from here, a test holds every
//! reader to the table (each key it names is accepted, and nothing else), and the
//! reference page `docs/src/reference/config.md` is generated from it (a test fails when
//! the page differs). Ray's own keys are Ray's cluster schema's (`schema.rs`).

/// One key of the `rayscale:` block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Key {
    /// Its path under `rayscale:`, e.g. `gangs.timeout_s`.
    pub path: &'static str,
    /// What it takes.
    pub ty: &'static str,
    /// Its value when absent.
    pub default: &'static str,
    /// The values accepted, when narrower than the type.
    pub range: &'static str,
    /// When an edit takes effect (the config is re-read every iteration).
    pub takes_effect: &'static str,
    /// The providers it applies to.
    pub providers: &'static str,
    /// What it does, in one sentence.
    pub doc: &'static str,
    /// A value the reader accepts, for the test that holds the readers to the table
    /// (a YAML flow value; `None` for a block whose keys are listed themselves).
    pub example: Option<&'static str>,
}

const NEXT: &str = "next iteration";
const ALL: &str = "all";

/// The keys, blocks before their keys, in the order the reference shows them.
pub const KEYS: &[Key] = &[
    Key {
        path: "expander",
        ty: "mapping",
        default: "Ray's order",
        range: "",
        takes_effect: NEXT,
        providers: ALL,
        doc: "Which node type grows: a chain of expanders, each narrowing the candidates.",
        example: None,
    },
    Key {
        path: "expander.chain",
        ty: "list or comma-separated string",
        default: "ray",
        range: "ray, random, most-demands, least-waste, least-nodes, price, priority, weighted, grpc",
        takes_effect: NEXT,
        providers: ALL,
        doc: "The expanders in order: each narrows the tied candidates, the first to leave one decides; a tie left at the end goes to the first type in config order.",
        example: Some("[least-waste, ray]"),
    },
    Key {
        path: "expander.seed",
        ty: "integer",
        default: "0",
        range: ">= 0",
        takes_effect: NEXT,
        providers: ALL,
        doc: "Seed of the `random` and `weighted` expanders.",
        example: Some("7"),
    },
    Key {
        path: "expander.priorities",
        ty: "mapping of priority to list of type-name regexes",
        default: "none",
        range: "",
        takes_effect: NEXT,
        providers: ALL,
        doc: "The `priority` expander's table: higher priorities win (the Cluster Autoscaler's).",
        example: Some("{10: [\"cpu.*\"], 1: [\".*\"]}"),
    },
    Key {
        path: "expander.weights",
        ty: "mapping of node type to number",
        default: "none",
        range: "known node types, >= 0",
        takes_effect: NEXT,
        providers: ALL,
        doc: "Per-type weights of the `weighted` expander (a weighted random pick).",
        example: Some("{cpu: 2}"),
    },
    Key {
        path: "expander.prices",
        ty: "mapping of node type to number",
        default: "none",
        range: "known node types, >= 0",
        takes_effect: NEXT,
        providers: ALL,
        doc: "Hourly price per node type, for the `price` expander and `max_hourly_cost`.",
        example: Some("{head: 0, cpu: 0.2}"),
    },
    Key {
        path: "expander.grpc",
        ty: "mapping",
        default: "none",
        range: "",
        takes_effect: NEXT,
        providers: ALL,
        doc: "The external gRPC expander (the Cluster Autoscaler's protocol).",
        example: None,
    },
    Key {
        path: "expander.grpc.url",
        ty: "string",
        default: "required",
        range: "https:// URL or host:port; http:// with insecure only",
        takes_effect: NEXT,
        providers: ALL,
        doc: "Where the expander service listens.",
        example: Some("\"http://127.0.0.1:7000\""),
    },
    Key {
        path: "expander.grpc.cert",
        ty: "path",
        default: "none",
        range: "",
        takes_effect: NEXT,
        providers: ALL,
        doc: "CA certificate (PEM) the service's TLS certificate is checked against.",
        example: Some("ca.pem"),
    },
    Key {
        path: "expander.grpc.insecure",
        ty: "bool",
        default: "false",
        range: "",
        takes_effect: NEXT,
        providers: ALL,
        doc: "Talk plain text (`http://`) to the service; allowed to a loopback host only, refused with `https://`.",
        example: Some("false"),
    },
    Key {
        path: "expander.grpc.timeout_s",
        ty: "number",
        default: "5",
        range: "> 0",
        takes_effect: NEXT,
        providers: ALL,
        doc: "Deadline of one call; past it the chain goes on without the service.",
        example: Some("2.5"),
    },
    Key {
        path: "unavailable_type_ttl_s",
        ty: "integer (s)",
        default: "180",
        range: ">= 0",
        takes_effect: NEXT,
        providers: ALL,
        doc: "How long a capacity error (or a preemption) keeps a node type or zone out.",
        example: Some("300"),
    },
    Key {
        path: "preemption",
        ty: "mapping",
        default: "off",
        range: "",
        takes_effect: NEXT,
        providers: "aws, gcp, azure",
        doc: "Replace spot and preemptible nodes at the cloud's notice, while they still run.",
        example: None,
    },
    Key {
        path: "preemption.enabled",
        ty: "bool",
        default: "false",
        range: "",
        takes_effect: "next iteration; the watcher in workers launched after it",
        providers: "aws, gcp, azure",
        doc: "Turn preemption handling on (off: Ray's behaviour).",
        example: Some("true"),
    },
    Key {
        path: "preemption.on_rebalance",
        ty: "string",
        default: "ignore",
        range: "ignore, drain",
        takes_effect: "next iteration; the watcher in workers launched after it",
        providers: "aws",
        doc: "What an EC2 rebalance recommendation does: counted and said, or a drain.",
        example: Some("drain"),
    },
    Key {
        path: "preemption.notice_poll_s",
        ty: "integer (s)",
        default: "5",
        range: "1 to 60",
        takes_effect: "workers launched after it",
        providers: "aws, gcp, azure",
        doc: "How often each worker asks its metadata service for a notice.",
        example: Some("2"),
    },
    Key {
        path: "bridge",
        ty: "mapping",
        default: "see keys",
        range: "",
        takes_effect: "at start",
        providers: "local, vsphere, aliyun, external, fake_multinode",
        doc: "The Python bridge that runs Ray's v1 node providers.",
        example: None,
    },
    Key {
        path: "bridge.python",
        ty: "path",
        default: "$RAYSCALE_PYTHON, else python3",
        range: "",
        takes_effect: "at start",
        providers: "local, vsphere, aliyun, external, fake_multinode",
        doc: "A Python with the cluster's Ray installed.",
        example: Some("/opt/venv/bin/python"),
    },
    Key {
        path: "bridge.call_timeout_s",
        ty: "number (s)",
        default: "20",
        range: "> 0",
        takes_effect: "at start",
        providers: "local, vsphere, aliyun, external, fake_multinode",
        doc: "Deadline of every provider call but creates and installs.",
        example: Some("30"),
    },
    Key {
        path: "bridge.launch_timeout_s",
        ty: "number (s)",
        default: "300",
        range: "> 0",
        takes_effect: "at start",
        providers: "local, vsphere, aliyun, external, fake_multinode",
        doc: "Deadline of one `create_node` call.",
        example: Some("600"),
    },
    Key {
        path: "bridge.install_timeout_s",
        ty: "number (s)",
        default: "1800",
        range: "> 0",
        takes_effect: "at start",
        providers: "local, vsphere, aliyun, external, fake_multinode",
        doc: "Deadline of one attempt of Ray's node updater (SSH install); the loop gives up on a whole install, attempts included, after 1800 s.",
        example: Some("900"),
    },
    Key {
        path: "disruption_budget",
        ty: "mapping",
        default: "none (Ray's)",
        range: "",
        takes_effect: NEXT,
        providers: ALL,
        doc: "How many nodes rayscale's voluntary stops may take at once, and when not.",
        example: None,
    },
    Key {
        path: "disruption_budget.max_draining",
        ty: "integer or \"N%\"",
        default: "no limit",
        range: ">= 0, or above 0% up to 100% (rounded down, at least 1 node)",
        takes_effect: NEXT,
        providers: ALL,
        doc: "At most this many nodes draining at once (a share of the workers with %).",
        example: Some("2"),
    },
    Key {
        path: "disruption_budget.max_stops",
        ty: "integer",
        default: "no limit",
        range: ">= 0",
        takes_effect: NEXT,
        providers: ALL,
        doc: "At most this many voluntary stops per window.",
        example: Some("5"),
    },
    Key {
        path: "disruption_budget.window_s",
        ty: "integer (s)",
        default: "600",
        range: ">= 1",
        takes_effect: NEXT,
        providers: ALL,
        doc: "The window `max_stops` counts in.",
        example: Some("300"),
    },
    Key {
        path: "disruption_budget.blocked",
        ty: "list of windows",
        default: "none",
        range: "\"Mon-Fri 09:00-17:00\" (UTC)",
        takes_effect: NEXT,
        providers: ALL,
        doc: "Times when no voluntary stop is made.",
        example: Some("[\"Mon-Fri 09:00-17:00\"]"),
    },
    Key {
        path: "disruption_budget.node_types",
        ty: "mapping of node type to budget",
        default: "none",
        range: "known node types; max_draining, max_stops, window_s each",
        takes_effect: NEXT,
        providers: ALL,
        doc: "A budget of its own per node type, besides the global one.",
        example: Some("{cpu: {max_draining: 1}}"),
    },
    Key {
        path: "scale_down_delay_after_launch_s",
        ty: "integer (s)",
        default: "none",
        range: ">= 0",
        takes_effect: NEXT,
        providers: ALL,
        doc: "No idle stop for this long after any launch (the Cluster Autoscaler's).",
        example: Some("120"),
    },
    Key {
        path: "min_node_lifetime_s",
        ty: "integer (s)",
        default: "none",
        range: ">= 0",
        takes_effect: NEXT,
        providers: ALL,
        doc: "A node is not stopped as idle before it has run this long.",
        example: Some("300"),
    },
    Key {
        path: "max_hourly_cost",
        ty: "number",
        default: "none",
        range: ">= 0; every node type priced in expander.prices",
        takes_effect: NEXT,
        providers: ALL,
        doc: "Launch nothing that would take the cluster's hourly price above this.",
        example: Some("10.5"),
    },
    Key {
        path: "autostop_minutes",
        ty: "number (min)",
        default: "none",
        range: "> 0; not on kuberay",
        takes_effect: NEXT,
        providers: "local_processes, aws, gcp, azure, v1 providers",
        doc: "After this long with no demand and no work, every worker stops (then the head of a cluster `up` launched).",
        example: Some("60"),
    },
    Key {
        path: "consolidation",
        ty: "mapping",
        default: "off",
        range: "",
        takes_effect: NEXT,
        providers: ALL,
        doc: "Drain mostly empty nodes whose work fits elsewhere.",
        example: None,
    },
    Key {
        path: "consolidation.node_types",
        ty: "list of node types",
        default: "required",
        range: "known node types, at least one",
        takes_effect: NEXT,
        providers: ALL,
        doc: "The node types consolidation may drain.",
        example: Some("[cpu]"),
    },
    Key {
        path: "consolidation.utilization_below",
        ty: "number",
        default: "0.5",
        range: "above 0, up to 1",
        takes_effect: NEXT,
        providers: ALL,
        doc: "A node is a candidate while its most used resource is below this share.",
        example: Some("0.3"),
    },
    Key {
        path: "consolidation.after_s",
        ty: "integer (s)",
        default: "600",
        range: ">= 0",
        takes_effect: NEXT,
        providers: ALL,
        doc: "... for this long.",
        example: Some("120"),
    },
    Key {
        path: "consolidation.drain_deadline_s",
        ty: "integer (s)",
        default: "600",
        range: ">= 0",
        takes_effect: NEXT,
        providers: ALL,
        doc: "The drain's deadline: its work runs on until then, or until it ends.",
        example: Some("60"),
    },
    Key {
        path: "install",
        ty: "mapping",
        default: "none: a head without rayscale installs nothing",
        range: "one of wheel, find_links, index: true",
        takes_effect: "at the head's boot",
        providers: "aws, gcp, azure",
        doc: "How a head launched by `rayscale up` gets rayscale when its image has none.",
        example: None,
    },
    Key {
        path: "install.wheel",
        ty: "absolute path, or http(s):// or file:// URL, of a .whl",
        default: "none",
        range: "with sha256 for a URL",
        takes_effect: "at the head's boot",
        providers: "aws, gcp, azure",
        doc: "The wheel to install (a local path is pinned by its digest when the script is made).",
        example: Some("https://example.com/rayscale-0.1.0-py3-none-manylinux_2_34_x86_64.whl"),
    },
    Key {
        path: "install.sha256",
        ty: "hex string",
        default: "none",
        range: "64 hex digits; with wheel only",
        takes_effect: "at the head's boot",
        providers: "aws, gcp, azure",
        doc: "The wheel's digest; a file whose digest differs is never installed.",
        example: Some("9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"),
    },
    Key {
        path: "install.find_links",
        ty: "path or URL",
        default: "none",
        range: "",
        takes_effect: "at the head's boot",
        providers: "aws, gcp, azure",
        doc: "A directory or page of wheels, installed from with --no-index.",
        example: Some("https://example.com/wheels/"),
    },
    Key {
        path: "install.pip",
        ty: "string",
        default: "`rayscale==<version>`",
        range: "with find_links or index: true only",
        takes_effect: "at the head's boot",
        providers: "aws, gcp, azure",
        doc: "The requirement pip installs.",
        example: Some("\"rayscale==0.1.0\""),
    },
    Key {
        path: "install.index",
        ty: "bool",
        default: "false",
        range: "",
        takes_effect: "at the head's boot",
        providers: "aws, gcp, azure",
        doc: "Opt in to installing `pip` from the package index pip is configured with.",
        example: Some("true"),
    },
    Key {
        path: "gangs",
        ty: "\"atomic\", \"off\" or mapping",
        default: "off (Ray's)",
        range: "",
        takes_effect: NEXT,
        providers: ALL,
        doc: "Launch a placement group's nodes all or nothing, and release a gang that did not come up whole.",
        example: None,
    },
    Key {
        path: "gangs.mode",
        ty: "string",
        default: "required (in a mapping)",
        range: "atomic, off",
        takes_effect: NEXT,
        providers: ALL,
        doc: "`atomic` turns it on.",
        example: Some("atomic"),
    },
    Key {
        path: "gangs.timeout_s",
        ty: "integer (s)",
        default: "600",
        range: "1 to 86400",
        takes_effect: NEXT,
        providers: ALL,
        doc: "How long a gang has to come up whole before it is released.",
        example: Some("300"),
    },
    Key {
        path: "gangs.attempts",
        ty: "integer",
        default: "3",
        range: "1 to 100",
        takes_effect: NEXT,
        providers: ALL,
        doc: "How many times a group is launched whole before it is set aside as infeasible.",
        example: Some("2"),
    },
];

/// The keys directly under `block` (`""`: the `rayscale:` block itself), in the table's
/// order, comma-separated: what an "unknown key" error lists.
pub fn known(block: &str) -> String {
    let depth = if block.is_empty() {
        0
    } else {
        block.matches('.').count() + 1
    };
    KEYS.iter()
        .filter(|k| {
            k.path.matches('.').count() == depth
                && (block.is_empty() || k.path.starts_with(&format!("{block}.")))
        })
        .map(|k| k.path.rsplit('.').next().unwrap_or(k.path))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The "unknown key (known: ...)" message of `block`.
pub fn unknown(block: &str) -> String {
    format!("unknown key (known: {})", known(block))
}

/// The reference page (`docs/src/reference/config.md`).
pub fn reference_markdown() -> String {
    let mut out = String::from(
        "# The `rayscale:` block\n\n\
         Generated from the key table in `crates/core/src/config/keys.rs`, the same table \
         the config reader's \"unknown key\" errors come from (`RAYSCALE_BLESS=1 cargo test \
         -p rayscale-tests --test docs` rewrites this page). Every key is optional; with no \
         `rayscale:` block, rayscale decides as Ray's autoscaler does. The rest of the \
         cluster YAML is Ray's: Ray's cluster schema, checked as Ray checks it.\n\n\
         | key | type | default | accepted | takes effect | providers | what it does |\n\
         |---|---|---|---|---|---|---|\n",
    );
    let cell = |s: &str| {
        if s.is_empty() {
            "-".to_string()
        } else {
            s.replace('|', "\\|")
        }
    };
    for k in KEYS {
        out.push_str(&format!(
            "| `{}` | {} | {} | {} | {} | {} | {} |\n",
            k.path,
            cell(k.ty),
            cell(k.default),
            cell(k.range),
            cell(k.takes_effect),
            cell(k.providers),
            cell(k.doc)
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::ClusterConfig;

    const BASE: &str = r#"cluster_name: keys
max_workers: 10
head_node_type: head
provider: {type: local_processes}
available_node_types:
  head: {resources: {CPU: 0}, node_config: {}}
  cpu: {resources: {CPU: 4}, max_workers: 10, node_config: {}}
"#;

    /// The smallest block around `k` that the reader accepts with `k` set to `value`.
    fn block_with(k: &Key, value: &str) -> String {
        let mut v = value.to_string();
        let parts: Vec<&str> = k.path.split('.').collect();
        for i in (0..parts.len()).rev() {
            // What the block holding `parts[i]` needs besides the key tried (consolidation
            // its types, a gRPC expander its URL, a wheel URL its digest).
            let block = parts[..i].join(".");
            let extra = match (block.as_str(), k.path) {
                ("consolidation", p) if p != "consolidation.node_types" => ", node_types: [cpu]",
                ("expander.grpc", p) if p != "expander.grpc.url" => {
                    ", url: \"http://127.0.0.1:7000\""
                }
                ("install", "install.wheel") => {
                    ", sha256: 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
                }
                ("install", "install.sha256") => ", wheel: https://example.com/r.whl",
                ("install", "install.pip") => ", find_links: /wheels",
                ("gangs", p) if p != "gangs.mode" => ", mode: atomic",
                _ => "",
            };
            v = format!("{{{}: {v}{extra}}}", parts[i]);
        }
        let v = &v[1..v.len() - 1];
        let extra = match k.path {
            "max_hourly_cost" => ", expander: {prices: {head: 0, cpu: 1}}",
            _ => "",
        };
        format!("{BASE}rayscale: {{{v}{extra}}}\n")
    }

    #[test]
    fn every_key_of_the_table_is_read_and_an_unknown_one_is_refused_with_the_tables_list() {
        let refused: Vec<String> = KEYS
            .iter()
            .filter_map(|k| {
                let value = k.example?;
                let text = block_with(k, value);
                let e = ClusterConfig::from_yaml_str(&text, "keys.yaml").err()?;
                Some(format!(
                    "{}: the reader refuses {value}: {e}\n{text}",
                    k.path
                ))
            })
            .collect();
        assert!(refused.is_empty(), "{}", refused.join("\n"));
        // An unknown key in every block is refused, listing the table's keys (the
        // bridge's are the node-provider adapter's, checked there).
        for block in KEYS
            .iter()
            .filter(|k| k.example.is_none() && k.path != "bridge")
            .map(|k| k.path)
            .chain([""])
        {
            let probe = Key {
                path: if block.is_empty() {
                    "colour"
                } else {
                    Box::leak(format!("{block}.colour").into_boxed_str())
                },
                example: Some("1"),
                ..KEYS[0]
            };
            let text = block_with(&probe, "1");
            let e = ClusterConfig::from_yaml_str(&text, "keys.yaml")
                .expect_err(&format!("{block}.colour is refused"))
                .to_string();
            assert!(
                e.contains(&unknown(block)),
                "{block}: {e}\n(the table's: {})",
                unknown(block)
            );
        }
    }

    #[test]
    fn the_chain_lists_every_built_in_expander() {
        let chain = KEYS
            .iter()
            .find(|k| k.path == "expander.chain")
            .map(|k| k.range);
        assert_eq!(
            chain,
            Some(
                super::super::expander_settings::BUILTIN_NAMES
                    .join(", ")
                    .as_str()
            )
        );
    }

    #[test]
    fn known_lists_a_blocks_own_keys() {
        assert_eq!(known("gangs"), "mode, timeout_s, attempts");
        assert_eq!(known("expander.grpc"), "url, cert, insecure, timeout_s");
        assert!(known("").starts_with("expander, unavailable_type_ttl_s, preemption, bridge"));
        assert!(!known("").contains("timeout_s,"), "{}", known(""));
    }
}
