//! Typed Python stubs of bindings, for a model to read.
//!
//! Each function with an input schema becomes a keyword-only async `def`:
//!
//! ```python
//! async def search_issues(*, query: str, limit: int = 10) -> SearchIssuesResult:
//!     """Search issues.
//!
//!     Args:
//!         query: Search text
//!         limit: Max results (minimum 1)
//!     Raises GhError (`.tool` names the tool) when the call fails.
//!     Call: `await gh.search_issues(query=..., limit=...)`
//!     """
//! ```
//!
//! JSON Schema maps onto Python types as follows: `string` `str`, `integer`
//! `int`, `number` `float`, `boolean` `bool`, `null` `None`, `array`
//! `list[T]`, an object with `properties` a named `TypedDict` (keys that are
//! not required are `NotRequired`; keys that are not identifiers use the
//! functional `TypedDict("X", {...})` form), an object with only
//! `additionalProperties` `dict[str, T]`, `enum`/`const` of scalars
//! `Literal[...]`, `anyOf`/`oneOf`/a list of types a union, `allOf` of object
//! schemas one merged `TypedDict`, local `$ref`s (`#/$defs/X`,
//! `#/definitions/X`) a named type (recursion through a forward reference).
//!
//! What Python's types cannot say becomes `Any` plus a note in the
//! docstring: `not`, `if`/`then`/`else`, `patternProperties`, tuple forms
//! (`prefixItems`, `items` as a list), `allOf` of non-objects, remote
//! `$ref`s, `enum` of objects or arrays, and anything deeper than
//! [`MAX_SCHEMA_DEPTH`]. Value constraints (`minimum`, `maxLength`,
//! `pattern`, `format`, ...) cannot be types; they are listed beside the
//! parameter in `Args:`. A parameter named like a keyword or not an
//! identifier cannot be a keyword argument by name: such a tool takes
//! `**args: Unpack[XArgs]` and is called `await ns.x(**{"user-id": 1})`.
//! A function without an input schema takes one positional JSON value.
//!
//! Schemas come from the host's own configuration or its upstream servers,
//! not from programs; the walk is still bounded in depth.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use serde_json::{Map, Value};

use crate::spelling::is_python_identifier;

/// Deepest schema nesting rendered as types; deeper parts are `Any`.
pub const MAX_SCHEMA_DEPTH: usize = 24;
/// Longest one-line summary of a function, in characters.
pub const MAX_SUMMARY_CHARS: usize = 120;

/// One function to describe.
#[derive(Debug, Clone, PartialEq)]
pub struct FunctionDoc {
    /// The member's own name (an MCP tool name, a bindings-file key).
    pub name: String,
    /// How it is written after the dot (see [`crate::spelling`]).
    pub ident: String,
    pub description: Option<String>,
    pub input_schema: Option<Value>,
    pub output_schema: Option<Value>,
}

/// One namespace to describe.
#[derive(Debug, Clone, PartialEq)]
pub struct NamespaceDoc {
    pub global: String,
    /// Where the functions come from, e.g. "MCP server `npx server`".
    pub source: String,
    /// `(class name, member-name attribute)` when calls raise a named class.
    pub error_class: Option<(String, String)>,
    pub functions: Vec<FunctionDoc>,
}

/// The stubs of one function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FunctionStub {
    pub name: String,
    pub ident: String,
    /// `TypedDict` definitions the signature uses, in dependency order.
    pub types: Vec<String>,
    /// `async def ...:` with its docstring, unindented.
    pub def: String,
    /// `gh.search_issues(query, limit?) -> SearchIssuesResult: Search issues.`
    pub summary: String,
}

impl FunctionStub {
    /// What `help(ns.member)` shows: the types it uses, then the def.
    pub fn help_text(&self) -> String {
        let mut out = String::new();
        for t in &self.types {
            out.push_str(t);
            out.push('\n');
        }
        out.push_str(&self.def);
        out
    }
}

/// The stubs of one namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamespaceStub {
    pub global: String,
    /// What `help(ns)` shows: source, how to call, the error class, members.
    pub doc: String,
    /// `class XError(Exception): ...`, when the namespace has one.
    pub error_class: Option<String>,
    pub functions: Vec<FunctionStub>,
}

