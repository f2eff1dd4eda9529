//! What rsync leaves out of a directory under Ray's `rsync_exclude` and `rsync_filter`
//! (Ray's node updater runs `rsync --exclude PAT ... --filter 'dir-merge,- FILE' ...`), so
//! that the head's file-mounts server sends each worker exactly what Ray's rsync would.
//!
//! The rules, as rsync 3 applies them (its man page, "FILTER RULES" and "PATTERN MATCHING
//! RULES"), and checked against a real rsync on random trees (`tests/tests/rsync_filter.rs`):
//! - every rule excludes (an `--exclude`, and each line of a `dir-merge,-` file), so a path
//!   goes when any rule matches it, and an excluded directory is not entered;
//! - a merge file's rules hold in its directory and below; its lines are patterns whole
//!   (a `+ `, `- ` or `!` is part of the pattern under the `-` modifier), blank lines and
//!   lines starting with `#` or `;` are skipped; the merge file itself is sent;
//! - a pattern ending in `/` matches only a directory; one starting with `/` is anchored
//!   at the top of the transfer (for a merge file's line, at the file's directory);
//! - an unanchored pattern without `/` or `**` matches the last component; one with a `/`
//!   and no `**` matches the path's last components (as many as it has); one with `**`
//!   matches from any component on (from the start only when it begins with `**`, where
//!   a leading `**/` may also match nothing);
//! - `*` matches within a component, `**` across `/`, `?` one character but `/`, `[...]`
//!   a class (`!` or `^` negates, ranges), `\` quotes the next character in a pattern with
//!   wildcards; a trailing `/***` matches the directory and everything in it.
//!
//! Paths are bytes (a file name need not be UTF-8), relative to the transfer's top,
//! joined with `/`. The rules are pure ([`Filter::kept`] takes the listing and reading
//! as functions); [`Filter::kept_in`] is the same walk over a local directory.

use serde_json::Value;

/// One exclude rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// The pattern, without a trailing `/` or `/***`, an anchored one made relative to the
    /// top (without its leading `/`).
    pat: Vec<u8>,
    dir_only: bool,
    anchored: bool,
    /// Ended in `/***`: the directory and everything below it.
    triple: bool,
}

/// Whether `p` has a wildcard (`*`, `?`, `[`).
fn has_wild(p: &[u8]) -> bool {
    p.iter().any(|c| matches!(c, b'*' | b'?' | b'['))
}

/// Whether `p` has `**`.
fn has_wild2(p: &[u8]) -> bool {
    p.windows(2).any(|w| w == b"**")
}

/// rsync's `wildmatch` of pattern `p` against `t`.
pub fn wildmatch(p: &[u8], t: &[u8]) -> bool {
    fn class(p: &[u8], mut j: usize, c: u8) -> Option<(bool, usize)> {
        let neg = matches!(p.get(j), Some(b'!' | b'^'));
        if neg {
            j += 1;
        }
        let mut hit = false;
        let mut first = true;
        while j < p.len() && (first || p[j] != b']') {
            first = false;
            let mut a = p[j];
            if a == b'\\' && j + 1 < p.len() {
                j += 1;
                a = p[j];
            }
            if j + 2 < p.len() && p[j + 1] == b'-' && p[j + 2] != b']' {
                if a <= c && c <= p[j + 2] {
                    hit = true;
                }
                j += 3;
            } else {
                if a == c {
                    hit = true;
                }
                j += 1;
            }
        }
        // Unclosed: no match.
        (j < p.len()).then_some((hit != neg, j + 1))
    }
    fn go(p: &[u8], mut pi: usize, t: &[u8], mut ti: usize) -> bool {
        while pi < p.len() {
            match p[pi] {
                b'\\' if pi + 1 < p.len() => {
                    if t.get(ti) != Some(&p[pi + 1]) {
                        return false;
                    }
                    pi += 2;
                    ti += 1;
                }
                b'?' => {
                    if ti >= t.len() || t[ti] == b'/' {
                        return false;
                    }
                    pi += 1;
                    ti += 1;
                }
                b'*' => {
                    let across = p.get(pi + 1) == Some(&b'*');
                    while pi < p.len() && p[pi] == b'*' {
                        pi += 1;
                    }
                    if pi == p.len() {
                        return across || !t[ti..].contains(&b'/');
                    }
                    let mut k = ti;
                    loop {
                        if go(p, pi, t, k) {
                            return true;
                        }
                        if k >= t.len() || (!across && t[k] == b'/') {
                            return false;
                        }
                        k += 1;
                    }
                }
                b'[' => {
                    let Some(&c) = t.get(ti) else {
                        return false;
                    };
                    match class(p, pi + 1, c) {
                        Some((true, next)) if c != b'/' => {
                            pi = next;
                            ti += 1;
                        }
                        _ => return false,
                    }
                }
                c => {
                    if t.get(ti) != Some(&c) {
                        return false;
                    }
                    pi += 1;
                    ti += 1;
                }
            }
        }
        ti == t.len()
    }
    go(p, 0, t, 0)
}

