//! Checking a call's arguments against a function's `input_schema` before
//! the command or endpoint runs, so a model gets a clear error naming the
//! field instead of a failure from inside the tool.
//!
//! A subset of JSON Schema, written here rather than taken from a crate:
//! the arguments are the program's (hostile) data, so the check must be
//! iterative on their depth and bounded, and it must read pycage's exact
//! [`JsonValue`](pycage_protocol::JsonValue) without a conversion. The schema is the host's own (from
//! the bindings file), checked once when the file loads ([`check_schema`]).
//!
//! Checked keywords: `type` (a name or a list; `integer` is a number with
//! no fractional part), `enum`, `const`, `properties`, `required`,
//! `additionalProperties` (`false` or a schema), `items` (one schema for
//! every element), `minItems`, `maxItems`, `minLength`, `maxLength` (in
//! characters), `minimum`, `maximum`, `exclusiveMinimum`,
//! `exclusiveMaximum` (numbers, compared as doubles), `allOf`, `anyOf`,
//! `oneOf`, `not`. Every other keyword (`pattern`, `format`, `$ref`,
//! `patternProperties`, `if`, ...) is not checked: the stubs still show
//! it, and the tool sees the arguments as sent. So a call the full
//! standard accepts is never refused here.

use std::fmt::Write as _;

use pycage_protocol::{Kind, ValueRef};
use serde_json::Value;

/// Deepest schema nesting accepted (schemas are host configuration; this
/// bounds the recursion of `anyOf`/`oneOf`/`not` branches).
pub const MAX_SCHEMA_DEPTH: usize = 64;

const TYPES: [&str; 7] = ["object", "array", "string", "integer", "number", "boolean", "null"];

/// Checks that `schema` uses the keywords this module checks with the
/// shapes they need, so a typo fails when the file loads, not per call.
pub fn check_schema(schema: &Value) -> Result<(), String> {
    let mut stack = vec![(schema, String::from("$"), 0usize)];
    while let Some((s, at, depth)) = stack.pop() {
        if depth > MAX_SCHEMA_DEPTH {
            return Err(format!("{at}: nested deeper than {MAX_SCHEMA_DEPTH} levels"));
        }
        let obj = match s {
            Value::Bool(_) => continue,
            Value::Object(o) => o,
            _ => return Err(format!("{at}: a schema must be an object or a boolean")),
        };
        let sub = |key: &str| format!("{at}.{key}");
        if let Some(t) = obj.get("type") {
            let names: Vec<&Value> = match t {
                Value::Array(a) => a.iter().collect(),
                other => vec![other],
            };
            for n in names {
                if !n.as_str().is_some_and(|n| TYPES.contains(&n)) {
                    return Err(format!("{}: unknown type {n}; one of {}", sub("type"), TYPES.join(", ")));
                }
            }
        }
        if let Some(e) = obj.get("enum") {
            if !e.is_array() {
                return Err(format!("{}: must be an array", sub("enum")));
            }
        }
        if let Some(r) = obj.get("required") {
            if !r.as_array().is_some_and(|a| a.iter().all(Value::is_string)) {
                return Err(format!("{}: must be an array of strings", sub("required")));
            }
        }
        for key in ["minItems", "maxItems", "minLength", "maxLength"] {
            if let Some(v) = obj.get(key) {
                if v.as_u64().is_none() {
                    return Err(format!("{}: must be a non-negative integer", sub(key)));
                }
            }
        }
        for key in ["minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"] {
            if let Some(v) = obj.get(key) {
                if v.as_f64().is_none() {
                    return Err(format!("{}: must be a number", sub(key)));
                }
            }
        }
        if let Some(p) = obj.get("properties") {
            let Some(p) = p.as_object() else { return Err(format!("{}: must be an object", sub("properties"))) };
            for (k, v) in p {
                stack.push((v, format!("{at}.properties.{k}"), depth + 1));
            }
        }
        for key in ["additionalProperties", "items", "not"] {
            if let Some(v) = obj.get(key) {
                stack.push((v, sub(key), depth + 1));
            }
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(v) = obj.get(key) {
                let Some(branches) = v.as_array().filter(|a| !a.is_empty()) else {
                    return Err(format!("{}: must be a non-empty array of schemas", sub(key)));
                };
                for (i, b) in branches.iter().enumerate() {
                    stack.push((b, format!("{at}.{key}[{i}]"), depth + 1));
                }
            }
        }
    }
    Ok(())
}