impl NamespaceStub {
    /// The namespace as Python text: its types, error class, and a class
    /// holding its functions.
    pub fn render(&self) -> String {
        let mut out = String::new();
        for f in &self.functions {
            for t in &f.types {
                out.push_str(t);
                out.push('\n');
            }
        }
        if let Some(ec) = &self.error_class {
            out.push_str(ec);
            out.push('\n');
        }
        let _ = writeln!(out, "class {}:", self.global);
        let _ = writeln!(out, "{}", docstring(&self.doc, 4));
        for f in &self.functions {
            out.push('\n');
            out.push_str(&indent(&f.def, 4));
        }
        out
    }

    /// The namespace for the type check (`pycage_runtime::Namespace::stub`):
    /// its types and its class, without the error class (the checker
    /// declares that one, with its member-name attribute).
    pub fn class_text(&self) -> String {
        let mut out = String::new();
        for f in &self.functions {
            for t in &f.types {
                out.push_str(t);
                out.push('\n');
            }
        }
        let _ = writeln!(out, "class {}:", self.global);
        let _ = writeln!(out, "{}", docstring(&self.doc, 4));
        for f in &self.functions {
            out.push('\n');
            out.push_str(&indent(&f.def, 4));
        }
        out
    }

    /// One line per function, for a description over its size budget.
    pub fn summaries(&self) -> String {
        let mut out = String::new();
        for f in &self.functions {
            let _ = writeln!(out, "- {}", f.summary);
        }
        out
    }
}

/// The header every stubs text starts with.
pub const STUBS_PREAMBLE: &str = "from typing import Any, Literal, NotRequired, TypedDict, Unpack\n";

/// Renders stubs for every namespace. TypedDict names are unique across all
/// of them.
pub fn generate(namespaces: &[NamespaceDoc]) -> Vec<NamespaceStub> {
    let mut namer = Namer::default();
    for ns in namespaces {
        namer.taken.insert(ns.global.clone());
        if let Some((class, _)) = &ns.error_class {
            namer.taken.insert(class.clone());
        }
    }
    namespaces.iter().map(|ns| namespace_stub(ns, &mut namer)).collect()
}

/// All namespaces as one Python text (what `pycage stubs` prints).
pub fn render_all(stubs: &[NamespaceStub]) -> String {
    let mut out = String::from(STUBS_PREAMBLE);
    for ns in stubs {
        out.push('\n');
        out.push_str(&ns.render());
    }
    out
}

fn namespace_stub(ns: &NamespaceDoc, namer: &mut Namer) -> NamespaceStub {
    let raises = match &ns.error_class {
        Some((class, prop)) => format!("Raises {class} (`.{prop}` names the function) when a call fails."),
        None => "Raises RuntimeError when a call fails.".to_string(),
    };
    let functions: Vec<FunctionStub> = ns.functions.iter().map(|f| function_stub(ns, f, &raises, namer)).collect();
    let mut doc = format!(
        "{} function{} from {}. Call with keyword arguments and await: `await {}.<function>(name=value)`.\n{raises}",
        functions.len(),
        if functions.len() == 1 { "" } else { "s" },
        ns.source,
        ns.global,
    );
    doc.push_str(" `help(");
    doc.push_str(&ns.global);
    doc.push_str(".<function>)` shows one function's full signature.");
    let error_class = ns.error_class.as_ref().map(|(class, prop)| {
        format!(
            "class {class}(Exception):\n    \"\"\"Raised when a call on `{}` fails; `.{prop}` names the function.\"\"\"\n",
            ns.global
        )
    });
    NamespaceStub { global: ns.global.clone(), doc, error_class, functions }
}

