//! What rsync leaves out of a directory under Ray's `rsync_exclude` and `rsync_filter`
//! (Ray's node updater runs `rsync --exclude PAT ... --filter 'dir-merge,- FILE' ...`), so
//! that the head's file-mounts server sends each worker exactly what Ray's rsync would.
//!
//! The rules, as rsync 3 applies them (its man page, "FILTER RULES" and "PATTERN MATCHING
//! RULES"), and checked against a real rsync on random trees (`tests/tests/rsync_filter.rs`):
//! - the `rsync_exclude` rules are tried in order and the first that matches decides (an
//!   `--exclude` argument may carry rsync's old-style prefix: `- ` excludes, `+ `
//!   includes, a lone `!` clears the rules before it); then a path goes when any merge
//!   file's rule matches it; an excluded directory is not entered;
//! - a merge file (read through a symlink) holds in its directory and below; its lines
//!   (ended by `\n` or `\r`, cut at a NUL) are patterns whole (a `+ `, `- ` or `!` is
//!   part of the pattern under the `-` modifier), blank lines and lines starting with `#`
//!   or `;` are skipped; the merge file itself is sent;
//! - a pattern ending in `/` matches only a directory; one starting with `/` is anchored
//!   at the top of the transfer (for a merge file's line, at the file's directory);
//! - an unanchored pattern without `/` or `**` matches the last component; one with a `/`
//!   and no `**` matches the path's last components (as many as it has); one with `**`
//!   matches from any component on (from the start only when it begins with `**`, where
//!   a leading `**/` may also match nothing);
//! - `*` matches within a component, `**` across `/`, `?` one character but `/`, `[...]`
//!   a class (`!` or `^` negates, ranges, POSIX classes such as `[:digit:]`), `\` quotes
//!   the next character in a pattern with wildcards; a trailing `/***` matches the
//!   directory and everything in it. The match gives up as rsync's does (when the text
//!   runs out, or only an outer `**` could still match), so no pattern makes it slow.
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

/// What one step of [`wildmatch`] found: rsync's `TRUE`, `FALSE`, `ABORT_ALL` (no match
/// is possible from here: the text ran out) and `ABORT_TO_STARSTAR` (only a `**` further
/// out may still match), which keep the search linear where plain backtracking is not.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Wild {
    Match,
    NoMatch,
    AbortAll,
    AbortToStarStar,
}

/// Whether byte `c` is in POSIX class `name` (ASCII, as rsync's `ISALNUM` and the like);
/// `None` for a name that is not a class.
fn posix_class(name: &[u8], c: u8) -> Option<bool> {
    Some(match name {
        b"alnum" => c.is_ascii_alphanumeric(),
        b"alpha" => c.is_ascii_alphabetic(),
        b"blank" => c == b' ' || c == b'\t',
        b"cntrl" => c.is_ascii_control(),
        b"digit" => c.is_ascii_digit(),
        b"graph" => c.is_ascii_graphic(),
        b"lower" => c.is_ascii_lowercase(),
        b"print" => c.is_ascii_graphic() || c == b' ',
        b"punct" => c.is_ascii_punctuation(),
        b"space" => c.is_ascii_whitespace() || c == 0x0b,
        b"upper" => c.is_ascii_uppercase(),
        b"xdigit" => c.is_ascii_hexdigit(),
        _ => return None,
    })
}

