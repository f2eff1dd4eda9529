//! A fast reader for the plain YAML that cluster configs and `plan` scenarios are written
//! in: block mappings and sequences, one-line flow collections, plain and one-line quoted
//! scalars, comments. It reads that subset several times faster than libyaml and gives
//! exactly the value libyaml (through `serde_yaml_ng`) gives.
//!
//! Anything outside the subset (anchors, aliases, tags, block scalars, multi-line scalars
//! or flows, directives, document markers, complex keys, tabs, duplicate keys, scalars
//! whose resolution is not plainly a string, bool, null or decimal number, ...) makes
//! [`parse`] return `None`, and the caller reads the text with libyaml instead. So the
//! fast path never changes what a document means; the differential tests in this module
//! hold it to that.

use serde_json::{Map, Number, Value};

/// Reads `text` if it is in the subset; `None` otherwise (read it with libyaml).
pub fn parse(text: &str) -> Option<Value> {
    let mut lines = Vec::new();
    for raw in text.lines() {
        if raw.contains('\t') || raw.contains('\r') {
            return None;
        }
        let content = raw.trim_start_matches(' ');
        let indent = raw.len() - content.len();
        let content = strip_comment(content)?.trim_end_matches(' ');
        if content.is_empty() {
            continue;
        }
        if content.starts_with("---")
            || content.starts_with("...")
            || content.starts_with('%')
            || content.starts_with('?')
        {
            return None;
        }
        lines.push(Line {
            indent,
            text: content,
        });
    }
    if lines.is_empty() {
        return Some(Value::Null);
    }
    let mut p = Parser { lines, i: 0 };
    let indent = p.lines[0].indent;
    let v = p.block(indent)?;
    (p.i == p.lines.len()).then_some(v)
}

#[derive(Debug, Clone, Copy)]
struct Line<'a> {
    indent: usize,
    text: &'a str,
}

struct Parser<'a> {
    lines: Vec<Line<'a>>,
    i: usize,
}

/// The line without its comment (`#` at the start or after a space, outside quotes);
/// `None` when a quote does not close on the line.
fn strip_comment(s: &str) -> Option<&str> {
    let b = s.as_bytes();
    let mut i = 0;
    let mut prev_space = true;
    while i < b.len() {
        match b[i] {
            b'#' if prev_space => return Some(&s[..i]),
            q @ (b'\'' | b'"')
                if prev_space
                    || matches!(b.get(i.wrapping_sub(1)), Some(b'{' | b'[' | b',' | b':')) =>
            {
                i = close_quote(b, i, q)?;
            }
            _ => {}
        }
        prev_space = b[i] == b' ';
        i += 1;
    }
    Some(s)
}

/// Index of the quote closing the one at `start`.
fn close_quote(b: &[u8], start: usize, q: u8) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        if b[i] == q {
            if q == b'\'' && b.get(i + 1) == Some(&b'\'') {
                i += 2;
                continue;
            }
            return Some(i);
        }
        if q == b'"' && b[i] == b'\\' {
            i += 1;
        }
        i += 1;
    }
    None
}

fn is_seq_item(t: &str) -> bool {
    t == "-" || t.starts_with("- ")
}

impl<'a> Parser<'a> {
    fn peek(&self) -> Option<Line<'a>> {
        self.lines.get(self.i).copied()
    }

    /// The block node whose lines start at `indent`.
    fn block(&mut self, indent: usize) -> Option<Value> {
        let l = self.peek()?;
        if l.indent != indent {
            return None;
        }
        if is_seq_item(l.text) {
            self.seq(indent)
        } else {
            self.map(indent)
        }
    }

    /// What follows `key:` with nothing after it on the line.
    fn nested(&mut self, indent: usize) -> Option<Value> {
        match self.peek() {
            Some(n) if n.indent > indent => self.block(n.indent),
            Some(n) if n.indent == indent && is_seq_item(n.text) => self.seq(indent),
            _ => Some(Value::Null),
        }
    }

    /// After an inline value the next line must not be deeper (a multi-line scalar).
    fn end_inline(&self, indent: usize) -> Option<()> {
        match self.peek() {
            Some(n) if n.indent > indent => None,
            _ => Some(()),
        }
    }

    fn map(&mut self, indent: usize) -> Option<Value> {
        let mut m = Map::new();
        while let Some(l) = self.peek() {
            if l.indent < indent {
                break;
            }
            if l.indent > indent || is_seq_item(l.text) {
                return None;
            }
            let (key, rest) = split_key(l.text)?;
            self.i += 1;
            let v = if rest.is_empty() {
                self.nested(indent)?
            } else {
                let v = inline(rest)?;
                self.end_inline(indent)?;
                v
            };
            if m.insert(key, v).is_some() {
                return None;
            }
        }
        Some(Value::Object(m))
    }

    fn seq(&mut self, indent: usize) -> Option<Value> {
        let mut out = Vec::new();
        while let Some(l) = self.peek() {
            if l.indent < indent || (l.indent == indent && !is_seq_item(l.text)) {
                break;
            }
            if l.indent > indent {
                return None;
            }
            let after = &l.text[1..];
            let item = after.trim_start_matches(' ');
            if item.is_empty() {
                self.i += 1;
                out.push(self.nested(indent)?);
                continue;
            }
            if is_seq_item(item) {
                return None;
            }
            let col = indent + 1 + (after.len() - item.len());
            if split_key(item).is_some() && !item.starts_with(['{', '[']) {
                // `- key: value`: a mapping whose keys sit at the item's column.
                self.lines[self.i] = Line {
                    indent: col,
                    text: item,
                };
                out.push(self.map(col)?);
            } else {
                self.i += 1;
                out.push(inline(item)?);
                self.end_inline(indent)?;
            }
        }
        Some(Value::Array(out))
    }
}

