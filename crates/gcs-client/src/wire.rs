//! `GetClusterResourceStateReply` read straight off the frame's bytes: each node's row
//! borrowed from the frame (names and labels as `&str` slices of it, amounts as read) and
//! handed to the caller one at a time, so that a 10,000-node reply is turned into
//! `rayscale-core`'s model without first building prost's message (a `BTreeMap` and a
//! `String` per resource and label of every node, only to be moved again). Everything but
//! the node rows (demand, gangs, constraints) is decoded by prost's generated code from its
//! own slice.
//!
//! What it reads is what prost reads: the same fields, the same wire-type checks (a known
//! field with the wrong wire type is an error), unknown fields and groups skipped, UTF-8
//! checked, a repeated scalar field's last value kept, a map's repeated key keeping its last
//! value, maps in key order (prost's `BTreeMap`). A frame prost refuses is refused here; the
//! property tests of this module check both, on valid and on damaged frames. Field numbers
//! are those of `proto/ray/rpc/autoscaler.proto` (Ray 2.60's `autoscaler.proto`).
//!
//! What must not live here: any judgement of the values (that is `convert`'s).

use prost::Message;

use crate::GcsError;
use crate::proto::ray::rpc::autoscaler as pb;

/// Protobuf wire types (the encoding spec's numbering).
const VARINT: u8 = 0;
const FIXED64: u8 = 1;
const LEN: u8 = 2;
const START_GROUP: u8 = 3;
const END_GROUP: u8 = 4;
const FIXED32: u8 = 5;

/// prost's recursion limit (`DecodeContext`'s default), and how deep a node's fields are
/// (the reply, its state, the node: a group skipped there counts from this depth).
const RECURSION_LIMIT: u32 = 100;
const NODE_DEPTH: u32 = 2;

/// A decoding error: what went wrong, and in which field (a static dotted path under
/// the message being read; the node's index is added by the caller).
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct WireError {
    /// The field, e.g. `"available_resources"` (empty: the message itself).
    pub field: &'static str,
    /// What went wrong.
    pub message: String,
}

fn fail<T>(field: &'static str, message: impl Into<String>) -> Result<T, WireError> {
    Err(WireError {
        field,
        message: message.into(),
    })
}

