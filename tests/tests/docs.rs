//! The documentation (`docs/`, an mdBook, and the README) held to the code:
//! - every fenced `yaml` block that is a cluster config loads through the config reader,
//!   and every `rayscale:` block loads inside a small cluster config (a block that is
//!   only part of a config says so with a first line `# part of a cluster config`);
//! - every relative link points at a file that exists, and the book's `SUMMARY.md` lists
//!   every page;
//! - the command-line reference is what the binary's `--help` prints (regenerate it with
//!   `RAYSCALE_BLESS=1 cargo test -p rayscale-tests --test docs`);
//! - the README stays short (at most 200 lines).

use std::path::{Path, PathBuf};
use std::process::Command;

use rayscale_core::config::ClusterConfig;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .to_path_buf()
}

/// Every Markdown file of the book, and the README.
fn pages() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for p in entries {
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "md") {
                out.push(p);
            }
        }
    }
    let mut out = vec![root().join("README.md")];
    walk(&root().join("docs/src"), &mut out);
    out
}

fn rel(p: &Path) -> String {
    p.strip_prefix(root()).unwrap_or(p).display().to_string()
}

/// The fenced blocks of `text` in language `lang`: (line of the fence, body).
fn blocks(text: &str, lang: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut open: Option<(usize, String, usize)> = None;
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        match &mut open {
            None => {
                if let Some(info) = trimmed.strip_prefix("```") {
                    open = Some((n + 1, info.trim().to_string(), indent));
                    if info.trim() == lang {
                        out.push((n + 1, String::new()));
                    }
                }
            }
            Some((_, info, ind)) => {
                if trimmed.starts_with("```") {
                    open = None;
                } else if info == lang {
                    let body = &mut out.last_mut().expect("open block").1;
                    body.push_str(line.get(*ind..).unwrap_or(trimmed));
                    body.push('\n');
                }
            }
        }
    }
    out
}

/// The node types a `rayscale:` block of the docs may name, with their resources.
const TYPES: &[(&str, &str)] = &[
    ("cpu", "{CPU: 4}"),
    ("cpu4", "{CPU: 4}"),
    ("cpu16", "{CPU: 16}"),
    ("cpu-large", "{CPU: 32}"),
    ("gpu", "{CPU: 8, GPU: 1}"),
    ("spot", "{CPU: 4}"),
    ("spot-a", "{CPU: 4}"),
    ("spot-b", "{CPU: 4}"),
];

/// Whether `name` occurs in `text` as a whole node type name.
fn names(text: &str, name: &str) -> bool {
    let part = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_';
    text.match_indices(name).any(|(i, _)| {
        !text[..i].chars().next_back().is_some_and(part)
            && !text[i + name.len()..].chars().next().is_some_and(part)
    })
}

/// A small cluster around a `rayscale:` block: a head and the node types the block
/// names (`cpu` when it names none).
fn cluster_around(block: &str) -> String {
    let mut types: Vec<&(&str, &str)> = TYPES.iter().filter(|(n, _)| names(block, n)).collect();
    if types.is_empty() {
        types.push(&TYPES[0]);
    }
    let mut out = String::from(
        "cluster_name: docs\nmax_workers: 20\nhead_node_type: head\n\
         provider: {type: local_processes}\navailable_node_types:\n  \
         head: {resources: {CPU: 0}, node_config: {}}\n",
    );
    for (n, r) in types {
        out.push_str(&format!(
            "  {n}: {{resources: {r}, max_workers: 10, node_config: {{}}}}\n"
        ));
    }
    out + block
}

#[test]
fn every_cluster_config_and_rayscale_block_in_the_docs_loads() {
    let mut loaded = 0;
    let mut failures = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        for (line, body) in blocks(&text, "yaml") {
            let first = body.lines().next().unwrap_or("");
            if first.starts_with("# part of") {
                continue;
            }
            let top: Vec<&str> = body
                .lines()
                .filter(|l| !l.starts_with([' ', '#', '-']) && !l.trim().is_empty())
                .filter_map(|l| l.split(':').next())
                .collect();
            let config = if top.contains(&"available_node_types") {
                body.clone()
            } else if top == ["rayscale"] {
                cluster_around(&body)
            } else {
                failures.push(format!(
                    "{}:{line}: a yaml block that is neither a cluster config nor a \
                     `rayscale:` block (top-level keys {top:?}); start it with \
                     `# part of a cluster config` if it is a part",
                    rel(&page)
                ));
                continue;
            };
            match ClusterConfig::from_yaml_str(&config, &format!("{}:{line}", rel(&page))) {
                Ok(_) => loaded += 1,
                // The reader's error names the page and line (given as the source).
                Err(e) => failures.push(e.to_string()),
            }
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(
        loaded >= 8,
        "only {loaded} yaml blocks loaded: is the book there?"
    );
}

/// `](target)` links of `text` that are not URLs or in-page anchors.
fn relative_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_code = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let Some(end) = rest.find(')') else { break };
            let target = &rest[..end];
            rest = &rest[end..];
            if target.starts_with("http://")
                || target.starts_with("https://")
                || target.starts_with('#')
                || target.starts_with("mailto:")
            {
                continue;
            }
            out.push(target.split('#').next().unwrap_or("").to_string());
        }
    }
    out
}