/// rsync's `wildmatch` (its `lib/wildmatch.c`, read, not copied) of pattern `p` against
/// `t`: `*` within a component, `**` across `/`, `?`, `[...]` with ranges, `!`/`^` and
/// POSIX classes, `\` quoting.
pub fn wildmatch(p: &[u8], t: &[u8]) -> bool {
    fn class(p: &[u8], pi: &mut usize, c: u8) -> Option<bool> {
        // `*pi` is just past the `[`; on return, just past the `]`.
        let mut j = *pi;
        let negated = matches!(p.get(j), Some(b'!' | b'^'));
        if negated {
            j += 1;
        }
        let mut matched = false;
        let mut prev: Option<u8> = None;
        let mut first = true;
        loop {
            let ch = *p.get(j)?;
            if !first && ch == b']' {
                break;
            }
            first = false;
            let mut this = Some(ch);
            if ch == b'\\' {
                j += 1;
                let q = *p.get(j)?;
                if c == q {
                    matched = true;
                }
                this = Some(q);
            } else if ch == b'-' && prev.is_some() && p.get(j + 1).is_some_and(|n| *n != b']') {
                j += 1;
                let mut hi = p[j];
                if hi == b'\\' {
                    j += 1;
                    hi = *p.get(j)?;
                }
                if prev.is_some_and(|lo| lo <= c && c <= hi) {
                    matched = true;
                }
                this = None;
            } else if ch == b'[' && p.get(j + 1) == Some(&b':') {
                let s = j + 2;
                let close = p[s..].iter().position(|b| *b == b']').map(|k| s + k)?;
                if close > s && p[close - 1] == b':' {
                    if posix_class(&p[s..close - 1], c)? {
                        matched = true;
                    }
                    j = close;
                    this = None;
                } else if c == b'[' {
                    // No `:]`: a plain `[` in the set.
                    matched = true;
                }
            } else if c == ch {
                matched = true;
            }
            prev = this;
            j += 1;
        }
        *pi = j + 1;
        Some(matched != negated && c != b'/')
    }
    fn go(p: &[u8], mut pi: usize, t: &[u8], mut ti: usize) -> Wild {
        while pi < p.len() {
            let pc = p[pi];
            if ti >= t.len() && pc != b'*' {
                return Wild::AbortAll;
            }
            match pc {
                b'\\' if pi + 1 < p.len() => {
                    if t[ti] != p[pi + 1] {
                        return Wild::NoMatch;
                    }
                    pi += 2;
                    ti += 1;
                }
                b'?' => {
                    if t[ti] == b'/' {
                        return Wild::NoMatch;
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
                        return if across || !t[ti..].contains(&b'/') {
                            Wild::Match
                        } else {
                            Wild::NoMatch
                        };
                    }
                    while ti < t.len() {
                        match go(p, pi, t, ti) {
                            Wild::NoMatch => {
                                if !across && t[ti] == b'/' {
                                    return Wild::AbortToStarStar;
                                }
                            }
                            Wild::AbortToStarStar if across => {}
                            found => return found,
                        }
                        ti += 1;
                    }
                    return Wild::AbortAll;
                }
                b'[' => {
                    let mut next = pi + 1;
                    match class(p, &mut next, t[ti]) {
                        None => return Wild::AbortAll,
                        Some(false) => return Wild::NoMatch,
                        Some(true) => {
                            pi = next;
                            ti += 1;
                        }
                    }
                }
                c => {
                    if t[ti] != c {
                        return Wild::NoMatch;
                    }
                    pi += 1;
                    ti += 1;
                }
            }
        }
        if ti == t.len() {
            Wild::Match
        } else {
            Wild::NoMatch
        }
    }
    go(p, 0, t, 0) == Wild::Match
}

