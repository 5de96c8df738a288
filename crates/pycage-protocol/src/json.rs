//! An exact, depth-unbounded JSON value stored as a flat tape.
//!
//! # Why this type is ours and not `serde_json::Value`
//!
//! Everything the child sends is hostile, and the protocol (`docs/protocol.md`)
//! promises that a 1,000,000-deep array below the byte budget must cross intact, with every
//! number's decimal text preserved. `serde_json::Value` cannot do that:
//!
//! - its parser recurses (and refuses past depth 128 unless the recursion
//!   limit is disabled, at which point a deep input overflows the stack);
//! - its `Drop` recurses, so even a value built by hand overflows the stack
//!   when it is deep enough;
//! - without `arbitrary_precision` it rounds numbers to `f64`, and with it a
//!   number is a heap `String` per node.
//!
//! A [`JsonValue`] is two flat buffers: a `Vec<Node>` in document order and
//! one `String` holding every string's unescaped text and every number's
//! exact text back to back. A container node records how many direct children
//! it has and how many nodes its subtree spans, so walking, skipping,
//! re-encoding, metering and comparing are loops over a slice, and dropping is
//! freeing two buffers. Nothing here recurses, and there is no allocation per
//! node.
//!
//! A subtree is contiguous in both buffers, so taking one out
//! ([`ValueRef::to_owned`]) is two slice copies.
//!
//! Invariants, upheld by every constructor (the parser and [`JsonBuilder`]):
//! every number node's text is a valid JSON number token, every string is
//! valid UTF-8 (so a lone surrogate escape is refused at parse time), and the
//! buffers are never larger than `u32::MAX` (offsets are `u32` to keep a node
//! at 12 bytes).

use crate::number::{self, Number};

/// One tape entry. Offsets index `JsonValue::text`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Node {
    Null,
    False,
    True,
    Number {
        start: u32,
        len: u32,
    },
    String {
        start: u32,
        len: u32,
    },
    /// `len` direct children follow; the subtree spans `skip` nodes after this one.
    Array {
        len: u32,
        skip: u32,
    },
    /// `len` members follow as key, value, key, value; the subtree spans `skip` nodes.
    Object {
        len: u32,
        skip: u32,
    },
}

impl Node {
    /// Nodes spanned by this node's subtree, excluding itself.
    pub(crate) fn skip(self) -> usize {
        match self {
            Node::Array { skip, .. } | Node::Object { skip, .. } => skip as usize,
            _ => 0,
        }
    }
}

/// Largest tape or text buffer a value may have (offsets are `u32`).
pub const MAX_VALUE_BUFFER: usize = u32::MAX as usize;

/// An exact JSON value of any depth. See the module docs.
#[derive(Clone, PartialEq, Eq)]
pub struct JsonValue {
    pub(crate) nodes: Vec<Node>,
    pub(crate) text: String,
}

/// `null`: every `JsonValue` has a root.
impl Default for JsonValue {
    fn default() -> Self {
        JsonValue::null()
    }
}

/// The shape of a value, borrowed from a [`JsonValue`].
#[derive(Clone, Copy, Debug)]
pub enum Kind<'a> {
    Null,
    Bool(bool),
    Number(Number<'a>),
    String(&'a str),
    Array(ArrayIter<'a>),
    Object(ObjectIter<'a>),
}

/// A borrowed view of one node of a [`JsonValue`] and its subtree.
#[derive(Clone, Copy)]
pub struct ValueRef<'a> {
    value: &'a JsonValue,
    index: usize,
}

impl JsonValue {
    /// `null`.
    pub fn null() -> Self {
        JsonValue { nodes: vec![Node::Null], text: String::new() }
    }

    /// A boolean.
    pub fn bool(b: bool) -> Self {
        JsonValue { nodes: vec![if b { Node::True } else { Node::False }], text: String::new() }
    }

    /// A string. Fails only when `s` is longer than [`MAX_VALUE_BUFFER`].
    pub fn string(s: &str) -> Result<Self, BuildError> {
        let mut b = JsonBuilder::new();
        b.string(s)?;
        b.finish()
    }

    /// A number from its exact text; refuses text that is not a JSON number token.
    pub fn number(text: &str) -> Result<Self, BuildError> {
        let mut b = JsonBuilder::new();
        b.number(text)?;
        b.finish()
    }

    /// The root of the value.
    pub fn root(&self) -> ValueRef<'_> {
        ValueRef { value: self, index: 0 }
    }

    /// The root's shape.
    pub fn kind(&self) -> Kind<'_> {
        self.root().kind()
    }

    /// Number of tape nodes (one per scalar, container, and object key).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// Maximum nesting depth (a scalar is depth 0), computed iteratively.
    pub fn depth(&self) -> usize {
        self.root().depth()
    }
}