fn function_stub(ns: &NamespaceDoc, f: &FunctionDoc, raises: &str, namer: &mut Namer) -> FunctionStub {
    let mut g = Gen { namer, types: Vec::new(), notes: Vec::new(), refs: BTreeMap::new() };
    let camel = camel_case(&f.ident);
    let ret = match &f.output_schema {
        Some(s) => g.ty(s, s, &format!("{camel}Result"), 0),
        None => "Any".to_string(),
    };
    let params = f.input_schema.as_ref().map(|s| g.params(s, &camel));
    let mut def = String::new();
    let mut call_args = Vec::new();
    let mut summary_args = Vec::new();
    let mut arg_docs = Vec::new();
    match &params {
        None => {
            let _ = writeln!(def, "async def {}(args: Any = None, /) -> {ret}:", f.ident);
            call_args.push("<JSON value>".to_string());
            summary_args.push("args".to_string());
        }
        Some(Params::Keywords(ps)) => {
            let mut sig = Vec::new();
            for p in ps {
                let default = match (&p.default, p.required) {
                    (Some(d), _) => format!(" = {}", py_literal(d)),
                    (None, true) => String::new(),
                    (None, false) => " = ...".to_string(),
                };
                sig.push(format!("{}: {}{default}", p.name, p.ty));
                if p.required {
                    call_args.push(format!("{}=...", p.name));
                    summary_args.push(p.name.clone());
                } else {
                    summary_args.push(format!("{}?", p.name));
                }
                if let Some(d) = &p.doc {
                    arg_docs.push(format!("{}: {d}", p.name));
                }
            }
            if sig.is_empty() {
                let _ = writeln!(def, "async def {}() -> {ret}:", f.ident);
            } else {
                let _ = writeln!(def, "async def {}(*, {}) -> {ret}:", f.ident, sig.join(", "));
            }
        }
        Some(Params::Unpacked { typed_dict, docs }) => {
            let _ = writeln!(def, "async def {}(**args: Unpack[{typed_dict}]) -> {ret}:", f.ident);
            call_args.push("**{...}".to_string());
            summary_args.push(format!("**{typed_dict}"));
            arg_docs.extend(docs.iter().cloned());
        }
    }
    let mut doc = String::new();
    if let Some(d) = f.description.as_deref().map(str::trim).filter(|d| !d.is_empty()) {
        doc.push_str(d);
        doc.push_str("\n\n");
    }
    if !arg_docs.is_empty() {
        doc.push_str("Args:\n");
        for a in &arg_docs {
            let _ = writeln!(doc, "    {a}");
        }
    }
    if let Some(d) = f.output_schema.as_ref().and_then(|s| s.get("description")).and_then(Value::as_str) {
        let _ = writeln!(doc, "Returns: {}", one_line(d));
    }
    for n in &g.notes {
        let _ = writeln!(doc, "Note: {n}");
    }
    let _ = writeln!(doc, "{raises}");
    if f.ident != f.name {
        let _ = writeln!(doc, "Also reachable by its own name: `getattr({}, {})`.", ns.global, py_str(&f.name));
    }
    let _ = write!(doc, "Call: `await {}.{}({})`", ns.global, f.ident, call_args.join(", "));
    def.push_str(&docstring(&doc, 4));
    def.push('\n');
    let description = f.description.as_deref().map(first_sentence).unwrap_or_default();
    let mut summary = format!("{}.{}({}) -> {ret}", ns.global, f.ident, summary_args.join(", "));
    if !description.is_empty() {
        summary.push_str(": ");
        summary.push_str(&description);
    }
    FunctionStub { name: f.name.clone(), ident: f.ident.clone(), types: g.types, def, summary }
}

/// A function's parameters.
enum Params {
    Keywords(Vec<Param>),
    /// Some key cannot be a keyword argument: the whole object is one
    /// `TypedDict`, passed with `**`.
    Unpacked {
        typed_dict: String,
        docs: Vec<String>,
    },
}

struct Param {
    name: String,
    ty: String,
    required: bool,
    default: Option<Value>,
    doc: Option<String>,
}

/// Unique type names across one stubs text.
#[derive(Default)]
struct Namer {
    taken: BTreeSet<String>,
}

impl Namer {
    fn fresh(&mut self, base: &str) -> String {
        let base = if is_python_identifier(base) { base.to_string() } else { camel_case(base) };
        let mut name = base.clone();
        let mut n = 2;
        while self.taken.contains(&name) {
            name = format!("{base}{n}");
            n += 1;
        }
        self.taken.insert(name.clone());
        name
    }
}