impl Rule {
    /// The rule of `pattern`, read in directory `base` (relative to the top, empty for
    /// the top itself; an anchored pattern is relative to it). `None` for an empty one.
    pub fn new(pattern: &[u8], base: &[u8]) -> Option<Rule> {
        let mut p = pattern;
        let dir_only = p.len() > 1 && p.ends_with(b"/");
        if dir_only {
            p = &p[..p.len() - 1];
        }
        let mut triple = false;
        if let Some(stem) = p.strip_suffix(b"/***") {
            p = stem;
            triple = true;
        }
        let (anchored, p) = match p.strip_prefix(b"/") {
            Some(rest) => (true, rest),
            // `/***` alone: everything.
            None if triple && p.is_empty() => (true, p),
            None => (false, p),
        };
        if p.is_empty() && !triple {
            return None;
        }
        let pat = if p.is_empty() {
            // `/***`: the merge file's directory and all in it.
            base.to_vec()
        } else if anchored && !base.is_empty() {
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
        if self.dir_only && !is_dir {
            return false;
        }
        if self.triple {
            if self.pat.is_empty() {
                return true;
            }
            let everything = [self.pat.as_slice(), b"/**"].concat();
            return (is_dir && self.one(&self.pat, path)) || self.one(&everything, path);
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
    // rsync ends a line at `\n` or `\r`, and reads it as a C string (to a NUL).
    text.split(|c| *c == b'\n' || *c == b'\r')
        .map(|l| l.split(|c| *c == 0).next().unwrap_or(l))
        .filter(|l| !l.is_empty() && !l.starts_with(b"#") && !l.starts_with(b";"))
        .filter_map(|l| Rule::new(l, base))
        .collect()
}

/// The strings of the list `key` of a cluster config (`rsync_exclude`, `rsync_filter`).
fn strings(raw: &Value, key: &str) -> Vec<String> {
    raw.get(key)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .map(str::to_string)
        .collect()
}

/// rsync's arguments for a cluster config's `rsync_exclude` and `rsync_filter`, as Ray's
/// command runner gives them: `--exclude PAT` each, then `--filter 'dir-merge,- FILE'`
/// each.
pub fn rsync_args(raw: &Value) -> Vec<String> {
    let mut out = Vec::new();
    for p in strings(raw, "rsync_exclude") {
        out.extend(["--exclude".to_string(), p]);
    }
    for f in strings(raw, "rsync_filter") {
        out.extend(["--filter".to_string(), format!("dir-merge,- {f}")]);
    }
    out
}

/// Lists a directory of the tree (relative to its top, empty for the top): each entry's
/// name and whether it is a directory (symlinks not followed).
pub type ListDir<'a> = dyn FnMut(&[u8]) -> Vec<(Vec<u8>, bool)> + 'a;
/// Reads a merge file of the tree (relative to its top): `None` when there is none.
pub type ReadFile<'a> = dyn FnMut(&[u8]) -> Option<Vec<u8>> + 'a;

/// Ray's `rsync_exclude` patterns and `rsync_filter` merge-file names of a cluster config.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// `rsync_exclude`, in order: each rule and whether it includes (an old-style `+ `
    /// prefix) rather than excludes.
    excludes: Vec<(bool, Rule)>,
    merge_files: Vec<String>,
}

impl Filter {
    /// The filter of `raw` (a cluster config): its `rsync_exclude` and `rsync_filter`.
    pub fn from_config(raw: &Value) -> Filter {
        let strings = |k: &str| -> Vec<String> {
            strings(raw, k)
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect()
        };
        // rsync reads `--exclude` arguments with the old-style prefixes: `- ` excludes,
        // `+ ` includes, a lone `!` clears the rules before it.
        let mut excludes = Vec::new();
        for p in strings("rsync_exclude") {
            let (include, pat) = if p == "!" {
                excludes.clear();
                continue;
            } else if let Some(rest) = p.strip_prefix("+ ") {
                (true, rest)
            } else if let Some(rest) = p.strip_prefix("- ") {
                (false, rest)
            } else {
                (false, p.as_str())
            };
            if let Some(r) = Rule::new(pat.as_bytes(), b"") {
                excludes.push((include, r));
            }
        }
        Filter {
            excludes,
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
                // rsync opens a merge file through a symlink.
                std::fs::metadata(&p)
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
            // The first `rsync_exclude` rule that matches decides; then the merge files'.
            let decided = self
                .excludes
                .iter()
                .find(|(_, r)| r.matches(&path, is_dir))
                .map(|(include, _)| !include);
            let excluded =
                decided.unwrap_or_else(|| rules.iter().any(|r| r.matches(&path, is_dir)));
            if excluded {
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
        // POSIX classes, `]` first in a set, an unclosed class.
        assert!(wildmatch(b"[[:digit:]]*.log", b"1.log") && !wildmatch(b"[[:digit:]]*", b"a"));
        assert!(wildmatch(b"[]a]x", b"]x") && !wildmatch(b"[[:nope:]]", b"a"));
        assert!(wildmatch(b"[[:x]", b"[") && !wildmatch(b"[ab", b"a"));
        // rsync's aborts keep a pattern rsync finishes fast from backtracking for ever.
        let many = [b"*a".repeat(12), b"b".to_vec()].concat();
        assert!(!wildmatch(&many, &[b'a'; 200]));
        assert!(!wildmatch(b"**/**/**/**/**/**/**/**/x", &b"a/".repeat(60)));
        // Everything, and a directory-only `/***`.
        assert!(m("/***", "a/b", false) && m("/***", "a", true));
        assert!(m("build/***/", "x/build", true) && !m("build/***/", "x/build/o", false));
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
            ("sub/.gitignore", "d.py\r!e.py\0junk\n"),
            ("build/.gitignore", "o\n"),
        ];
        let f = Filter::from_config(&serde_json::json!({
            "rsync_exclude": ["e.py", ""], "rsync_filter": [".gitignore"]}));
        // Old-style prefixes: the first rule that matches decides; `!` clears.
        let g = Filter::from_config(&serde_json::json!({
            "rsync_exclude": ["+ c.log", "- d.py", "!", "+ a.log", "- e.py"],
            "rsync_filter": [".gitignore"]}));
        assert_eq!(g.excludes.len(), 2);
        assert!(g.excludes[0].0 && !g.excludes[1].0);
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