impl<'a> ValueRef<'a> {
    fn node(&self) -> Node {
        self.value.nodes.get(self.index).copied().unwrap_or(Node::Null)
    }

    fn text(&self, start: u32, len: u32) -> &'a str {
        let start = start as usize;
        self.value.text.get(start..start + len as usize).unwrap_or_default()
    }

    /// The node's shape.
    pub fn kind(&self) -> Kind<'a> {
        match self.node() {
            Node::Null => Kind::Null,
            Node::False => Kind::Bool(false),
            Node::True => Kind::Bool(true),
            Node::Number { start, len } => Kind::Number(Number::new_unchecked(self.text(start, len))),
            Node::String { start, len } => Kind::String(self.text(start, len)),
            Node::Array { len, .. } => {
                Kind::Array(ArrayIter { value: self.value, next: self.index + 1, remaining: len as usize })
            }
            Node::Object { len, .. } => {
                Kind::Object(ObjectIter { value: self.value, next: self.index + 1, remaining: len as usize })
            }
        }
    }

    /// Whether this is `null`.
    pub fn is_null(&self) -> bool {
        matches!(self.node(), Node::Null)
    }

    /// The boolean, if this is one.
    pub fn as_bool(&self) -> Option<bool> {
        match self.node() {
            Node::True => Some(true),
            Node::False => Some(false),
            _ => None,
        }
    }

    /// The string, if this is one.
    pub fn as_str(&self) -> Option<&'a str> {
        match self.kind() {
            Kind::String(s) => Some(s),
            _ => None,
        }
    }

    /// The number, if this is one.
    pub fn as_number(&self) -> Option<Number<'a>> {
        match self.kind() {
            Kind::Number(n) => Some(n),
            _ => None,
        }
    }

    /// The array's elements, if this is an array.
    pub fn as_array(&self) -> Option<ArrayIter<'a>> {
        match self.kind() {
            Kind::Array(it) => Some(it),
            _ => None,
        }
    }

    /// The object's members in document order, if this is an object.
    pub fn as_object(&self) -> Option<ObjectIter<'a>> {
        match self.kind() {
            Kind::Object(it) => Some(it),
            _ => None,
        }
    }

    /// The value of the LAST member named `key` (as `JSON.parse` and
    /// `serde_json` resolve duplicates), if this is an object that has one.
    pub fn get(&self, key: &str) -> Option<ValueRef<'a>> {
        self.as_object()?.filter(|(k, _)| *k == key).last().map(|(_, v)| v)
    }

    /// Number of tape nodes in this subtree, itself included.
    pub fn span(&self) -> usize {
        1 + self.node().skip()
    }

    /// Copies this subtree into its own value (two slice copies).
    pub fn to_owned(&self) -> JsonValue {
        let end = self.index + self.span();
        let nodes = self.value.nodes.get(self.index..end).unwrap_or_default();
        // Strings and numbers of a subtree are contiguous in `text`: find the range.
        let mut lo = None;
        let mut hi = 0u32;
        for n in nodes {
            if let Node::Number { start, len } | Node::String { start, len } = *n {
                lo.get_or_insert(start);
                hi = start + len;
            }
        }
        let lo = lo.unwrap_or(0);
        let text = self.value.text.get(lo as usize..hi.max(lo) as usize).unwrap_or_default().to_owned();
        let nodes = nodes
            .iter()
            .map(|n| match *n {
                Node::Number { start, len } => Node::Number { start: start - lo, len },
                Node::String { start, len } => Node::String { start: start - lo, len },
                other => other,
            })
            .collect();
        JsonValue { nodes, text }
    }

    /// Maximum nesting depth below this node, iteratively.
    pub fn depth(&self) -> usize {
        // Stack of subtree end indices of the open containers.
        let mut ends: Vec<usize> = Vec::new();
        let mut max = 0;
        let end = self.index + self.span();
        for i in self.index..end {
            while ends.last().is_some_and(|&e| i >= e) {
                ends.pop();
            }
            let node = self.value.nodes.get(i).copied().unwrap_or(Node::Null);
            if let Node::Array { skip, .. } | Node::Object { skip, .. } = node {
                ends.push(i + 1 + skip as usize);
                max = max.max(ends.len());
            }
        }
        max
    }

    pub(crate) fn value(&self) -> &'a JsonValue {
        self.value
    }

    pub(crate) fn index(&self) -> usize {
        self.index
    }
}

