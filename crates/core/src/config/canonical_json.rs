//! Canonical JSON as Python writes it (`json.dumps(v, sort_keys=True)`, with or without
//! `separators=(",", ":")`, and `repr(float)`): what Ray hashes a launch config from
//! (`hash_launch_conf`, default separators), and what `rayscale plan` prints (compact), so
//! both match Ray byte for byte.

use std::fmt::Write as _;

use serde_json::Value;

/// Writes `f` as Python's `repr(float)` does (shortest round trip; exponent form below
/// 1e-4 and from 1e16).
pub fn python_float(f: f64, out: &mut String) {
    if f.is_nan() {
        out.push_str("NaN");
        return;
    }
    if f.is_infinite() {
        out.push_str(if f > 0.0 { "Infinity" } else { "-Infinity" });
        return;
    }
    if f == 0.0 {
        out.push_str(if f.is_sign_negative() { "-0.0" } else { "0.0" });
        return;
    }
    let sci = format!("{f:e}"); // e.g. "-1.25e-7", shortest digits
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let neg = mantissa.starts_with('-');
    let digits: String = mantissa.chars().filter(|c| c.is_ascii_digit()).collect();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp >= 0 {
            let int_len = exp as usize + 1;
            if digits.len() <= int_len {
                out.push_str(&digits);
                out.push_str(&"0".repeat(int_len - digits.len()));
                out.push_str(".0");
            } else {
                out.push_str(&digits[..int_len]);
                out.push('.');
                out.push_str(&digits[int_len..]);
            }
        } else {
            out.push_str("0.");
            out.push_str(&"0".repeat((-exp - 1) as usize));
            out.push_str(&digits);
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
}

fn python_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            // Python's `ensure_ascii` keeps only ' ' to '~' as they are (DEL too is escaped).
            c if (c as u32) < 0x20 || (c as u32) >= 0x7f => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Writes `v` as Python's `json.dumps(v, sort_keys=True, separators=(",", ":"))` does.
pub fn python_json(v: &Value, out: &mut String) {
    write_json(v, out, ",", ":");
}

/// Writes `v` as Python's `json.dumps(v, sort_keys=True)` does (separators `", "` and
/// `": "`).
pub fn python_json_spaced(v: &Value, out: &mut String) {
    write_json(v, out, ", ", ": ");
}

fn write_json(v: &Value, out: &mut String, item: &str, key: &str) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                let _ = write!(out, "{i}");
            } else if let Some(u) = n.as_u64() {
                let _ = write!(out, "{u}");
            } else {
                python_float(n.as_f64().unwrap_or(0.0), out);
            }
        }
        Value::String(s) => python_string(s, out),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(item);
                }
                write_json(x, out, item, key);
            }
            out.push(']');
        }
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.iter().enumerate() {
                if i > 0 {
                    out.push_str(item);
                }
                python_string(k, out);
                out.push_str(key);
                write_json(&m[k.as_str()], out, item, key);
            }
            out.push('}');
        }
    }
}
