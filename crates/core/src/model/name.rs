//! Shared names: a resource's name, held once and shared by every map that names it.
//!
//! A 10,000-node cluster names the same handful of resources (`CPU`, `memory`, ...) in every
//! node's total and available maps, and each iteration copies those maps into the scheduler's
//! request: with `String` keys that is an allocation per entry per copy. A `Name` is an
//! `Arc<str>`: a copy is a reference count, and a reader can hand out one `Name` per distinct
//! name it reads (see the GCS client's frame reader).

use std::borrow::Borrow;
use std::fmt;
use std::ops::Deref;
use std::sync::Arc;

/// An immutable, cheaply cloned string (compares, hashes and orders as its `str`).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Name(Arc<str>);

impl Name {
    /// The name as a `str`.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// True when both hold the very same text (one is a copy of the other).
    pub fn shares_text_with(&self, other: &Name) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Default for Name {
    fn default() -> Self {
        Name::from("")
    }
}

impl Deref for Name {
    type Target = str;
    fn deref(&self) -> &str {
        &self.0
    }
}

impl Borrow<str> for Name {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl From<&str> for Name {
    fn from(s: &str) -> Self {
        Name(Arc::from(s))
    }
}

impl From<String> for Name {
    fn from(s: String) -> Self {
        Name(Arc::from(s))
    }
}

impl PartialEq<str> for Name {
    fn eq(&self, o: &str) -> bool {
        &*self.0 == o
    }
}

impl PartialEq<&str> for Name {
    fn eq(&self, o: &&str) -> bool {
        &*self.0 == *o
    }
}

impl PartialEq<String> for Name {
    fn eq(&self, o: &String) -> bool {
        &*self.0 == o.as_str()
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&*self.0, f)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_name_behaves_as_its_str() {
        let a = Name::from("CPU");
        let b = a.clone();
        assert!(a.shares_text_with(&b), "a copy shares the text");
        assert!(!a.shares_text_with(&Name::from("CPU")));
        assert_eq!(a, "CPU");
        assert_eq!(a, "CPU".to_string());
        assert_ne!(a, Name::from("GPU"));
        let mut sorted = vec![Name::from("GPU"), a.clone()];
        sorted.sort();
        assert_eq!(sorted, ["CPU", "GPU"], "ordered as its str");
        assert_eq!(format!("{a} {a:?}"), "CPU \"CPU\"");
        let m: HashMap<Name, u32> = [(a, 1)].into_iter().collect();
        assert_eq!(m.get("CPU"), Some(&1), "looked up by its str");
    }
}