/// Splits `key: rest` (or `key:`); `None` when the line is not a simple mapping entry.
fn split_key(t: &str) -> Option<(String, &str)> {
    let b = t.as_bytes();
    let (key, after) = match b.first()? {
        q @ (b'\'' | b'"') => {
            let end = close_quote(b, 0, *q)?;
            (unquote(&t[..=end])?, &t[end + 1..])
        }
        _ => {
            let pos = find_colon(t)?;
            let k = &t[..pos];
            if k.is_empty() || k.ends_with(' ') || starts_with_indicator(k) {
                return None;
            }
            match plain(k)? {
                Value::String(s) => (s, &t[pos..]),
                _ => return None,
            }
        }
    };
    let rest = after.strip_prefix(':')?;
    if !(rest.is_empty() || rest.starts_with(' ')) {
        return None;
    }
    Some((key, rest.trim_start_matches(' ')))
}

/// The first `:` followed by a space or the end of the line.
fn find_colon(t: &str) -> Option<usize> {
    let b = t.as_bytes();
    (0..b.len()).find(|&i| b[i] == b':' && (i + 1 == b.len() || b[i + 1] == b' '))
}

fn starts_with_indicator(s: &str) -> bool {
    s.starts_with([
        '-', '?', ':', ',', '[', ']', '{', '}', '#', '&', '*', '!', '|', '>', '\'', '"', '%', '@',
        '`',
    ])
}

/// An inline value: a one-line flow collection, a quoted scalar or a plain scalar.
fn inline(t: &str) -> Option<Value> {
    match t.as_bytes().first()? {
        b'{' | b'[' => {
            let mut f = Flow {
                s: t.as_bytes(),
                t,
                i: 0,
            };
            let v = f.value()?;
            f.ws();
            (f.i == t.len()).then_some(v)
        }
        q @ (b'\'' | b'"') => {
            let end = close_quote(t.as_bytes(), 0, *q)?;
            (end + 1 == t.len()).then(|| unquote(t).map(Value::String))?
        }
        _ => {
            if starts_with_indicator(t) && !t.starts_with('-') || t.contains(": ") {
                return None;
            }
            if t.starts_with('-') && t.len() > 1 && t.as_bytes()[1] == b' ' {
                return None;
            }
            plain(t)
        }
    }
}

/// A quoted scalar (with its quotes) as text; `None` for escapes outside the common ones.
fn unquote(q: &str) -> Option<String> {
    let inner = &q[1..q.len() - 1];
    if q.starts_with('\'') {
        return Some(inner.replace("''", "'"));
    }
    if !inner.contains('\\') {
        return Some(inner.to_string());
    }
    let mut out = String::with_capacity(inner.len());
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next()? {
            '\\' => out.push('\\'),
            '"' => out.push('"'),
            '/' => out.push('/'),
            'n' => out.push('\n'),
            't' => out.push('\t'),
            _ => return None,
        }
    }
    Some(out)
}