/// One function's type generation: the names it defined and what it could not say.
struct Gen<'a> {
    namer: &'a mut Namer,
    types: Vec<String>,
    notes: Vec<String>,
    /// `$ref`s already named in this function: (schema root address, ref).
    refs: BTreeMap<(usize, String), String>,
}

impl Gen<'_> {
    fn params(&mut self, schema: &Value, camel: &str) -> Params {
        let props = schema.get("properties").and_then(Value::as_object);
        let required = required_set(schema);
        let Some(props) = props else {
            if schema.get("type").and_then(Value::as_str).is_some_and(|t| t != "object") {
                self.notes.push("the input schema is not an object; pass the value as keyword arguments anyway".into());
            }
            return Params::Keywords(Vec::new());
        };
        if props.keys().any(|k| !is_python_identifier(k)) {
            let typed_dict = self.object(schema, schema, &format!("{camel}Args"), 0);
            let docs = props.iter().filter_map(|(k, p)| param_doc(p).map(|d| format!("{}: {d}", py_str(k)))).collect();
            return Params::Unpacked { typed_dict, docs };
        }
        let mut out: Vec<Param> = props
            .iter()
            .map(|(k, p)| Param {
                name: k.clone(),
                ty: self.ty(p, schema, &format!("{camel}{}", camel_case(k)), 1),
                required: required.contains(k.as_str()),
                default: p.get("default").cloned(),
                doc: param_doc(p),
            })
            .collect();
        // Required first, each group in schema order (stable sort).
        out.sort_by_key(|p| !(p.required && p.default.is_none()));
        Params::Keywords(out)
    }

    /// The Python type of `schema`; `root` resolves local `$ref`s; `hint`
    /// names a TypedDict if one is needed.
    fn ty(&mut self, schema: &Value, root: &Value, hint: &str, depth: usize) -> String {
        if depth > MAX_SCHEMA_DEPTH {
            self.note(format!("types nested deeper than {MAX_SCHEMA_DEPTH} levels are shown as Any"));
            return "Any".into();
        }
        let Some(obj) = schema.as_object() else { return "Any".into() };
        if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
            return self.reference(r, root, depth);
        }
        if let Some(c) = obj.get("const") {
            return literal(std::slice::from_ref(c)).unwrap_or_else(|| {
                self.note("a constant that is an object or array is shown as Any".into());
                "Any".into()
            });
        }
        if let Some(e) = obj.get("enum").and_then(Value::as_array) {
            return literal(e).unwrap_or_else(|| {
                self.note("an enum of objects or arrays is shown as Any".into());
                "Any".into()
            });
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alts) = obj.get(key).and_then(Value::as_array) {
                let parts: Vec<String> = alts
                    .iter()
                    .enumerate()
                    .map(|(i, a)| self.ty(a, root, &format!("{hint}{}", i + 1), depth + 1))
                    .collect();
                return union(parts);
            }
        }
        if let Some(all) = obj.get("allOf").and_then(Value::as_array) {
            if let [one] = all.as_slice() {
                return self.ty(one, root, hint, depth + 1);
            }
            if all.iter().all(|s| s.get("properties").is_some()) {
                let merged = merge_objects(all);
                return self.object(&merged, root, hint, depth);
            }
            self.note("an allOf of schemas that are not all objects is shown as Any".into());
            return "Any".into();
        }
        for key in ["not", "if", "patternProperties", "prefixItems"] {
            if obj.contains_key(key) {
                self.note(format!("`{key}` in a schema cannot be a Python type; that part is shown as Any"));
                return "Any".into();
            }
        }
        match obj.get("type") {
            Some(Value::String(t)) => self.typed(t, obj, schema, root, hint, depth),
            Some(Value::Array(ts)) => {
                let parts: Vec<String> = ts
                    .iter()
                    .filter_map(Value::as_str)
                    .map(|t| self.typed(t, obj, schema, root, hint, depth))
                    .collect();
                union(parts)
            }
            _ if obj.contains_key("properties") => self.object(schema, root, hint, depth),
            _ => "Any".into(),
        }
    }

    fn typed(
        &mut self,
        t: &str,
        obj: &Map<String, Value>,
        schema: &Value,
        root: &Value,
        hint: &str,
        depth: usize,
    ) -> String {
        match t {
            "string" => "str".into(),
            "integer" => "int".into(),
            "number" => "float".into(),
            "boolean" => "bool".into(),
            "null" => "None".into(),
            "array" => match obj.get("items") {
                Some(Value::Array(_)) => {
                    self.note("a tuple-shaped array is shown as list[Any]".into());
                    "list[Any]".into()
                }
                Some(items) => format!("list[{}]", self.ty(items, root, &format!("{hint}Item"), depth + 1)),
                None => "list[Any]".into(),
            },
            "object" => {
                if obj.get("properties").and_then(Value::as_object).is_some_and(|p| !p.is_empty()) {
                    return self.object(schema, root, hint, depth);
                }
                match obj.get("additionalProperties") {
                    Some(v @ Value::Object(_)) => {
                        format!("dict[str, {}]", self.ty(v, root, &format!("{hint}Value"), depth + 1))
                    }
                    _ => "dict[str, Any]".into(),
                }
            }
            _ => "Any".into(),
        }
    }

    /// A TypedDict for an object schema with properties; returns its name.
    fn object(&mut self, schema: &Value, root: &Value, hint: &str, depth: usize) -> String {
        let name = self
            .namer
            .fresh(schema.get("title").and_then(Value::as_str).filter(|t| is_python_identifier(t)).unwrap_or(hint));
        self.typed_dict(&name, schema, root, depth);
        name
    }

    fn typed_dict(&mut self, name: &str, schema: &Value, root: &Value, depth: usize) {
        let required = required_set(schema);
        let empty = Map::new();
        let props = schema.get("properties").and_then(Value::as_object).unwrap_or(&empty);
        let fields: Vec<(String, String, Option<String>)> = props
            .iter()
            .map(|(k, p)| {
                let t = self.ty(p, root, &format!("{name}{}", camel_case(k)), depth + 1);
                let t = if required.contains(k.as_str()) { t } else { format!("NotRequired[{t}]") };
                (k.clone(), t, param_doc(p))
            })
            .collect();
        let mut out = String::new();
        if fields.iter().all(|(k, _, _)| is_python_identifier(k)) {
            let _ = writeln!(out, "class {name}(TypedDict):");
            if let Some(d) = schema.get("description").and_then(Value::as_str) {
                let _ = writeln!(out, "{}", docstring(d, 4));
            }
            if fields.is_empty() {
                out.push_str("    pass\n");
            }
            for (k, t, d) in &fields {
                match d {
                    Some(d) => {
                        let _ = writeln!(out, "    {k}: {t}  # {d}");
                    }
                    None => {
                        let _ = writeln!(out, "    {k}: {t}");
                    }
                }
            }
        } else {
            let _ = writeln!(out, "{name} = TypedDict(\"{name}\", {{");
            for (k, t, d) in &fields {
                let comment = d.as_ref().map(|d| format!("  # {d}")).unwrap_or_default();
                let _ = writeln!(out, "    {}: {t},{comment}", py_str(k));
            }
            out.push_str("})\n");
        }
        self.types.push(out);
    }

    fn reference(&mut self, r: &str, root: &Value, depth: usize) -> String {
        let target = r
            .strip_prefix("#/$defs/")
            .map(|n| ("$defs", n))
            .or_else(|| r.strip_prefix("#/definitions/").map(|n| ("definitions", n)));
        let Some((section, def)) = target else {
            self.note(format!("the reference {} is not local to the schema; shown as Any", py_str(r)));
            return "Any".into();
        };
        let Some(schema) = root.get(section).and_then(|d| d.get(def)) else {
            self.note(format!("the reference {} points nowhere; shown as Any", py_str(r)));
            return "Any".into();
        };
        // Objects become one named TypedDict per definition, defined once;
        // a reference met again (recursion included) is its name.
        if schema.get("properties").is_some() {
            let key = (std::ptr::from_ref(root) as usize, r.to_string());
            if let Some(name) = self.refs.get(&key) {
                return format!("\"{name}\"");
            }
            let name = self.namer.fresh(def);
            self.refs.insert(key, name.clone());
            self.typed_dict(&name, schema, root, depth + 1);
            return name;
        }
        self.ty(schema, root, def, depth + 1)
    }

    fn note(&mut self, n: String) {
        if !self.notes.contains(&n) {
            self.notes.push(n);
        }
    }
}