/// A numeric bound: its keyword, its words in a message, and the test.
type Bound = (&'static str, &'static str, fn(f64, f64) -> bool);

/// One step of an instance path: a member name or an array index.
#[derive(Clone, Copy)]
enum Step<'a> {
    Key(&'a str),
    Index(usize),
}

/// Instance paths as a parent-linked arena: a path is made only for an
/// error, and an array of a million elements costs one entry each.
struct Paths<'a>(Vec<(usize, Step<'a>)>);

const ROOT: usize = usize::MAX;

impl<'a> Paths<'a> {
    fn push(&mut self, parent: usize, step: Step<'a>) -> usize {
        self.0.push((parent, step));
        self.0.len() - 1
    }

    /// `city`, `filters.tags[2]`, or `the arguments` for the root.
    fn render(&self, mut at: usize) -> String {
        let mut steps = Vec::new();
        while at != ROOT {
            let Some(&(parent, step)) = self.0.get(at) else { break };
            steps.push(step);
            at = parent;
        }
        if steps.is_empty() {
            return "the arguments".into();
        }
        let mut out = String::new();
        for step in steps.iter().rev() {
            match step {
                Step::Key(k) if out.is_empty() => out.push_str(k),
                Step::Key(k) => {
                    out.push('.');
                    out.push_str(k);
                }
                Step::Index(i) => {
                    let _ = write!(out, "[{i}]");
                }
            }
        }
        out
    }
}

/// `unexpected argument "cty" (expected: city, days)`: a member the schema
/// does not allow, and the names it does.
fn unexpected(what: &str, key: &str, inside: &str, properties: Option<&serde_json::Map<String, Value>>) -> String {
    let known: Vec<&str> = properties.map(|p| p.keys().map(String::as_str).collect()).unwrap_or_default();
    let known = if known.is_empty() { "none".to_owned() } else { known.join(", ") };
    format!("unexpected {what} {}{inside} (expected: {known})", quoted(key))
}

/// Checks `args` against `schema`; the error names the field and what was
/// wrong with it, e.g. `"limit" must be an integer, got string "ten"`.
pub fn validate(schema: &Value, args: ValueRef<'_>) -> Result<(), String> {
    validate_in(schema, args, 0)
}