/// A cursor over a protobuf message's bytes.
struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// A base-128 varint of at most ten bytes (the tenth holding one bit), as prost reads it.
    #[inline]
    fn varint(&mut self, field: &'static str) -> Result<u64, WireError> {
        // One byte: every key and length of a node's row.
        if let Some((&b, rest)) = self.buf.split_first()
            && b < 0x80
        {
            self.buf = rest;
            return Ok(u64::from(b));
        }
        self.long_varint(field)
    }

    #[inline(never)]
    fn long_varint(&mut self, field: &'static str) -> Result<u64, WireError> {
        let mut value = 0u64;
        for (i, &b) in self.buf.iter().take(10).enumerate() {
            if i == 9 && b > 1 {
                break;
            }
            value |= u64::from(b & 0x7f) << (7 * i);
            if b < 0x80 {
                self.buf = &self.buf[i + 1..];
                return Ok(value);
            }
        }
        fail(field, "invalid varint")
    }

    /// A field's key: its number and wire type.
    #[inline]
    fn key(&mut self, field: &'static str) -> Result<(u32, u8), WireError> {
        let key = self.varint(field)?;
        let Ok(key) = u32::try_from(key) else {
            return fail(field, format!("invalid key value: {key}"));
        };
        let wire_type = (key & 7) as u8;
        if wire_type > FIXED32 {
            return fail(field, format!("invalid wire type value: {wire_type}"));
        }
        let tag = key >> 3;
        if tag == 0 {
            return fail(field, "invalid tag value: 0");
        }
        Ok((tag, wire_type))
    }

    #[inline]
    fn take(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], WireError> {
        if n > self.buf.len() {
            return fail(field, "buffer underflow");
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    /// A length-delimited field's bytes.
    #[inline]
    fn delimited(&mut self, field: &'static str) -> Result<&'a [u8], WireError> {
        let len = self.varint(field)?;
        match usize::try_from(len) {
            Ok(n) => self.take(n, field),
            Err(_) => fail(field, "buffer underflow"),
        }
    }

    #[inline]
    fn string(&mut self, field: &'static str) -> Result<&'a str, WireError> {
        let bytes = self.delimited(field)?;
        utf8(bytes, field)
    }

    /// A string whose text is likely one read before (a map's key, a node type's name):
    /// found among `known` (texts checked when first read, see [`Known`]) it is that text,
    /// not checked again; otherwise it is checked as [`string`](Self::string) checks it.
    #[inline]
    fn known_string(
        &mut self,
        field: &'static str,
        known: &mut Known<'a>,
    ) -> Result<&'a str, WireError> {
        let bytes = self.delimited(field)?;
        if let Some(s) = known.0.iter().find(|s| s.as_bytes() == bytes) {
            return Ok(s);
        }
        let s = utf8(bytes, field)?;
        if known.0.len() < KNOWN_TEXTS {
            known.0.push(s);
        }
        Ok(s)
    }

    #[inline]
    fn double(&mut self, field: &'static str) -> Result<f64, WireError> {
        let b = self.take(8, field)?;
        let mut le = [0u8; 8];
        le.copy_from_slice(b);
        Ok(f64::from_le_bytes(le))
    }

    /// Skips a field prost does not know, as prost does (a group up to its matching end).
    fn skip(&mut self, wire_type: u8, tag: u32, depth: u32) -> Result<(), WireError> {
        match wire_type {
            VARINT => self.varint("").map(drop),
            FIXED64 => self.take(8, "").map(drop),
            FIXED32 => self.take(4, "").map(drop),
            LEN => self.delimited("").map(drop),
            START_GROUP => {
                if depth >= RECURSION_LIMIT {
                    return fail("", "recursion limit reached");
                }
                loop {
                    let (inner, wt) = self.key("")?;
                    if wt == END_GROUP {
                        if inner != tag {
                            return fail("", "unexpected end group tag");
                        }
                        return Ok(());
                    }
                    self.skip(wt, inner, depth + 1)?;
                }
            }
            _ => fail("", "unexpected end group tag"),
        }
    }
}

fn expect(actual: u8, expected: u8, field: &'static str) -> Result<(), WireError> {
    if actual == expected {
        Ok(())
    } else {
        fail(
            field,
            format!("invalid wire type: {actual} (expected {expected})"),
        )
    }
}

/// A string field's text, refused as prost refuses text that is not UTF-8.
fn utf8<'a>(bytes: &'a [u8], field: &'static str) -> Result<&'a str, WireError> {
    std::str::from_utf8(bytes)
        .or_else(|_| fail(field, "invalid string value: data is not UTF-8 encoded"))
}

/// How many texts [`Known`] holds.
const KNOWN_TEXTS: usize = 16;

/// The first texts of a reply's map keys and type names, each checked when read: 10,000
/// nodes repeat the same few (`CPU`, `memory`, their type's name), and a text equal to one
/// of these needs no check. Repeats are handed out as the first one read, so that equal
/// texts of a reply are one slice of the frame (the converter's names rely on that only
/// to go faster).
#[derive(Default)]
struct Known<'a>(Vec<&'a str>);

/// One node's row of the reply (`NodeState`), borrowed from the frame. Maps are in key
/// order with one entry per key, as prost's `BTreeMap`s hold them.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct NodeRow<'a> {
    pub node_id: &'a [u8],
    pub instance_id: &'a str,
    pub ray_node_type_name: &'a str,
    pub available_resources: Vec<(&'a str, f64)>,
    pub total_resources: Vec<(&'a str, f64)>,
    pub dynamic_labels: Vec<(&'a str, &'a str)>,
    pub labels: Vec<(&'a str, &'a str)>,
    pub status: i32,
    pub idle_duration_ms: i64,
}

/// A prost map of amounts, borrowed: its entries in key order (as its `BTreeMap` holds them).
pub(crate) fn borrowed_amounts(m: &std::collections::BTreeMap<String, f64>) -> Vec<(&str, f64)> {
    m.iter().map(|(k, v)| (k.as_str(), *v)).collect()
}

impl<'a> NodeRow<'a> {
    /// The row of a prost-decoded node (its maps are already in key order).
    pub fn from_pb(n: &'a pb::NodeState) -> Self {
        let labels = |m: &'a std::collections::BTreeMap<String, String>| {
            m.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
        };
        NodeRow {
            node_id: &n.node_id,
            instance_id: &n.instance_id,
            ray_node_type_name: &n.ray_node_type_name,
            available_resources: borrowed_amounts(&n.available_resources),
            total_resources: borrowed_amounts(&n.total_resources),
            dynamic_labels: labels(&n.dynamic_labels),
            labels: labels(&n.labels),
            status: n.status,
            idle_duration_ms: n.idle_duration_ms,
        }
    }

    fn clear(&mut self) {
        self.node_id = &[];
        self.instance_id = "";
        self.ray_node_type_name = "";
        self.available_resources.clear();
        self.total_resources.clear();
        self.dynamic_labels.clear();
        self.labels.clear();
        self.status = 0;
        self.idle_duration_ms = 0;
    }

    /// Reads a `NodeState` message into this row (cleared first).
    fn read(&mut self, bytes: &'a [u8], known: &mut Known<'a>) -> Result<(), WireError> {
        self.clear();
        let mut r = Reader::new(bytes);
        while !r.is_empty() {
            let (tag, wt) = r.key("")?;
            match tag {
                1 => {
                    expect(wt, LEN, "node_id")?;
                    self.node_id = r.delimited("node_id")?;
                }
                2 => {
                    expect(wt, LEN, "instance_id")?;
                    self.instance_id = r.string("instance_id")?;
                }
                3 => {
                    expect(wt, LEN, "ray_node_type_name")?;
                    self.ray_node_type_name = r.known_string("ray_node_type_name", known)?;
                }
                4 => amount_entry(
                    &mut r,
                    wt,
                    "available_resources",
                    &mut self.available_resources,
                    known,
                )?,
                5 => amount_entry(
                    &mut r,
                    wt,
                    "total_resources",
                    &mut self.total_resources,
                    known,
                )?,
                6 => label_entry(
                    &mut r,
                    wt,
                    "dynamic_labels",
                    &mut self.dynamic_labels,
                    known,
                )?,
                7 => {
                    expect(wt, VARINT, "node_state_version")?;
                    r.varint("node_state_version")?;
                }
                8 => {
                    expect(wt, VARINT, "status")?;
                    // An enum is an int32: prost keeps the low 32 bits.
                    self.status = r.varint("status")? as i32;
                }
                9 => {
                    expect(wt, VARINT, "idle_duration_ms")?;
                    self.idle_duration_ms = r.varint("idle_duration_ms")? as i64;
                }
                10 => {
                    expect(wt, LEN, "node_ip_address")?;
                    r.string("node_ip_address")?;
                }
                11 => {
                    expect(wt, LEN, "instance_type_name")?;
                    r.known_string("instance_type_name", known)?;
                }
                12 => {
                    expect(wt, LEN, "node_activity")?;
                    r.string("node_activity")?;
                }
                13 => label_entry(&mut r, wt, "labels", &mut self.labels, known)?,
                _ => r.skip(wt, tag, NODE_DEPTH)?,
            }
        }
        as_map(&mut self.available_resources);
        as_map(&mut self.total_resources);
        as_map(&mut self.dynamic_labels);
        as_map(&mut self.labels);
        Ok(())
    }
}

/// Orders map entries by key, a repeated key keeping its last value (prost's `BTreeMap`
/// insertions).
fn as_map<V: Copy>(entries: &mut Vec<(&str, V)>) {
    // Stable: entries of one key stay in arrival order, the last one wins.
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries.dedup_by(|later, kept| {
        if later.0 == kept.0 {
            kept.1 = later.1;
            true
        } else {
            false
        }
    });
}

/// Reads one map entry (a message: key 1, value 2; a missing one is its default).
fn entry<'a, V>(
    r: &mut Reader<'a>,
    wt: u8,
    field: &'static str,
    default: V,
    value_type: u8,
    known: &mut Known<'a>,
    value: impl Fn(&mut Reader<'a>) -> Result<V, WireError>,
) -> Result<(&'a str, V), WireError> {
    expect(wt, LEN, field)?;
    let mut e = Reader::new(r.delimited(field)?);
    let (mut k, mut v) = ("", default);
    while !e.is_empty() {
        let (tag, wt) = e.key(field)?;
        match tag {
            1 => {
                expect(wt, LEN, field)?;
                k = e.known_string(field, known)?;
            }
            2 => {
                expect(wt, value_type, field)?;
                v = value(&mut e)?;
            }
            _ => e.skip(wt, tag, NODE_DEPTH + 1)?,
        }
    }
    Ok((k, v))
}

fn amount_entry<'a>(
    r: &mut Reader<'a>,
    wt: u8,
    field: &'static str,
    out: &mut Vec<(&'a str, f64)>,
    known: &mut Known<'a>,
) -> Result<(), WireError> {
    out.push(entry(r, wt, field, 0.0, FIXED64, known, |e| {
        e.double(field)
    })?);
    Ok(())
}

fn label_entry<'a>(
    r: &mut Reader<'a>,
    wt: u8,
    field: &'static str,
    out: &mut Vec<(&'a str, &'a str)>,
    known: &mut Known<'a>,
) -> Result<(), WireError> {
    out.push(entry(r, wt, field, "", LEN, known, |e| e.string(field))?);
    Ok(())
}