/// A plain scalar resolved as `serde_yaml_ng` resolves it: null, bool, integer, finite
/// float, else string; `None` for the forms this reader leaves to libyaml (hexadecimal,
/// octal and binary integers, integers beyond 64 bits, `.inf` and `.nan`).
fn plain(s: &str) -> Option<Value> {
    match s {
        "" | "~" | "null" | "Null" | "NULL" => return Some(Value::Null),
        "true" | "True" | "TRUE" => return Some(Value::Bool(true)),
        "false" | "False" | "FALSE" => return Some(Value::Bool(false)),
        _ => {}
    }
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    if unsigned.starts_with('.') {
        return None;
    }
    // `0x1f`, `0o17`, `0b101` are integers there; `0b85af...` (a hex id) is a string.
    for (prefix, radix) in [("0x", 16), ("0o", 8), ("0b", 2)] {
        if let Some(rest) = unsigned.strip_prefix(prefix)
            && (rest.starts_with(['+', '-']) || u128::from_str_radix(rest, radix).is_ok())
        {
            return None;
        }
    }
    if !unsigned.is_empty() && unsigned.bytes().all(|b| b.is_ascii_digit()) {
        if let Ok(n) = s.parse::<u64>() {
            return Some(Value::Number(n.into()));
        }
        if let Ok(n) = s.parse::<i64>() {
            return Some(Value::Number(n.into()));
        }
        return None;
    }
    // serde_yaml_ng takes one leading `+` off, then Rust's float parser; only finite
    // values are floats (so `inf`, `nan` and `infinity` stay strings).
    let float_text = match s.strip_prefix('+') {
        Some(u) if u.starts_with(['+', '-']) => None,
        Some(u) => Some(u),
        None => Some(s),
    };
    if let Some(f) = float_text.and_then(|u| u.parse::<f64>().ok())
        && f.is_finite()
    {
        return Number::from_f64(f).map(Value::Number);
    }
    Some(Value::String(s.to_string()))
}

/// A one-line flow collection.
struct Flow<'a> {
    s: &'a [u8],
    t: &'a str,
    i: usize,
}