fn required_set(schema: &Value) -> BTreeSet<&str> {
    schema
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// A property's description and value constraints, on one line.
fn param_doc(p: &Value) -> Option<String> {
    let mut parts = Vec::new();
    if let Some(d) = p.get("description").and_then(Value::as_str) {
        let d = one_line(d);
        if !d.is_empty() {
            parts.push(d);
        }
    }
    let mut limits = Vec::new();
    for key in [
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "pattern",
        "format",
        "minItems",
        "maxItems",
        "uniqueItems",
        "multipleOf",
    ] {
        if let Some(v) = p.get(key) {
            let v = match v {
                Value::String(s) => py_str(s),
                other => other.to_string(),
            };
            limits.push(format!("{key} {v}"));
        }
    }
    if !limits.is_empty() {
        parts.push(format!("({})", limits.join(", ")));
    }
    (!parts.is_empty()).then(|| parts.join(" "))
}

/// `Literal[...]` of scalar values, or `None` if one is not a scalar.
fn literal(values: &[Value]) -> Option<String> {
    let mut parts = Vec::with_capacity(values.len());
    for v in values {
        if v.is_array() || v.is_object() {
            return None;
        }
        parts.push(py_literal(v));
    }
    Some(format!("Literal[{}]", parts.join(", ")))
}

fn union(parts: Vec<String>) -> String {
    let mut seen = Vec::new();
    for p in parts {
        if p == "Any" {
            return p;
        }
        if !seen.contains(&p) {
            seen.push(p);
        }
    }
    if seen.is_empty() {
        return "Any".into();
    }
    seen.join(" | ")
}

/// One object schema holding every property and requirement of `all`.
fn merge_objects(all: &[Value]) -> Value {
    let mut props = Map::new();
    let mut required = Vec::new();
    for s in all {
        if let Some(p) = s.get("properties").and_then(Value::as_object) {
            for (k, v) in p {
                props.insert(k.clone(), v.clone());
            }
        }
        if let Some(r) = s.get("required").and_then(Value::as_array) {
            required.extend(r.iter().cloned());
        }
    }
    let mut m = Map::new();
    m.insert("type".into(), Value::String("object".into()));
    m.insert("properties".into(), Value::Object(props));
    m.insert("required".into(), Value::Array(required));
    Value::Object(m)
}

/// `search_issues` / `get-sum` → `SearchIssues` / `GetSum`.
fn camel_case(s: &str) -> String {
    let mut out = String::new();
    let mut upper = true;
    for c in s.chars() {
        if c.is_ascii_alphanumeric() {
            if upper {
                out.push(c.to_ascii_uppercase());
            } else {
                out.push(c);
            }
            upper = false;
        } else {
            upper = true;
        }
    }
    if out.is_empty() || out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert(0, 'T');
    }
    out
}