impl Rule {
    /// The rule of `pattern`, read in directory `base` (relative to the top, empty for
    /// the top itself; an anchored pattern is relative to it). `None` for an empty one.
    pub fn new(pattern: &[u8], base: &[u8]) -> Option<Rule> {
        let mut p = pattern;
        let mut triple = false;
        if let Some(stem) = p.strip_suffix(b"/***") {
            p = stem;
            triple = true;
        }
        let dir_only = !triple && p.ends_with(b"/");
        let p = if dir_only { &p[..p.len() - 1] } else { p };
        let (anchored, p) = match p.strip_prefix(b"/") {
            Some(rest) => (true, rest),
            None => (false, p),
        };
        if p.is_empty() {
            return None;
        }
        let pat = if anchored && !base.is_empty() {
            [base, b"/", p].concat()
        } else {
            p.to_vec()
        };
        Some(Rule {
            pat,
            dir_only,
            anchored,
            triple,
        })
    }

    /// Whether the rule leaves out `path` (relative to the top), a directory or not.
    pub fn matches(&self, path: &[u8], is_dir: bool) -> bool {
        if self.triple {
            let everything = [self.pat.as_slice(), b"/**"].concat();
            return (is_dir && self.one(&self.pat, path)) || self.one(&everything, path);
        }
        if self.dir_only && !is_dir {
            return false;
        }
        self.one(&self.pat, path)
    }

    fn one(&self, pat: &[u8], path: &[u8]) -> bool {
        let is = |p: &[u8], t: &[u8]| if has_wild(p) { wildmatch(p, t) } else { p == t };
        if self.anchored {
            return is(pat, path);
        }
        let wild2 = has_wild2(pat);
        if let Some(rest) = pat.strip_prefix(b"**/")
            && is(rest, path)
        {
            return true;
        }
        let slashes = pat.iter().filter(|c| **c == b'/').count();
        if slashes == 0 && !wild2 {
            let name = path.rsplit(|c| *c == b'/').next().unwrap_or(path);
            return is(pat, name);
        }
        if !wild2 {
            // The path's last `slashes + 1` components.
            let cut = path
                .iter()
                .enumerate()
                .rev()
                .filter(|(_, c)| **c == b'/')
                .nth(slashes)
                .map(|(i, _)| i + 1);
            if path.iter().filter(|c| **c == b'/').count() < slashes {
                return false;
            }
            return is(pat, &path[cut.unwrap_or(0)..]);
        }
        if pat.starts_with(b"**") {
            return wildmatch(pat, path);
        }
        // From any component on.
        std::iter::once(0)
            .chain(
                path.iter()
                    .enumerate()
                    .filter(|(_, c)| **c == b'/')
                    .map(|(i, _)| i + 1),
            )
            .any(|s| wildmatch(pat, &path[s..]))
    }
}