impl Flow<'_> {
    fn ws(&mut self) {
        while self.s.get(self.i) == Some(&b' ') {
            self.i += 1;
        }
    }

    fn value(&mut self) -> Option<Value> {
        self.ws();
        match *self.s.get(self.i)? {
            b'{' => self.map(),
            b'[' => self.seq(),
            q @ (b'\'' | b'"') => {
                let end = close_quote(self.s, self.i, q)?;
                let v = unquote(&self.t[self.i..=end])?;
                self.i = end + 1;
                Some(Value::String(v))
            }
            _ => {
                let start = self.i;
                while let Some(&c) = self.s.get(self.i) {
                    if matches!(c, b',' | b'}' | b']' | b'{' | b'[')
                        || (c == b':' && self.s.get(self.i + 1).is_none_or(|n| *n == b' '))
                    {
                        break;
                    }
                    self.i += 1;
                }
                let text = self.t[start..self.i].trim_end_matches(' ');
                // Colons and hashes inside flow scalars are left to libyaml.
                if text.is_empty()
                    || text.contains([':', '#'])
                    || starts_with_indicator(text) && !text.starts_with('-')
                {
                    return None;
                }
                plain(text)
            }
        }
    }

    fn map(&mut self) -> Option<Value> {
        self.i += 1;
        let mut m = Map::new();
        loop {
            self.ws();
            if self.s.get(self.i) == Some(&b'}') {
                self.i += 1;
                return Some(Value::Object(m));
            }
            let key = match self.value()? {
                Value::String(k) => k,
                _ => return None,
            };
            self.ws();
            if self.s.get(self.i) != Some(&b':') {
                return None;
            }
            self.i += 1;
            let v = self.value()?;
            if m.insert(key, v).is_some() {
                return None;
            }
            self.ws();
            match self.s.get(self.i)? {
                b',' => self.i += 1,
                b'}' => {}
                _ => return None,
            }
        }
    }

    fn seq(&mut self) -> Option<Value> {
        self.i += 1;
        let mut out = Vec::new();
        loop {
            self.ws();
            if self.s.get(self.i) == Some(&b']') {
                self.i += 1;
                return Some(Value::Array(out));
            }
            out.push(self.value()?);
            self.ws();
            match self.s.get(self.i)? {
                b',' => self.i += 1,
                b']' => {}
                _ => return None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn libyaml(text: &str) -> Option<Value> {
        serde_yaml_ng::from_str::<Value>(text).ok()
    }

    /// The fast reader either declines or agrees with libyaml, key order included.
    fn agrees(text: &str) -> bool {
        match parse(text) {
            None => true,
            Some(v) => {
                let l = libyaml(text);
                assert_eq!(
                    l.as_ref().map(|l| l.to_string()),
                    Some(v.to_string()),
                    "fast reader differs on:\n{text}"
                );
                true
            }
        }
    }

    #[test]
    fn reads_the_common_forms_like_libyaml() {
        let doc = r#"
# a comment
cluster_name: demo   # trailing comment
max_workers: 10
upscaling_speed: 1.5
neg: -3
plus: +1
b64: +zs4vlz==
hexid: 0b8506d52f0f3a32
big: 18446744073709551615
exp: 1e3
ip: 10.0.4.183
zone: us-west-2a
empty:
nothing: ~
yes_is_a_string: yes
flag: True
'quoted key': 'it''s'
"dq": "a \"b\" \\ c"
url: http://example.com/a#frag
provider: {type: aws, region: us-west-2, 'node:1.2.3.4': 1, list: [1, 2.5, x, "y, z"], empty: {}, e2: []}
available_node_types:
  head:
    resources: {CPU: 0}
  cpu:
    resources:
      CPU: 8
    labels: {a: b}
nodes:
- id: 1
  tags: [a, b]
  nested:
    - x
    -   y
    - - deep
- plain
-
  k: v
- {inline: map}
list_at_same_indent:
  - 1
  - 2
"#;
        // The nested "- - deep" is not in the subset: the whole document falls back.
        assert!(parse(doc).is_none());
        let doc = doc.replace("    - - deep\n", "");
        let v = parse(&doc).expect("in the subset");
        assert!(agrees(&doc));
        assert_eq!(v["provider"]["list"][3], "y, z");
        assert_eq!(v["yes_is_a_string"], "yes");
        assert_eq!(v["ip"], "10.0.4.183");
        assert_eq!(v["url"], "http://example.com/a#frag");
    }

    #[test]
    fn declines_what_it_does_not_read() {
        for doc in [
            "a: &x 1\nb: *x\n",
            "a: !tag 1\n",
            "a: |\n  text\n",
            "a: >\n  text\n",
            "a: multi\n  line\n",
            "a: {b: 1,\n  c: 2}\n",
            "---\na: 1\n",
            "a: 0x1f\n",
            "a: .inf\n",
            "a: 99999999999999999999999\n",
            "a: 1\na: 2\n",
            "a:\tb\n",
            "? complex\n: key\n",
            "a: 'open\n  quote'\n",
            "a: \"\\x41\"\n",
        ] {
            assert!(parse(doc).is_none(), "should decline: {doc:?}");
        }
    }

    #[test]
    fn every_shipped_yaml_reads_the_same() {
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        let mut n = 0;
        let mut fast = 0;
        for dir in ["examples", "examples/scenarios", "tests/fixtures"] {
            let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                    let text = std::fs::read_to_string(&p).expect("read");
                    n += 1;
                    fast += usize::from(parse(&text).is_some());
                    assert!(agrees(&text), "{}", p.display());
                }
            }
        }
        assert!(
            n >= 5 && fast * 2 >= n,
            "{fast} of {n} read by the fast path"
        );
    }

    fn scalar() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| Value::Number(n.into())),
            (-1e12f64..1e12).prop_map(|f| Number::from_f64(f).map_or(Value::Null, Value::Number)),
            "[ -~]{0,12}".prop_map(Value::String),
            prop::sample::select(vec![
                "yes", "no", "on", "off", "~", "null", "True", "1e5", "0x10", "007", "-0", "+5",
                "+x", "-.5", "+inf", "Infinity", "1_000", "+-1", "0b12", "0xzz", "0o9", ".5", "1.",
                "inf", "NaN", "a: b", "# c", "- x", "10.0.0.1", "'q'", "\"d\"", "a #b", "{x}",
                "[y]", "&a", "*b", "!t", "|", ">", "%", "@", "`",
            ])
            .prop_map(|s| Value::String(s.to_string())),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        scalar().prop_recursive(4, 48, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
                prop::collection::vec(("[a-z_][a-z0-9_.:/-]{0,8}", inner), 0..5).prop_map(|kv| {
                    let mut m = Map::new();
                    for (k, v) in kv {
                        m.insert(k, v);
                    }
                    Value::Object(m)
                }),
            ]
        })
    }

    /// The differential properties below only mean something if the fast path takes most
    /// generated documents.
    #[test]
    fn the_fast_path_takes_most_generated_documents() {
        use proptest::strategy::ValueTree;
        let mut runner = proptest::test_runner::TestRunner::deterministic();
        let (mut block, mut flow) = (0, 0);
        for _ in 0..400 {
            let v = value().new_tree(&mut runner).expect("tree").current();
            let b = serde_yaml_ng::to_string(&v).expect("emit");
            block += usize::from(parse(&b).is_some());
            let f = format!("root: {}\n", serde_json::to_string(&v).expect("json"));
            flow += usize::from(parse(&f).is_some());
        }
        assert!(
            block > 200 && flow > 200,
            "block {block}/400, flow {flow}/400"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Documents in libyaml's own block style (as `serde_yaml_ng` writes them).
        #[test]
        fn agrees_with_libyaml_on_emitted_documents(v in value()) {
            let text = serde_yaml_ng::to_string(&v).expect("emit");
            prop_assert!(agrees(&text));
        }

        /// The same documents with their flow-friendly leaves written in flow style.
        #[test]
        fn agrees_with_libyaml_on_flow_lines(v in value()) {
            let text = format!("root: {}\n", serde_json::to_string(&v).expect("json"));
            prop_assert!(agrees(&text));
        }
    }
}
