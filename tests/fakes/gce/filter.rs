//! The `filter` grammar of Compute Engine's list methods, as the REST reference gives it
//! (`instances.list`, parameter `filter`): `field = value`, `field != value`, `field:*`
//! (presence), `AND`, `OR`, `NOT` and parentheses, over `status`, `name` and
//! `labels.<key>`.

use serde_json::Value;

/// A parsed list filter.
#[derive(Debug, Clone, PartialEq)]
pub enum Filter {
    /// `field = value` (`!=` when `negated`).
    Eq(String, String, bool),
    /// `field:*`.
    Has(String),
    /// `NOT f`.
    Not(Box<Filter>),
    /// `a AND b AND ...`.
    And(Vec<Filter>),
    /// `a OR b OR ...`.
    Or(Vec<Filter>),
}

impl Filter {
    /// Whether instance `j` matches.
    pub fn eval(&self, j: &Value) -> bool {
        let field = |f: &str| -> Option<String> {
            match f.strip_prefix("labels.") {
                Some(k) => j.get("labels")?.get(k)?.as_str().map(str::to_string),
                None => j.get(f)?.as_str().map(str::to_string),
            }
        };
        match self {
            Filter::Eq(f, v, neg) => (field(f).as_deref() == Some(v.as_str())) != *neg,
            Filter::Has(f) => field(f).is_some(),
            Filter::Not(x) => !x.eval(j),
            Filter::And(xs) => xs.iter().all(|x| x.eval(j)),
            Filter::Or(xs) => xs.iter().any(|x| x.eval(j)),
        }
    }
}

/// Parses the `filter` grammar of list methods.
pub fn parse_filter(s: &str) -> Result<Filter, String> {
    let toks = tokenize(s)?;
    let mut p = Parser { toks, at: 0 };
    let f = p.or()?;
    if p.at != p.toks.len() {
        return Err(format!("unexpected {:?}", p.toks[p.at]));
    }
    Ok(f)
}

fn tokenize(s: &str) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    let mut chars = s.chars().peekable();
    while let Some(&c) = chars.peek() {
        match c {
            ' ' | '\t' | '\n' => {
                chars.next();
            }
            '(' | ')' | ':' | '*' => {
                out.push(c.to_string());
                chars.next();
            }
            '=' => {
                out.push("=".into());
                chars.next();
            }
            '!' => {
                chars.next();
                if chars.next() != Some('=') {
                    return Err("'!' without '='".into());
                }
                out.push("!=".into());
            }
            '"' => {
                chars.next();
                let mut w = String::new();
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some(c) => w.push(c),
                        None => return Err("unterminated string".into()),
                    }
                }
                out.push(format!("\"{w}"));
            }
            _ => {
                let mut w = String::new();
                while let Some(&c) = chars.peek() {
                    if c.is_whitespace() || "()=!:*\"".contains(c) {
                        break;
                    }
                    w.push(c);
                    chars.next();
                }
                out.push(w);
            }
        }
    }
    Ok(out)
}

struct Parser {
    toks: Vec<String>,
    at: usize,
}

impl Parser {
    fn peek(&self) -> Option<&str> {
        self.toks.get(self.at).map(String::as_str)
    }

    fn next(&mut self) -> Result<String, String> {
        let t = self.toks.get(self.at).cloned().ok_or("unexpected end")?;
        self.at += 1;
        Ok(t)
    }

    fn or(&mut self) -> Result<Filter, String> {
        let mut xs = vec![self.and()?];
        while self.peek() == Some("OR") {
            self.at += 1;
            xs.push(self.and()?);
        }
        Ok(if xs.len() == 1 {
            xs.remove(0)
        } else {
            Filter::Or(xs)
        })
    }

    fn and(&mut self) -> Result<Filter, String> {
        let mut xs = vec![self.unary()?];
        loop {
            match self.peek() {
                Some("AND") => {
                    self.at += 1;
                    xs.push(self.unary()?);
                }
                // Juxtaposition is AND too.
                Some(t) if t != "OR" && t != ")" => xs.push(self.unary()?),
                _ => break,
            }
        }
        Ok(if xs.len() == 1 {
            xs.remove(0)
        } else {
            Filter::And(xs)
        })
    }

    fn unary(&mut self) -> Result<Filter, String> {
        if self.peek() == Some("NOT") {
            self.at += 1;
            return Ok(Filter::Not(Box::new(self.unary()?)));
        }
        if self.peek() == Some("(") {
            self.at += 1;
            let f = self.or()?;
            if self.next()? != ")" {
                return Err("missing ')'".into());
            }
            return Ok(f);
        }
        let field = self.next()?;
        match self.next()?.as_str() {
            op @ ("=" | "!=") => {
                let v = self.next()?;
                let v = v.strip_prefix('"').map(str::to_string).unwrap_or(v);
                Ok(Filter::Eq(field, v, op == "!="))
            }
            ":" => {
                if self.next()? != "*" {
                    return Err("only 'field:*' is supported".into());
                }
                Ok(Filter::Has(field))
            }
            other => Err(format!("unexpected {other:?} after {field:?}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn rays_filter_parses_and_matches() {
        let f = parse_filter(
            "((labels.ray-node-kind = worker)) AND ((status = RUNNING) OR (status = STAGING)) \
             AND (labels.ray-cluster-name = demo) AND (NOT labels.tpu_cores:*)",
        )
        .expect("parses");
        let j = json!({"status": "RUNNING", "labels": {"ray-node-kind": "worker", "ray-cluster-name": "demo"}});
        assert!(f.eval(&j));
        let j2 = json!({"status": "RUNNING", "labels": {"ray-node-kind": "worker", "ray-cluster-name": "demo", "tpu_cores": "8"}});
        assert!(!f.eval(&j2));
        let j3 = json!({"status": "TERMINATED", "labels": {"ray-node-kind": "worker", "ray-cluster-name": "demo"}});
        assert!(!f.eval(&j3));
        assert!(parse_filter("(status = ").is_err());
    }
}