/// Where a decoding error was: a node's row (its index) or the rest of the state.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum ReplyError<E> {
    /// The frame did not decode.
    Wire {
        /// The node's index, when the error was in a node's row.
        node: Option<usize>,
        /// The error.
        error: WireError,
    },
    /// The caller's handler of a node's row refused it.
    Row(E),
}

/// How many node rows `frame` holds, as far as it can be scanned (a hint for sizing the
/// list of nodes, nothing more: a damaged frame gives a smaller count, and
/// [`read_reply`] says what is wrong with it).
pub(crate) fn count_nodes(frame: &[u8]) -> usize {
    fn scan(buf: &[u8], field: u32, mut each: impl FnMut(&[u8])) -> Option<()> {
        let mut r = Reader::new(buf);
        while !r.is_empty() {
            let (tag, wt) = r.key("").ok()?;
            if tag == field && wt == LEN {
                each(r.delimited("").ok()?);
            } else {
                r.skip(wt, tag, 0).ok()?;
            }
        }
        Some(())
    }
    let mut n = 0usize;
    let _ = scan(frame, 1, |state| {
        let _ = scan(state, 3, |_| n += 1);
    });
    n
}

/// Reads a `GetClusterResourceStateReply` frame: each node's row goes to `on_node` (with
/// its index) as soon as it is read; the rest of the state (`node_states` empty) comes
/// back, or `None` when the reply has no `cluster_resource_state`.
pub(crate) fn read_reply<'a, E>(
    frame: &'a [u8],
    mut on_node: impl FnMut(usize, &NodeRow<'a>) -> Result<(), E>,
) -> Result<Option<pb::ClusterResourceState>, ReplyError<E>> {
    let wire = |node, error| ReplyError::Wire { node, error };
    let mut r = Reader::new(frame);
    let mut state: Option<pb::ClusterResourceState> = None;
    let mut row = NodeRow::default();
    let mut known = Known::default();
    let mut nodes = 0usize;
    while !r.is_empty() {
        let (tag, wt) = r.key("").map_err(|e| wire(None, e))?;
        if tag != 1 {
            r.skip(wt, tag, 0).map_err(|e| wire(None, e))?;
            continue;
        }
        const FIELD: &str = "cluster_resource_state";
        expect(wt, LEN, FIELD).map_err(|e| wire(None, e))?;
        let body = r.delimited(FIELD).map_err(|e| wire(None, e))?;
        // A repeated occurrence merges into the first (protobuf's rule for a message field).
        let s = state.get_or_insert_with(Default::default);
        let mut m = Reader::new(body);
        while !m.is_empty() {
            let (tag, wt) = m.key(FIELD).map_err(|e| wire(None, e))?;
            let read = |m: &mut Reader<'a>, field: &'static str| -> Result<&'a [u8], WireError> {
                expect(wt, LEN, field)?;
                m.delimited(field)
            };
            let decoded = |field: &'static str, e: prost::DecodeError| WireError {
                field,
                message: e.to_string(),
            };
            let step = match tag {
                1 => expect(wt, VARINT, "cluster_resource_state_version")
                    .and_then(|()| m.varint("cluster_resource_state_version"))
                    .map(|v| s.cluster_resource_state_version = v as i64),
                2 => expect(wt, VARINT, "last_seen_autoscaler_state_version")
                    .and_then(|()| m.varint("last_seen_autoscaler_state_version"))
                    .map(|v| s.last_seen_autoscaler_state_version = v as i64),
                3 => {
                    let i = nodes;
                    nodes += 1;
                    let bytes = read(&mut m, "node_states").map_err(|e| wire(Some(i), e))?;
                    row.read(bytes, &mut known).map_err(|e| wire(Some(i), e))?;
                    on_node(i, &row).map_err(ReplyError::Row)?;
                    Ok(())
                }
                4 => read(&mut m, "pending_resource_requests").and_then(|b| {
                    pb::ResourceRequestByCount::decode(b)
                        .map(|x| s.pending_resource_requests.push(x))
                        .map_err(|e| decoded("pending_resource_requests", e))
                }),
                5 => read(&mut m, "pending_gang_resource_requests").and_then(|b| {
                    pb::GangResourceRequest::decode(b)
                        .map(|x| s.pending_gang_resource_requests.push(x))
                        .map_err(|e| decoded("pending_gang_resource_requests", e))
                }),
                6 => read(&mut m, "cluster_resource_constraints").and_then(|b| {
                    pb::ClusterResourceConstraint::decode(b)
                        .map(|x| s.cluster_resource_constraints.push(x))
                        .map_err(|e| decoded("cluster_resource_constraints", e))
                }),
                7 => expect(wt, LEN, "cluster_session_name")
                    .and_then(|()| m.string("cluster_session_name"))
                    .map(|v| s.cluster_session_name = v.to_string()),
                _ => m.skip(wt, tag, NODE_DEPTH - 1),
            };
            step.map_err(|e| wire(None, e))?;
        }
    }
    Ok(state)
}

/// A [`ReplyError::Wire`] as this crate's error, naming the field.
pub(crate) fn wire_error(node: Option<usize>, e: &WireError) -> GcsError {
    let mut path = "GetClusterResourceStateReply.cluster_resource_state".to_string();
    if let Some(i) = node {
        path.push_str(&format!(".node_states[{i}]"));
    }
    // The state itself is already the path's last part.
    let is_state = node.is_none() && e.field == "cluster_resource_state";
    if !e.field.is_empty() && !is_state {
        path.push('.');
        path.push_str(e.field);
    }
    GcsError::Invalid {
        path,
        message: format!("malformed reply from the GCS: {}", e.message),
    }
}