/// A JSON value as a Python literal.
pub fn py_literal(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => py_str(s),
        Value::Array(items) => format!("[{}]", items.iter().map(py_literal).collect::<Vec<_>>().join(", ")),
        Value::Object(m) => {
            format!(
                "{{{}}}",
                m.iter().map(|(k, v)| format!("{}: {}", py_str(k), py_literal(v))).collect::<Vec<_>>().join(", ")
            )
        }
    }
}

/// A Python string literal (double-quoted, escaped).
pub fn py_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 || c == '\u{7f}' => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A triple-quoted docstring indented by `n` spaces (no trailing newline).
fn docstring(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    let mut text = text.trim().replace('\\', "\\\\").replace("\"\"\"", "\\\"\\\"\\\"");
    // A closing quote right before the delimiter would end the string early.
    if text.ends_with('"') {
        text.push(' ');
    }
    let mut lines = text.lines();
    let first = lines.next().unwrap_or_default();
    let rest: Vec<&str> = lines.collect();
    if rest.is_empty() {
        return format!("{pad}\"\"\"{first}\"\"\"");
    }
    let mut out = format!("{pad}\"\"\"{first}\n");
    for l in rest {
        if l.trim().is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "{pad}{}", l.trim_end());
        }
    }
    let _ = write!(out, "{pad}\"\"\"");
    out
}