#[test]
fn every_relative_link_points_at_a_file_and_the_summary_lists_every_page() {
    let mut broken = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        let dir = page.parent().expect("page dir");
        for target in relative_links(&text) {
            if !dir.join(&target).exists() {
                broken.push(format!("{}: {target}", rel(&page)));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "links to nothing:\n{}",
        broken.join("\n")
    );
    let src = root().join("docs/src");
    let summary = std::fs::read_to_string(src.join("SUMMARY.md")).expect("SUMMARY.md");
    let listed: Vec<PathBuf> = relative_links(&summary)
        .iter()
        .map(|t| src.join(t))
        .collect();
    let unlisted: Vec<String> = pages()
        .into_iter()
        .filter(|p| p.starts_with(&src) && !p.ends_with("SUMMARY.md"))
        .filter(|p| !listed.contains(p))
        .map(|p| rel(&p))
        .collect();
    assert!(
        unlisted.is_empty(),
        "pages the book's SUMMARY.md does not list: {unlisted:?}"
    );
}

#[test]
fn the_readme_is_short() {
    let n = std::fs::read_to_string(root().join("README.md"))
        .expect("README")
        .lines()
        .count();
    assert!(
        n <= 200,
        "README.md has {n} lines: the detail goes into docs/"
    );
}

/// Checks that the generated page `docs/src/<page>` is `doc` (made from `what`), or
/// writes it with `RAYSCALE_BLESS` set.
fn generated(page: &str, doc: &str, what: &str) {
    let path = root().join("docs/src").join(page);
    if std::env::var_os("RAYSCALE_BLESS").is_some() {
        std::fs::write(&path, doc).expect("write a generated page");
        return;
    }
    let now = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        now == doc,
        "docs/src/{page} is not {what}: regenerate it with RAYSCALE_BLESS=1 cargo test -p \
         rayscale-tests --test docs"
    );
}

/// The subcommands `rayscale --help` lists.
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

fn help_of(args: &[&str]) -> String {
    let out = Command::new(rayscale_tests::workspace_bin("rayscale"))
        .args(args)
        .arg("--help")
        .env("COLUMNS", "100")
        .output()
        .expect("rayscale runs");
    assert!(out.status.success(), "rayscale {args:?} --help failed");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

#[test]
fn the_command_line_reference_is_what_the_binary_prints() {
    let top = help_of(&[]);
    let mut doc = String::from(
        "# Command line\n\nGenerated from `rayscale --help` and each command's `--help` \
         (`RAYSCALE_BLESS=1 cargo test -p rayscale-tests --test docs` rewrites it; the \
         test fails when it differs).\n\n```text\n",
    );
    doc.push_str(&top);
    doc.push_str("```\n");
    let commands = subcommands(&top);
    assert!(commands.len() >= 8, "{commands:?}");
    for c in &commands {
        doc.push_str(&format!("\n## rayscale {c}\n\n```text\n"));
        doc.push_str(&help_of(&[c]));
        doc.push_str("```\n");
    }
    generated("reference/cli.md", &doc, "what `rayscale --help` prints");
}

#[test]
fn the_config_reference_is_the_key_table() {
    let doc = rayscale_core::config::keys::reference_markdown();
    generated(
        "reference/config.md",
        &doc,
        "the key table of crates/core/src/config/keys.rs",
    );
}

/// Splits a shell line into words (plain words only: the docs' examples quote nothing).
fn words(line: &str) -> Vec<String> {
    line.split('#')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_console_examples_of_rayscale_plan_print_what_the_docs_show() {
    let mut checked = 0;
    let mut wrong = Vec::new();
    for page in pages() {
        let text = std::fs::read_to_string(&page).expect("page");
        for (line, body) in blocks(&text, "sh") {
            let lines: Vec<&str> = body.lines().collect();
            for (i, l) in lines.iter().enumerate() {
                let Some(cmd) = l.strip_prefix("$ rayscale plan ") else {
                    continue;
                };
                let want: Vec<&str> = lines[i + 1..]
                    .iter()
                    .take_while(|x| !x.starts_with("$ "))
                    .copied()
                    .collect();
                let out = Command::new(rayscale_tests::workspace_bin("rayscale"))
                    .arg("plan")
                    .args(words(cmd))
                    .current_dir(root())
                    .output()
                    .expect("rayscale runs");
                let got = String::from_utf8_lossy(&out.stdout);
                let got: Vec<&str> = got.lines().collect();
                if got != want {
                    wrong.push(format!(
                        "{}:{}: `rayscale plan {cmd}` printed {got:?}, the docs show {want:?}",
                        rel(&page),
                        line + i + 1
                    ));
                }
                checked += 1;
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert!(checked >= 3, "only {checked} console examples found");
}