/// Elements of an array, in order.
#[derive(Clone, Copy, Debug)]
pub struct ArrayIter<'a> {
    value: &'a JsonValue,
    next: usize,
    remaining: usize,
}

impl<'a> Iterator for ArrayIter<'a> {
    type Item = ValueRef<'a>;
    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let item = ValueRef { value: self.value, index: self.next };
        self.next += item.span();
        Some(item)
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for ArrayIter<'_> {}

/// Members of an object, in document order (duplicates included).
#[derive(Clone, Copy, Debug)]
pub struct ObjectIter<'a> {
    value: &'a JsonValue,
    next: usize,
    remaining: usize,
}

impl<'a> Iterator for ObjectIter<'a> {
    type Item = (&'a str, ValueRef<'a>);
    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 {
            return None;
        }
        self.remaining -= 1;
        let key = ValueRef { value: self.value, index: self.next };
        let value = ValueRef { value: self.value, index: self.next + 1 };
        self.next += 1 + value.span();
        Some((key.as_str().unwrap_or_default(), value))
    }
    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl ExactSizeIterator for ObjectIter<'_> {}

impl From<bool> for JsonValue {
    fn from(b: bool) -> Self {
        JsonValue::bool(b)
    }
}

impl From<i64> for JsonValue {
    fn from(n: i64) -> Self {
        let text = n.to_string();
        JsonValue { nodes: vec![Node::Number { start: 0, len: text.len() as u32 }], text }
    }
}

impl From<u64> for JsonValue {
    fn from(n: u64) -> Self {
        let text = n.to_string();
        JsonValue { nodes: vec![Node::Number { start: 0, len: text.len() as u32 }], text }
    }
}

/// Why a [`JsonBuilder`] refused a step.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("not a JSON number token: {0:?}")]
    InvalidNumber(String),
    #[error("{0} is not a finite number; JSON has no NaN or infinity")]
    NonFinite(String),
    #[error("an object member needs a key first")]
    KeyExpected,
    #[error("a key is only allowed inside an object, before its value")]
    UnexpectedKey,
    #[error("end() without an open array or object, or after a key with no value")]
    UnbalancedEnd,
    #[error("the value is not complete: {0} container(s) still open or no root")]
    Incomplete(usize),
    #[error("a value already has its root")]
    SecondRoot,
    #[error("the value is larger than 4 GiB of tape or text")]
    TooLarge,
}

#[derive(Clone, Copy)]
struct Open {
    index: usize,
    /// Direct child nodes written so far (keys included for objects).
    children: u32,
    object: bool,
}

/// Builds a [`JsonValue`] step by step, without recursion: the way host code
/// (bindings, the serde conversion) produces values of any depth.
///
/// ```
/// use pycage_protocol::{JsonBuilder, JsonValue};
/// let mut b = JsonBuilder::new();
/// b.begin_object()?;
/// b.key("n")?;
/// b.number("12345678901234567890123")?;
/// b.key("xs")?;
/// b.begin_array()?;
/// b.bool(true)?;
/// b.null()?;
/// b.end()?;
/// b.end()?;
/// let v: JsonValue = b.finish()?;
/// assert_eq!(v.to_canonical_string(), r#"{"n":12345678901234567890123,"xs":[true,null]}"#);
/// # Ok::<(), pycage_protocol::BuildError>(())
/// ```
pub struct JsonBuilder {
    value: JsonValue,
    open: Vec<Open>,
}