fn validate_in(schema: &Value, args: ValueRef<'_>, depth: usize) -> Result<(), String> {
    let mut paths = Paths(Vec::new());
    let mut stack: Vec<(&Value, ValueRef<'_>, usize)> = vec![(schema, args, ROOT)];
    while let Some((s, v, at)) = stack.pop() {
        let obj = match s {
            Value::Bool(true) => continue,
            Value::Bool(false) => return Err(format!("{} is not allowed", quoted(&paths.render(at)))),
            Value::Object(o) => o,
            _ => continue,
        };
        // The field's name for a message (a macro: `paths` grows below).
        macro_rules! field {
            () => {
                quoted(&paths.render(at))
            };
        }
        if let Some(t) = obj.get("type") {
            let allowed: Vec<&str> = match t {
                Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
                other => other.as_str().into_iter().collect(),
            };
            if !allowed.iter().any(|t| has_type(v, t)) {
                return Err(format!("{} must be {}, got {}", field!(), type_list(&allowed), describe(v)));
            }
        }
        if let Some(options) = obj.get("enum").and_then(Value::as_array) {
            if !options.iter().any(|o| equal(o, v)) {
                let list: Vec<String> = options.iter().map(Value::to_string).collect();
                return Err(format!("{} must be one of {}, got {}", field!(), list.join(", "), describe(v)));
            }
        }
        if let Some(c) = obj.get("const") {
            if !equal(c, v) {
                return Err(format!("{} must be {c}, got {}", field!(), describe(v)));
            }
        }
        match v.kind() {
            Kind::Object(members) => {
                let properties = obj.get("properties").and_then(Value::as_object);
                let extra = obj.get("additionalProperties");
                let what = if at == ROOT { "argument" } else { "field" };
                let closed = matches!(extra, Some(Value::Bool(false)));
                if let Some(required) = obj.get("required").and_then(Value::as_array) {
                    for name in required.iter().filter_map(Value::as_str) {
                        if v.get(name).is_none() {
                            let inside = if at == ROOT { String::new() } else { format!(" in {}", field!()) };
                            let missing = format!("missing required {what} {}{inside}", quoted(name));
                            // A misspelt name is both missing and unexpected:
                            // say both, so the typo is in the message.
                            let stray = v.as_object().and_then(|mut m| {
                                m.find(|(key, _)| closed && properties.is_none_or(|p| !p.contains_key(*key)))
                            });
                            return Err(match stray {
                                Some((key, _)) => format!("{missing}; {}", unexpected(what, key, &inside, properties)),
                                None => missing,
                            });
                        }
                    }
                }
                for (key, member) in members {
                    let child = properties.and_then(|p| p.get(key));
                    let rule = match (child, extra) {
                        (Some(c), _) => c,
                        (None, Some(Value::Bool(false))) => {
                            let inside = if at == ROOT { String::new() } else { format!(" in {}", field!()) };
                            return Err(unexpected(what, key, &inside, properties));
                        }
                        (None, Some(schema)) => schema,
                        (None, None) => continue,
                    };
                    let p = paths.push(at, Step::Key(key));
                    stack.push((rule, member, p));
                }
            }
            Kind::Array(items) => {
                let n = items.len() as u64;
                if let Some(min) = obj.get("minItems").and_then(Value::as_u64) {
                    if n < min {
                        return Err(format!("{} must have at least {min} items, got {n}", field!()));
                    }
                }
                if let Some(max) = obj.get("maxItems").and_then(Value::as_u64) {
                    if n > max {
                        return Err(format!("{} must have at most {max} items, got {n}", field!()));
                    }
                }
                if let Some(rule) = obj.get("items").filter(|i| !i.is_array()) {
                    // Pushed in reverse so the first bad element is reported.
                    let items: Vec<ValueRef<'_>> = items.collect();
                    for (i, item) in items.into_iter().enumerate().rev() {
                        let p = paths.push(at, Step::Index(i));
                        stack.push((rule, item, p));
                    }
                }
            }
            Kind::String(text) => {
                let n = text.chars().count() as u64;
                if let Some(min) = obj.get("minLength").and_then(Value::as_u64) {
                    if n < min {
                        return Err(format!("{} must be at least {min} characters long, got {n}", field!()));
                    }
                }
                if let Some(max) = obj.get("maxLength").and_then(Value::as_u64) {
                    if n > max {
                        return Err(format!("{} must be at most {max} characters long, got {n}", field!()));
                    }
                }
            }
            Kind::Number(num) => {
                if let Ok(x) = num.as_str().parse::<f64>() {
                    let bound = |key: &str| obj.get(key).and_then(Value::as_f64);
                    let checks: [Bound; 4] = [
                        ("minimum", "at least", |x, b| x >= b),
                        ("maximum", "at most", |x, b| x <= b),
                        ("exclusiveMinimum", "greater than", |x, b| x > b),
                        ("exclusiveMaximum", "less than", |x, b| x < b),
                    ];
                    for (key, words, ok) in checks {
                        if let Some(b) = bound(key) {
                            if !ok(x, b) {
                                return Err(format!("{} must be {words} {b}, got {}", field!(), num.as_str()));
                            }
                        }
                    }
                }
            }
            Kind::Null | Kind::Bool(_) => {}
        }
        if let Some(all) = obj.get("allOf").and_then(Value::as_array) {
            for s in all.iter().rev() {
                stack.push((s, v, at));
            }
        }
        // Branches are checked whole, each on its own: their depth is the
        // schema's (bounded when the file loaded), not the arguments'.
        if depth < MAX_SCHEMA_DEPTH {
            if let Some(any) = obj.get("anyOf").and_then(Value::as_array) {
                if !any.iter().any(|s| validate_in(s, v, depth + 1).is_ok()) {
                    let first = any.first().map(|s| validate_in(s, v, depth + 1)).and_then(Result::err);
                    return Err(format!(
                        "{} matches none of the allowed forms{}",
                        field!(),
                        first.map(|e| format!(" (the first: {e})")).unwrap_or_default()
                    ));
                }
            }
            if let Some(one) = obj.get("oneOf").and_then(Value::as_array) {
                let matching = one.iter().filter(|s| validate_in(s, v, depth + 1).is_ok()).count();
                if matching != 1 {
                    return Err(format!("{} must match exactly one allowed form, matches {matching}", field!()));
                }
            }
            if let Some(not) = obj.get("not") {
                if validate_in(not, v, depth + 1).is_ok() {
                    return Err(format!("{} has a form that is not allowed", field!()));
                }
            }
        }
    }
    Ok(())
}

fn quoted(path: &str) -> String {
    if path == "the arguments" {
        path.to_owned()
    } else {
        format!("\"{path}\"")
    }
}

fn has_type(v: ValueRef<'_>, t: &str) -> bool {
    match (v.kind(), t) {
        (Kind::Object(_), "object")
        | (Kind::Array(_), "array")
        | (Kind::String(_), "string")
        | (Kind::Number(_), "number")
        | (Kind::Bool(_), "boolean")
        | (Kind::Null, "null") => true,
        (Kind::Number(n), "integer") => {
            n.is_integer_token() || n.as_str().parse::<f64>().is_ok_and(|f| f.is_finite() && f.fract() == 0.0)
        }
        _ => false,
    }
}

fn type_list(types: &[&str]) -> String {
    let named: Vec<String> = types
        .iter()
        .map(|t| match *t {
            "object" => "an object".to_owned(),
            "array" => "an array".to_owned(),
            "integer" => "an integer".to_owned(),
            other => format!("a {other}"),
        })
        .collect();
    match named.as_slice() {
        [] => "of no type".into(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} or {last}", rest.join(", ")),
    }
}

/// `string "ten"`, `integer 3`, `object`, ... with a short excerpt.
fn describe(v: ValueRef<'_>) -> String {
    let (name, show) = match v.kind() {
        Kind::Null => return "null".into(),
        Kind::Bool(b) => return format!("boolean {b}"),
        Kind::Number(n) => (if n.is_integer_token() { "integer" } else { "number" }, true),
        Kind::String(_) => ("string", true),
        Kind::Array(_) => return "an array".into(),
        Kind::Object(_) => return "an object".into(),
    };
    if !show {
        return name.into();
    }
    let text = v.to_owned().to_canonical_string();
    let mut cut: String = text.chars().take(60).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    format!("{name} {cut}")
}

/// JSON equality of a schema value and an argument: numbers by value,
/// everything else by its canonical text.
fn equal(schema: &Value, v: ValueRef<'_>) -> bool {
    match (schema, v.kind()) {
        (Value::Number(a), Kind::Number(b)) => {
            a.to_string() == b.as_str() || matches!((a.as_f64(), b.as_str().parse::<f64>()), (Some(x), Ok(y)) if x == y)
        }
        (Value::String(a), Kind::String(b)) => a == b,
        (Value::Bool(a), Kind::Bool(b)) => *a == b,
        (Value::Null, Kind::Null) => true,
        (Value::Array(_) | Value::Object(_), Kind::Array(_) | Kind::Object(_)) => {
            let ours = v.to_owned().to_canonical_string();
            pycage_protocol::JsonValue::parse(schema.to_string().as_bytes())
                .is_ok_and(|s| s.to_canonical_string() == ours)
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use pycage_protocol::JsonValue;
    use serde_json::json;

    fn check(schema: Value, args: &str) -> Result<(), String> {
        check_schema(&schema).unwrap();
        validate(&schema, JsonValue::parse(args.as_bytes()).unwrap().root())
    }

    fn weather() -> Value {
        json!({
            "type": "object",
            "properties": {
                "city": {"type": "string", "minLength": 1},
                "days": {"type": "integer", "minimum": 1, "maximum": 14},
                "units": {"enum": ["metric", "imperial"]},
                "filters": {
                    "type": "object",
                    "properties": {"tags": {"type": "array", "items": {"type": "string"}, "maxItems": 3}},
                    "required": ["tags"],
                    "additionalProperties": false
                }
            },
            "required": ["city"],
            "additionalProperties": false
        })
    }

    #[test]
    fn accepts_what_the_schema_allows() {
        check(weather(), r#"{"city":"Lyon"}"#).unwrap();
        check(weather(), r#"{"city":"Lyon","days":3.0,"units":"metric","filters":{"tags":["a","b"]}}"#).unwrap();
        check(json!({}), "[1, {\"a\": null}]").unwrap();
        check(json!(true), "1").unwrap();
    }

    #[test]
    fn errors_name_the_field() {
        let e = |args: &str| check(weather(), args).unwrap_err();
        assert_eq!(e(r#"{}"#), r#"missing required argument "city""#);
        assert_eq!(e(r#"{"city":3}"#), r#""city" must be a string, got integer 3"#);
        assert_eq!(e(r#"{"city":""}"#), r#""city" must be at least 1 characters long, got 0"#);
        assert_eq!(e(r#"{"city":"x","days":1.5}"#), r#""days" must be an integer, got number 1.5"#);
        assert_eq!(e(r#"{"city":"x","days":15}"#), r#""days" must be at most 14, got 15"#);
        assert_eq!(
            e(r#"{"city":"x","units":"si"}"#),
            r#""units" must be one of "metric", "imperial", got string "si""#
        );
        assert_eq!(
            e(r#"{"cty":"x"}"#),
            r#"missing required argument "city"; unexpected argument "cty" (expected: city, days, units, filters)"#
        );
        assert_eq!(
            e(r#"{"city":"x","cty":"x"}"#),
            r#"unexpected argument "cty" (expected: city, days, units, filters)"#
        );
        assert_eq!(e(r#"{"city":"x","filters":{}}"#), r#"missing required field "tags" in "filters""#);
        assert_eq!(
            e(r#"{"city":"x","filters":{"tags":["a",2]}}"#),
            r#""filters.tags[1]" must be a string, got integer 2"#
        );
        assert_eq!(
            e(r#"{"city":"x","filters":{"tags":["a","b","c","d"]}}"#),
            r#""filters.tags" must have at most 3 items, got 4"#
        );
        assert_eq!(e("[1]"), "the arguments must be an object, got an array");
    }

    #[test]
    fn combinators() {
        let s = json!({"anyOf": [{"type": "string"}, {"type": "integer"}]});
        check(s.clone(), "\"a\"").unwrap();
        check(s.clone(), "3").unwrap();
        let e = check(s, "1.5").unwrap_err();
        assert!(e.starts_with("the arguments matches none of the allowed forms"), "{e}");
        let s = json!({"oneOf": [{"type": "number"}, {"type": "integer"}]});
        assert!(check(s, "3").unwrap_err().contains("matches 2"));
        let s = json!({"allOf": [{"type": "number"}, {"minimum": 2}], "not": {"const": 5}});
        check(s.clone(), "3").unwrap();
        assert_eq!(check(s.clone(), "1").unwrap_err(), "the arguments must be at least 2, got 1");
        assert_eq!(check(s, "5").unwrap_err(), "the arguments has a form that is not allowed");
    }

    #[test]
    fn unchecked_keywords_never_refuse() {
        check(json!({"type": "string", "pattern": "^x$", "format": "email"}), "\"y\"").unwrap();
        check(json!({"$ref": "#/definitions/nope"}), "1").unwrap();
    }

    #[test]
    fn deep_and_wide_arguments_are_checked_without_recursion() {
        let deep = format!("{}{}", "[".repeat(200_000), "]".repeat(200_000));
        check(json!({"type": "array", "items": {"type": "array"}}), &deep).unwrap();
        let wide = format!("[{}2]", "1,".repeat(500_000));
        check(json!({"type": "array", "items": {"type": "integer"}}), &wide).unwrap();
        let bad = format!("[{}\"x\"]", "1,".repeat(500_000));
        let e = check(json!({"type": "array", "items": {"type": "integer"}}), &bad).unwrap_err();
        assert_eq!(e, "\"[500000]\" must be an integer, got string \"x\"");
    }

    #[test]
    fn bad_schemas_fail_when_the_file_loads() {
        assert!(check_schema(&json!({"type": "text"})).unwrap_err().contains("unknown type \"text\""));
        assert!(check_schema(&json!({"required": "city"})).unwrap_err().contains("$.required: must be an array"));
        assert!(check_schema(&json!({"properties": {"a": {"minimum": "1"}}}))
            .unwrap_err()
            .starts_with("$.properties.a.minimum: must be a number"));
        assert!(check_schema(&json!({"anyOf": []})).is_err());
        let mut deep = json!({});
        for _ in 0..100 {
            deep = json!({ "items": deep });
        }
        assert!(check_schema(&deep).unwrap_err().contains("deeper than 64"));
    }
}