/// The rules of a `dir-merge,-` file's `text`, read in directory `base`.
pub fn merge_rules(text: &[u8], base: &[u8]) -> Vec<Rule> {
    text.split(|c| *c == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l))
        .filter(|l| !l.is_empty() && !l.starts_with(b"#") && !l.starts_with(b";"))
        .filter_map(|l| Rule::new(l, base))
        .collect()
}

/// Lists a directory of the tree (relative to its top, empty for the top): each entry's
/// name and whether it is a directory (symlinks not followed).
pub type ListDir<'a> = dyn FnMut(&[u8]) -> Vec<(Vec<u8>, bool)> + 'a;
/// Reads a merge file of the tree (relative to its top): `None` when there is none.
pub type ReadFile<'a> = dyn FnMut(&[u8]) -> Option<Vec<u8>> + 'a;

/// Ray's `rsync_exclude` patterns and `rsync_filter` merge-file names of a cluster config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    excludes: Vec<Rule>,
    merge_files: Vec<String>,
}

impl Filter {
    /// The filter of `raw` (a cluster config): its `rsync_exclude` and `rsync_filter`.
    pub fn from_config(raw: &Value) -> Filter {
        let strings = |k: &str| -> Vec<String> {
            raw.get(k)
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .collect()
        };
        Filter {
            excludes: strings("rsync_exclude")
                .iter()
                .filter_map(|p| Rule::new(p.as_bytes(), b""))
                .collect(),
            merge_files: strings("rsync_filter"),
        }
    }

    /// Whether the filter leaves anything out at all.
    pub fn is_empty(&self) -> bool {
        self.excludes.is_empty() && self.merge_files.is_empty()
    }