fn indent(text: &str, n: usize) -> String {
    let pad = " ".repeat(n);
    let mut out = String::with_capacity(text.len() + 16);
    for l in text.lines() {
        if l.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "{pad}{l}");
        }
    }
    out
}

/// Whitespace runs (newlines included) collapsed to one space.
fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The first sentence (or line) of a description, at most [`MAX_SUMMARY_CHARS`].
fn first_sentence(s: &str) -> String {
    let line = one_line(s.trim().lines().next().unwrap_or_default());
    let end = line.find(". ").map(|i| i + 1).unwrap_or(line.len());
    let sentence = line.get(..end).unwrap_or(&line);
    if sentence.chars().count() <= MAX_SUMMARY_CHARS {
        return sentence.to_string();
    }
    let cut: String = sentence.chars().take(MAX_SUMMARY_CHARS - 3).collect();
    format!("{}...", cut.trim_end())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn gh() -> NamespaceDoc {
        NamespaceDoc {
            global: "gh".into(),
            source: "the MCP server `gh-server`".into(),
            error_class: Some(("GhError".into(), "tool".into())),
            functions: vec![
                FunctionDoc {
                    name: "search-issues".into(),
                    ident: "search_issues".into(),
                    description: Some("Search issues. Slowly.\nSecond line.".into()),
                    input_schema: Some(json!({
                        "type": "object",
                        "properties": {
                            "query": {"type": "string", "description": "Search text"},
                            "limit": {"type": "integer", "default": 10, "minimum": 1, "maximum": 100},
                            "state": {"enum": ["open", "closed"]},
                            "labels": {"type": "array", "items": {"type": "string"}},
                            "since": {"type": ["string", "null"], "format": "date-time"}
                        },
                        "required": ["query"]
                    })),
                    output_schema: Some(json!({
                        "type": "object",
                        "description": "The matches.",
                        "properties": {
                            "total": {"type": "integer"},
                            "items": {"type": "array", "items": {"$ref": "#/$defs/Issue"}}
                        },
                        "required": ["total", "items"],
                        "$defs": {
                            "Issue": {
                                "type": "object",
                                "properties": {
                                    "number": {"type": "integer"},
                                    "title": {"type": "string", "description": "One line"},
                                    "parent": {"$ref": "#/$defs/Issue"},
                                    "meta": {"type": "object", "additionalProperties": {"type": "number"}}
                                },
                                "required": ["number", "title"]
                            }
                        }
                    })),
                },
                FunctionDoc {
                    name: "odd".into(),
                    ident: "odd".into(),
                    description: None,
                    input_schema: Some(json!({
                        "type": "object",
                        "properties": {"user-id": {"type": "integer"}, "from": {"const": "x"}, "x": {"not": {}}},
                        "required": ["user-id"]
                    })),
                    output_schema: None,
                },
                FunctionDoc {
                    name: "raw".into(),
                    ident: "raw".into(),
                    description: Some("Says \"hi\"".into()),
                    input_schema: None,
                    output_schema: None,
                },
            ],
        }
    }

    #[test]
    fn renders_the_documented_shapes() {
        let stubs = generate(&[gh()]);
        let text = render_all(&stubs);
        let want = r#"from typing import Any, Literal, NotRequired, TypedDict, Unpack

class Issue(TypedDict):
    number: int
    title: str  # One line
    parent: NotRequired["Issue"]
    meta: NotRequired[dict[str, float]]

class SearchIssuesResult(TypedDict):
    """The matches."""
    total: int
    items: list[Issue]

OddArgs = TypedDict("OddArgs", {
    "user-id": int,
    "from": NotRequired[Literal["x"]],
    "x": NotRequired[Any],
})

class GhError(Exception):
    """Raised when a call on `gh` fails; `.tool` names the function."""

class gh:
    """3 functions from the MCP server `gh-server`. Call with keyword arguments and await: `await gh.<function>(name=value)`.
    Raises GhError (`.tool` names the function) when a call fails. `help(gh.<function>)` shows one function's full signature.
    """

    async def search_issues(*, query: str, limit: int = 10, state: Literal["open", "closed"] = ..., labels: list[str] = ..., since: str | None = ...) -> SearchIssuesResult:
        """Search issues. Slowly.
        Second line.

        Args:
            query: Search text
            limit: (minimum 1, maximum 100)
            since: (format "date-time")
        Returns: The matches.
        Raises GhError (`.tool` names the function) when a call fails.
        Also reachable by its own name: `getattr(gh, "search-issues")`.
        Call: `await gh.search_issues(query=...)`
        """

    async def odd(**args: Unpack[OddArgs]) -> Any:
        """Note: `not` in a schema cannot be a Python type; that part is shown as Any
        Raises GhError (`.tool` names the function) when a call fails.
        Call: `await gh.odd(**{...})`
        """

    async def raw(args: Any = None, /) -> Any:
        """Says "hi"

        Raises GhError (`.tool` names the function) when a call fails.
        Call: `await gh.raw(<JSON value>)`
        """
"#;
        assert_eq!(text, want, "got:\n{text}");
        let f = &stubs[0].functions[0];
        assert_eq!(
            f.summary,
            "gh.search_issues(query, limit?, state?, labels?, since?) -> SearchIssuesResult: Search issues."
        );
        assert!(f.help_text().starts_with("class Issue(TypedDict):"));
        assert!(f.help_text().contains("async def search_issues(*, query: str"));
    }

    #[test]
    fn type_names_are_unique_across_namespaces() {
        let mut a = gh();
        a.functions.truncate(1);
        let mut b = a.clone();
        b.global = "gl".into();
        b.error_class = None;
        let stubs = generate(&[a, b]);
        assert_eq!(stubs[1].functions[0].types.len(), 2);
        assert!(stubs[1].functions[0].types[0].starts_with("class Issue2(TypedDict):"));
        assert!(stubs[1].functions[0].def.contains("-> SearchIssuesResult2:"));
    }

    #[test]
    fn deep_schemas_stop_at_the_limit() {
        let mut s = json!({"type": "string"});
        for _ in 0..100 {
            s = json!({"type": "array", "items": s});
        }
        let doc = NamespaceDoc {
            global: "t".into(),
            source: "x".into(),
            error_class: None,
            functions: vec![FunctionDoc {
                name: "f".into(),
                ident: "f".into(),
                description: None,
                input_schema: Some(json!({"type": "object", "properties": {"a": s}})),
                output_schema: None,
            }],
        };
        let def = &generate(&[doc])[0].functions[0].def;
        assert!(def.contains("list[list[") && def.contains("Any]") && def.contains("deeper than 24 levels"), "{def}");
    }

    #[test]
    fn literals() {
        assert_eq!(py_literal(&json!({"a": [1, true, null, "x\"\n"]})), r#"{"a": [1, True, None, "x\"\n"]}"#);
        assert_eq!(camel_case("get-sum"), "GetSum");
        assert_eq!(camel_case("2fa"), "T2fa");
        assert_eq!(first_sentence("Returns a thing. And more."), "Returns a thing.");
        assert_eq!(first_sentence(&"x".repeat(200)).chars().count(), MAX_SUMMARY_CHARS);
    }

    #[test]
    fn stubs_are_valid_python() {
        let text = render_all(&generate(&[gh()]));
        let out = std::process::Command::new("python3")
            .args(["-I", "-c", "import ast, sys; ast.parse(sys.stdin.read())"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .and_then(|mut c| {
                use std::io::Write;
                c.stdin.take().unwrap().write_all(text.as_bytes())?;
                c.wait_with_output()
            })
            .unwrap();
        assert!(out.status.success(), "{}\n{text}", String::from_utf8_lossy(&out.stderr));
    }
}
