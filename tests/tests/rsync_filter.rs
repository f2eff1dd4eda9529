//! rayscale's reading of Ray's `rsync_exclude` and `rsync_filter`
//! (`rayscale_core::config::rsync_filter`), which decides what the head's file-mounts
//! server sends a worker, against the real rsync run as Ray's node updater runs it
//! (`rsync -a --exclude PAT ... --filter 'dir-merge,- .gitignore' SRC/ DST/`) on seeded
//! random trees: random names (with spaces, brackets, `!`, `#`), random `.gitignore`
//! files at any depth drawn from the pattern forms rsync's man page describes (anchored,
//! directory-only, `*`, `**`, `?`, classes and POSIX classes, escapes, `/***`, comments;
//! `\n`, `\r` or `\r\n` line ends; now and then a symlink to a file outside the tree), and
//! random excludes (with rsync's old-style `- `, `+ ` and `!`).
//! Every tree must give the same paths as rsync's copy.

#![allow(clippy::unwrap_used)]

use std::path::Path;

use rayscale_core::config::rsync_filter::Filter;
use rayscale_core::expander::SeededRng;

const NAMES: &[&str] = &[
    "a.log",
    "b.py",
    "build",
    "sub",
    "x",
    "keep.txt",
    "d.py",
    "abc",
    "data",
    "[x]",
    "a b",
    "!",
    " x",
    "# c",
    "!keep.txt",
];
const PATTERNS: &[&str] = &[
    "*.log",
    "/build",
    "build/",
    "build",
    "sub/*.py",
    "**/x",
    "a?c",
    "[ab]*",
    "!keep.txt",
    "# c",
    "",
    "sub/",
    "/sub/d.py",
    "x/",
    "*.py",
    "data/**",
    "**/build/*",
    "d.py",
    "/a.log",
    "*/b.py",
    "!",
    "sub/**/x",
    "**/sub",
    "build/***",
    "[!a]*.py",
    "\\[x]",
    "a b",
    " x",
    "*/",
    "/*/b.py",
    "**",
    "data/*/x",
    "[a-c]bc",
    ";c",
    "x/**/x",
    "[[:digit:]]*.log",
    "[]a]*",
    "*[[:space:]]x",
    "sec*",
    "/***",
    "build/***/",
];
const EXCLUDES: &[&str] = &[
    "**/.git",
    "*.log",
    "/build",
    "build/",
    "sub/*.py",
    "x",
    "/x/",
    "**/b.py",
    "sub/**",
    "*/x/*",
    "- secret",
    "+ 1.log",
    "+ keep.txt",
    "!",
];

fn pick<'a>(rng: &mut SeededRng, from: &[&'a str], n: usize) -> Vec<&'a str> {
    let mut left: Vec<&str> = from.to_vec();
    (0..n.min(left.len()))
        .map(|_| left.swap_remove(rng.below(left.len())))
        .collect()
}

/// A `.gitignore`'s text: its lines end in `\n`, or now and then `\r` or `\r\n`.
fn ignore_file(rng: &mut SeededRng) -> String {
    let n = 1 + rng.below(4);
    let end = ["\n", "\n", "\n", "\r", "\r\n"][rng.below(5)];
    pick(rng, PATTERNS, n).join(end) + end
}

/// Writes a `.gitignore` in `dir`: a file, or now and then a symlink to one outside the
/// tree (rsync reads a merge file through a link; the link itself is sent as a link).
fn write_ignore(rng: &mut SeededRng, dir: &Path) {
    let text = ignore_file(rng);
    if rng.next_f64() < 0.25 {
        let shared = dir
            .ancestors()
            .find(|a| a.ends_with("src"))
            .and_then(Path::parent);
        if let Some(base) = shared {
            let target = base.join(format!("shared-{}", rng.next_u64()));
            std::fs::write(&target, text).unwrap();
            std::os::unix::fs::symlink(&target, dir.join(".gitignore")).unwrap();
            return;
        }
    }
    std::fs::write(dir.join(".gitignore"), text).unwrap();
}

fn tree(rng: &mut SeededRng, dir: &Path, depth: usize) {
    std::fs::create_dir_all(dir).unwrap();
    let n = 2 + rng.below(5);
    for name in pick(rng, NAMES, n) {
        let p = dir.join(name);
        if depth < 3 && rng.next_f64() < 0.4 {
            tree(rng, &p, depth + 1);
        } else {
            std::fs::write(&p, "x").unwrap();
        }
    }
    if rng.next_f64() < 0.3 {
        write_ignore(rng, dir);
    }
}

fn listing(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<String>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(root).unwrap().to_string_lossy().to_string());
            // `file_type` does not follow a symlink: a linked `.gitignore` is a link.
            if e.file_type().unwrap().is_dir() {
                walk(root, &p, out);
            }
        }
    }
    let mut out = Vec::new();
    walk(root, root, &mut out);
    out.sort();
    out
}

#[test]
fn what_is_sent_is_what_rays_rsync_sends_on_random_trees() {
    let base = std::env::temp_dir().join(format!("rayscale-rsync-filter-{}", std::process::id()));
    let mut rng = SeededRng::new(0x5eed_2026);
    let cases = 200;
    let mut excluded_somewhere = 0;
    for case in 0..cases {
        let _ = std::fs::remove_dir_all(&base);
        let (src, dst) = (base.join("src"), base.join("dst"));
        tree(&mut rng, &src, 0);
        std::fs::create_dir_all(src.join(".git")).unwrap();
        if rng.next_f64() < 0.7 && !src.join(".gitignore").exists() {
            write_ignore(&mut rng, &src);
        }
        let n = rng.below(3);
        let excludes = pick(&mut rng, EXCLUDES, n);
        std::fs::create_dir_all(&dst).unwrap();
        let mut cmd = std::process::Command::new("rsync");
        cmd.arg("-a");
        for e in &excludes {
            cmd.args(["--exclude", e]);
        }
        cmd.args(["--filter", "dir-merge,- .gitignore"])
            .arg(format!("{}/", src.display()))
            .arg(format!("{}/", dst.display()));
        let out = cmd
            .output()
            .expect("rsync runs (scripts/setup-system.sh installs it)");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let filter = Filter::from_config(&serde_json::json!({
            "rsync_exclude": excludes, "rsync_filter": [".gitignore"]}));
        let mut ours: Vec<String> = filter
            .kept_in(&src)
            .iter()
            .map(|p| String::from_utf8_lossy(p).to_string())
            .collect();
        ours.sort();
        let rsyncs = listing(&dst);
        if rsyncs.len() < listing(&src).len() {
            excluded_somewhere += 1;
        }
        if ours != rsyncs {
            let only = |a: &[String], b: &[String]| -> Vec<String> {
                a.iter().filter(|p| !b.contains(p)).cloned().collect()
            };
            let ignores: Vec<(String, String)> = listing(&src)
                .into_iter()
                .filter(|p| p.ends_with(".gitignore"))
                .map(|p| {
                    let t = std::fs::read_to_string(src.join(&p)).unwrap();
                    (p, t)
                })
                .collect();
            panic!(
                "case {case}: excludes {excludes:?}, ignore files {ignores:?}\n  only rsync sent: {:?}\n  only rayscale sends: {:?}",
                only(&rsyncs, &ours),
                only(&ours, &rsyncs)
            );
        }
    }
    // The trees did exercise the rules.
    assert!(
        excluded_somewhere > cases / 2,
        "{excluded_somewhere} of {cases}"
    );
    let _ = std::fs::remove_dir_all(&base);
}