    /// The paths rsync sends of a tree, parents before children, sorted within a
    /// directory: `list(dir)` gives a directory's entries (name, is a directory, not
    /// following symlinks; `dir` empty for the top), `read(file)` a merge file's text
    /// (`None` when there is none).
    pub fn kept(&self, list: &mut ListDir<'_>, read: &mut ReadFile<'_>) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        self.walk(b"", &[], list, read, &mut out);
        out
    }

    /// [`Filter::kept`] of the directory `root` on this machine (symlinks are not
    /// followed; a directory that cannot be listed counts as empty, a merge file that
    /// cannot be read as absent).
    pub fn kept_in(&self, root: &std::path::Path) -> Vec<Vec<u8>> {
        use std::os::unix::ffi::OsStrExt as _;
        let at = |rel: &[u8]| {
            if rel.is_empty() {
                root.to_path_buf()
            } else {
                root.join(std::ffi::OsStr::from_bytes(rel))
            }
        };
        self.kept(
            &mut |dir| {
                std::fs::read_dir(at(dir))
                    .map(|d| {
                        d.flatten()
                            .map(|e| {
                                let is_dir = e.file_type().is_ok_and(|t| t.is_dir());
                                (e.file_name().as_bytes().to_vec(), is_dir)
                            })
                            .collect()
                    })
                    .unwrap_or_default()
            },
            &mut |file| {
                let p = at(file);
                std::fs::symlink_metadata(&p)
                    .is_ok_and(|m| m.is_file())
                    .then(|| std::fs::read(&p).ok())
                    .flatten()
            },
        )
    }

    fn walk(
        &self,
        dir: &[u8],
        inherited: &[Rule],
        list: &mut ListDir<'_>,
        read: &mut ReadFile<'_>,
        out: &mut Vec<Vec<u8>>,
    ) {
        let join = |name: &[u8]| -> Vec<u8> {
            if dir.is_empty() {
                name.to_vec()
            } else {
                [dir, b"/", name].concat()
            }
        };
        let mut rules: Vec<Rule> = Vec::new();
        for f in &self.merge_files {
            if let Some(text) = read(&join(f.as_bytes())) {
                rules.extend(merge_rules(&text, dir));
            }
        }
        rules.extend(inherited.iter().cloned());
        let mut entries = list(dir);
        entries.sort();
        for (name, is_dir) in entries {
            let path = join(&name);
            if self
                .excludes
                .iter()
                .chain(rules.iter())
                .any(|r| r.matches(&path, is_dir))
            {
                continue;
            }
            out.push(path.clone());
            if is_dir {
                self.walk(&path, &rules, list, read, out);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(pat: &str, path: &str, is_dir: bool) -> bool {
        Rule::new(pat.as_bytes(), b"")
            .expect("a rule")
            .matches(path.as_bytes(), is_dir)
    }

    #[test]
    fn patterns_match_as_rsyncs() {
        assert!(wildmatch(b"*.log", b"a.log") && !wildmatch(b"*.log", b"d/a.log"));
        assert!(wildmatch(b"**.log", b"d/a.log"));
        assert!(wildmatch(b"a?c", b"abc") && !wildmatch(b"a?c", b"a/c"));
        assert!(wildmatch(b"[ab]*", b"bx") && !wildmatch(b"[!ab]*", b"bx"));
        assert!(wildmatch(b"[a-c]x", b"cx") && !wildmatch(b"[a-c]x", b"dx"));
        assert!(wildmatch(b"\\[x]", b"[x]") && !wildmatch(b"[x", b"[x"));
        // Last component, last components, anchored, any component on.
        assert!(m("*.log", "a/b/c.log", false));
        assert!(m("sub/*.py", "a/sub/b.py", false) && !m("sub/*.py", "sub/a/b.py", false));
        assert!(m("/build", "build", true) && !m("/build", "x/build", true));
        assert!(m("build/", "x/build", true) && !m("build/", "x/build", false));
        assert!(m("**/.git", ".git", true) && m("**/.git", "a/.git", true));
        assert!(m("data/**", "x/data/a/b", false) && !m("data/**", "data", true));
        assert!(m("build/***", "x/build", true) && m("build/***", "x/build/a", false));
        assert!(!m("build/***", "x/build", false));
        let anchored_in = Rule::new(b"/a.log", b"sub").expect("rule");
        assert!(anchored_in.matches(b"sub/a.log", false) && !anchored_in.matches(b"a.log", false));
        assert_eq!(Rule::new(b"/", b""), None);
    }

    #[test]
    fn merge_files_hold_below_and_excluded_directories_are_not_entered() {
        let tree: &[(&str, &[(&str, bool)])] = &[
            (
                "",
                &[
                    (".gitignore", false),
                    ("a.log", false),
                    ("sub", true),
                    ("build", true),
                ],
            ),
            (
                "sub",
                &[
                    (".gitignore", false),
                    ("c.log", false),
                    ("d.py", false),
                    ("e.py", false),
                ],
            ),
            ("build", &[(".gitignore", false), ("o", false)]),
        ];
        let files: &[(&str, &str)] = &[
            (".gitignore", "*.log\n# c\n\n/build\n"),
            ("sub/.gitignore", "d.py\r\n!e.py\n"),
            ("build/.gitignore", "o\n"),
        ];
        let f = Filter::from_config(&serde_json::json!({
            "rsync_exclude": ["e.py", ""], "rsync_filter": [".gitignore"]}));
        let kept = f.kept(
            &mut |d| {
                tree.iter()
                    .find(|(p, _)| p.as_bytes() == d)
                    .map(|(_, e)| e.iter().map(|(n, b)| (n.as_bytes().to_vec(), *b)).collect())
                    .unwrap_or_default()
            },
            &mut |p| {
                files
                    .iter()
                    .find(|(n, _)| n.as_bytes() == p)
                    .map(|(_, t)| t.as_bytes().to_vec())
            },
        );
        let kept: Vec<String> = kept
            .iter()
            .map(|p| String::from_utf8_lossy(p).to_string())
            .collect();
        assert_eq!(kept, [".gitignore", "sub", "sub/.gitignore"]);
        assert!(Filter::from_config(&serde_json::json!({})).is_empty());
    }
}