impl Default for JsonBuilder {
    fn default() -> Self {
        // Not `JsonValue::default()`, which is `null`: a builder starts empty.
        JsonBuilder { value: JsonValue { nodes: Vec::new(), text: String::new() }, open: Vec::new() }
    }
}

impl JsonBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    fn before_value(&mut self) -> Result<(), BuildError> {
        match self.open.last() {
            None if !self.value.nodes.is_empty() => Err(BuildError::SecondRoot),
            Some(o) if o.object && o.children % 2 == 0 => Err(BuildError::KeyExpected),
            _ => {
                if self.value.nodes.len() >= MAX_VALUE_BUFFER {
                    return Err(BuildError::TooLarge);
                }
                Ok(())
            }
        }
    }

    fn after_child(&mut self) {
        if let Some(o) = self.open.last_mut() {
            o.children += 1;
        }
    }

    fn push_text(&mut self, s: &str) -> Result<(u32, u32), BuildError> {
        let start = self.value.text.len();
        if start + s.len() > MAX_VALUE_BUFFER {
            return Err(BuildError::TooLarge);
        }
        self.value.text.push_str(s);
        Ok((start as u32, s.len() as u32))
    }

    /// Appends `null`.
    pub fn null(&mut self) -> Result<(), BuildError> {
        self.before_value()?;
        self.value.nodes.push(Node::Null);
        self.after_child();
        Ok(())
    }

    /// Appends a boolean.
    pub fn bool(&mut self, b: bool) -> Result<(), BuildError> {
        self.before_value()?;
        self.value.nodes.push(if b { Node::True } else { Node::False });
        self.after_child();
        Ok(())
    }

    /// Appends a number given as its exact JSON text.
    pub fn number(&mut self, text: &str) -> Result<(), BuildError> {
        if !number::is_json_number(text.as_bytes()) {
            return Err(BuildError::InvalidNumber(text.chars().take(64).collect()));
        }
        self.before_value()?;
        let (start, len) = self.push_text(text)?;
        self.value.nodes.push(Node::Number { start, len });
        self.after_child();
        Ok(())
    }

    /// Appends an integer.
    pub fn i64(&mut self, n: i64) -> Result<(), BuildError> {
        self.number(&n.to_string())
    }

    /// Appends a finite float as its shortest round-trip text.
    pub fn f64(&mut self, f: f64) -> Result<(), BuildError> {
        if !f.is_finite() {
            return Err(BuildError::NonFinite(f.to_string()));
        }
        self.number(&number::f64_text(f))
    }

    /// Appends a string.
    pub fn string(&mut self, s: &str) -> Result<(), BuildError> {
        self.before_value()?;
        let (start, len) = self.push_text(s)?;
        self.value.nodes.push(Node::String { start, len });
        self.after_child();
        Ok(())
    }

    /// Appends an object key; the next step appends its value.
    pub fn key(&mut self, k: &str) -> Result<(), BuildError> {
        match self.open.last() {
            Some(o) if o.object && o.children % 2 == 0 => {}
            _ => return Err(BuildError::UnexpectedKey),
        }
        let (start, len) = self.push_text(k)?;
        self.value.nodes.push(Node::String { start, len });
        self.after_child();
        Ok(())
    }

    /// Opens an array.
    pub fn begin_array(&mut self) -> Result<(), BuildError> {
        self.begin(false)
    }

    /// Opens an object.
    pub fn begin_object(&mut self) -> Result<(), BuildError> {
        self.begin(true)
    }

    fn begin(&mut self, object: bool) -> Result<(), BuildError> {
        self.before_value()?;
        let index = self.value.nodes.len();
        self.value.nodes.push(if object { Node::Object { len: 0, skip: 0 } } else { Node::Array { len: 0, skip: 0 } });
        self.open.push(Open { index, children: 0, object });
        Ok(())
    }

    /// Closes the innermost open array or object.
    pub fn end(&mut self) -> Result<(), BuildError> {
        let o = match self.open.last() {
            Some(o) if !(o.object && o.children % 2 == 1) => *o,
            _ => return Err(BuildError::UnbalancedEnd),
        };
        self.open.pop();
        let skip = (self.value.nodes.len() - o.index - 1) as u32;
        let len = if o.object { o.children / 2 } else { o.children };
        if let Some(n) = self.value.nodes.get_mut(o.index) {
            *n = if o.object { Node::Object { len, skip } } else { Node::Array { len, skip } };
        }
        self.after_child();
        Ok(())
    }

    /// Appends a copy of an existing value (any depth, no recursion).
    pub fn value(&mut self, v: ValueRef<'_>) -> Result<(), BuildError> {
        self.before_value()?;
        let owned = v.to_owned();
        let base = self.value.text.len();
        if base + owned.text.len() > MAX_VALUE_BUFFER || self.value.nodes.len() + owned.nodes.len() > MAX_VALUE_BUFFER {
            return Err(BuildError::TooLarge);
        }
        self.value.text.push_str(&owned.text);
        let base = base as u32;
        self.value.nodes.extend(owned.nodes.iter().map(|n| match *n {
            Node::Number { start, len } => Node::Number { start: start + base, len },
            Node::String { start, len } => Node::String { start: start + base, len },
            other => other,
        }));
        self.after_child();
        Ok(())
    }

    /// The finished value; fails unless exactly one root was completed.
    pub fn finish(self) -> Result<JsonValue, BuildError> {
        if !self.open.is_empty() || self.value.nodes.is_empty() {
            return Err(BuildError::Incomplete(self.open.len()));
        }
        Ok(self.value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builder_rejects_misuse() {
        let mut b = JsonBuilder::new();
        b.begin_object().unwrap();
        assert_eq!(b.null(), Err(BuildError::KeyExpected));
        b.key("a").unwrap();
        assert_eq!(b.key("b"), Err(BuildError::UnexpectedKey));
        assert_eq!(b.end(), Err(BuildError::UnbalancedEnd));
        b.null().unwrap();
        b.end().unwrap();
        assert_eq!(b.null(), Err(BuildError::SecondRoot));
        assert_eq!(JsonBuilder::new().finish(), Err(BuildError::Incomplete(0)));
        assert!(matches!(JsonBuilder::new().number("NaN"), Err(BuildError::InvalidNumber(_))));
        assert!(matches!(JsonBuilder::new().f64(f64::INFINITY), Err(BuildError::NonFinite(_))));
    }

    #[test]
    fn subtree_copy_rebases_text() {
        let v = JsonValue::parse(br#"{"a":"x","b":[1,"yy",{"c":2.50}],"d":3}"#).unwrap();
        let b = v.root().get("b").unwrap().to_owned();
        assert_eq!(b.to_canonical_string(), r#"[1,"yy",{"c":2.50}]"#);
        assert_eq!(b, JsonValue::parse(br#"[1, "yy", {"c": 2.50}]"#).unwrap());
        let mut builder = JsonBuilder::new();
        builder.begin_array().unwrap();
        builder.string("pre").unwrap();
        builder.value(v.root().get("b").unwrap()).unwrap();
        builder.end().unwrap();
        assert_eq!(builder.finish().unwrap().to_canonical_string(), r#"["pre",[1,"yy",{"c":2.50}]]"#);
    }

    #[test]
    fn default_is_null() {
        assert_eq!(JsonValue::default(), JsonValue::null());
        assert_eq!(JsonValue::default().to_canonical_string(), "null");
    }

    #[test]
    fn get_takes_last_duplicate() {
        let v = JsonValue::parse(br#"{"a":1,"a":2}"#).unwrap();
        assert_eq!(v.root().get("a").unwrap().as_number().unwrap().as_str(), "2");
        assert_eq!(v.to_canonical_string(), r#"{"a":1,"a":2}"#);
    }
}
