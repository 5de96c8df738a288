//! Exact, iterative conversion between [`JsonValue`] and Python objects.
//!
//! Values cross in both directions at any depth: a 100,000-deep list
//! converts in constant native stack, because both walks keep an explicit
//! stack instead of recursing. Numbers stay exact: an integer token becomes
//! a Python `int` (an integral `decimal.Decimal` when the text is longer
//! than `sys.get_int_max_str_digits()` allows `int()` to parse: both
//! conversions to `int` take time quadratic in the digits), a fraction
//! or exponent token becomes the nearest `float`, and a finite `float`
//! becomes its shortest round-trip text (`-0.0` stays `-0.0`).
//!
//! Python to JSON accepts `None`, `bool`, `int`, `float` (finite), a
//! finite `decimal.Decimal`, `str`, `list`, `tuple` and `dict` with `str` keys (subclasses included, read
//! through the C API as `json.dumps` does: never a method of the value, so
//! a binding's result cannot run code on the host's conversion path; a
//! `list` subclass's own `__len__`, an `int` subclass's `__repr__` or
//! `__int__` are not called). Anything else, a non-`str` key,
//! a NaN, a lone surrogate or a cycle is refused with the path of the
//! offending value (`$.items[3]`) and its type, so whoever passed it can
//! fix it.

use std::collections::HashSet;
use std::fmt::Write as _;

use pycage_protocol::{BuildError, JsonBuilder, JsonValue, Kind, ValueRef};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};

/// What JSON can carry, for error messages.
const ALLOWED: &str = "allowed: dict with str keys, list, tuple, str, int, float, bool, None";

/// A value `JSON -> Python` for one node: a finished object, or a container
/// to fill.
enum Open<'a, 'py> {
    List(Bound<'py, PyList>, pycage_protocol::ArrayIter<'a>),
    Dict(Bound<'py, PyDict>, pycage_protocol::ObjectIter<'a>, Option<&'a str>),
}

/// Converts a JSON value to plain Python objects, iteratively.
pub fn json_to_py<'py>(py: Python<'py>, value: ValueRef<'_>) -> PyResult<Bound<'py, PyAny>> {
    let mut stack: Vec<Open<'_, 'py>> = Vec::new();
    let mut current = value;
    loop {
        let mut finished: Option<Bound<'py, PyAny>> = match current.kind() {
            Kind::Null => Some(py.None().into_bound(py)),
            Kind::Bool(b) => Some(PyBool::new(py, b).to_owned().into_any()),
            Kind::Number(n) => Some(number_to_py(py, n.as_str(), n.is_integer_token())?),
            Kind::String(s) => Some(PyString::new(py, s).into_any()),
            Kind::Array(items) => {
                stack.push(Open::List(PyList::empty(py), items));
                None
            }
            Kind::Object(members) => {
                stack.push(Open::Dict(PyDict::new(py), members, None));
                None
            }
        };
        // Attach finished values upwards until a container has another child.
        loop {
            let Some(top) = stack.last_mut() else {
                return finished.ok_or_else(|| PyValueError::new_err("internal error: empty JSON value"));
            };
            if let Some(v) = finished.take() {
                match top {
                    Open::List(list, _) => list.append(v)?,
                    Open::Dict(dict, _, key) => dict.set_item(key.take().unwrap_or_default(), v)?,
                }
            }
            let next = match top {
                Open::List(_, items) => items.next(),
                Open::Dict(_, members, key) => members.next().map(|(k, v)| {
                    *key = Some(k);
                    v
                }),
            };
            match next {
                Some(child) => {
                    current = child;
                    break;
                }
                None => {
                    finished = stack.pop().map(|open| match open {
                        Open::List(list, _) => list.into_any(),
                        Open::Dict(dict, _, _) => dict.into_any(),
                    });
                }
            }
        }
    }
}

/// A JSON number token as a Python `int` (integer token) or `float`; an
/// integer token longer than the interpreter lets `int()` parse, as an
/// integral `decimal.Decimal`.
fn number_to_py<'py>(py: Python<'py>, text: &str, integer: bool) -> PyResult<Bound<'py, PyAny>> {
    if integer {
        if let Ok(i) = text.parse::<i64>() {
            return Ok(i.into_pyobject(py)?.into_any());
        }
        let digits = text.len() - usize::from(text.starts_with('-'));
        if max_int_digits(py).is_none_or(|max| digits <= max) {
            if let Ok(v) = py.get_type::<PyInt>().call1((text,)) {
                return Ok(v);
            }
        }
        // Decimal to int (and str to int) take time quadratic in the
        // digits: a child's 8 MiB line of them held the GIL for half an
        // hour. CPython limits int() for the same reason (CVE-2020-10735);
        // a Decimal is exact and parses in linear time.
        return decimal(py)?.call1((text,));
    }
    // Rust's parser rounds correctly, as float() does; overflow gives inf
    // in both (a hostile `1e400` is a valid JSON number).
    let f: f64 = text.parse().map_err(|_| PyValueError::new_err(format!("not a JSON number: {text}")))?;
    Ok(PyFloat::new(py, f).into_any())
}

fn decimal(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    py.import("decimal")?.getattr("Decimal")
}

/// The most digits an integer token may have to become an `int`:
/// `sys.get_int_max_str_digits()` (None when it is 0, no limit), or
/// CPython's default of 4,300 on 3.10, which has no such setting.
fn max_int_digits(py: Python<'_>) -> Option<usize> {
    const CPYTHON_DEFAULT: usize = 4300;
    let sys = match py.import("sys") {
        Ok(sys) => sys,
        Err(_) => return Some(CPYTHON_DEFAULT),
    };
    match sys.getattr("get_int_max_str_digits").and_then(|f| f.call0()).and_then(|v| v.extract::<usize>()) {
        Ok(0) => None,
        Ok(max) => Some(max),
        Err(_) => Some(CPYTHON_DEFAULT),
    }
}

/// Why a Python value cannot cross as JSON.
#[derive(Debug)]
pub enum ToJsonError {
    /// The value at `path` is not JSON; the message says why.
    Invalid { path: String, problem: String },
    /// Python itself failed (e.g. out of memory).
    Python(PyErr),
}

impl ToJsonError {
    /// The message, path first.
    pub fn message(&self, py: Python<'_>) -> String {
        match self {
            ToJsonError::Invalid { path, problem } => format!("{path}: {problem}"),
            ToJsonError::Python(e) => e.value(py).to_string(),
        }
    }

    /// The error as a Python `ValueError` (or the original Python error),
    /// prefixed with what was being converted.
    pub fn into_pyerr(self, py: Python<'_>, what: &str) -> PyErr {
        match self {
            ToJsonError::Invalid { .. } => PyValueError::new_err(format!("{what}: {}", self.message(py))),
            ToJsonError::Python(e) => e,
        }
    }
}

impl From<PyErr> for ToJsonError {
    fn from(e: PyErr) -> Self {
        ToJsonError::Python(e)
    }
}

/// What a container of the `Python -> JSON` walk is read as: through the
/// C API only.
enum Seq<'py> {
    List(Bound<'py, PyList>),
    Tuple(Bound<'py, PyTuple>),
    /// A `dict`'s `items()` snapshot (`PyDict_Items`).
    Items(Bound<'py, PyList>),
}

impl<'py> Seq<'py> {
    fn len(&self) -> usize {
        match self {
            Seq::List(l) | Seq::Items(l) => l.len(),
            Seq::Tuple(t) => t.len(),
        }
    }

    fn get(&self, i: usize) -> PyResult<Bound<'py, PyAny>> {
        match self {
            Seq::List(l) | Seq::Items(l) => l.get_item(i),
            Seq::Tuple(t) => t.get_item(i),
        }
    }
}

/// One open container of the `Python -> JSON` walk.
struct Frame<'py> {
    /// `list`/`tuple` to index, or the `dict`'s `items()` snapshot.
    seq: Seq<'py>,
    is_dict: bool,
    /// Index of the next child.
    next: usize,
    /// Identity of the container, for cycle detection.
    id: usize,
    /// Path segment of the child being converted: `[3]` or `.key`.
    segment: String,
}

/// Converts a Python object to an exact JSON value, iteratively.
pub fn py_to_json(value: &Bound<'_, PyAny>) -> Result<JsonValue, ToJsonError> {
    let mut b = JsonBuilder::new();
    let mut stack: Vec<Frame<'_>> = Vec::new();
    let mut open_ids: HashSet<usize> = HashSet::new();
    let mut current = value.clone();
    loop {
        let invalid = |stack: &[Frame<'_>], problem: String| ToJsonError::Invalid { path: path_of(stack), problem };
        let built = |r: Result<(), BuildError>, stack: &[Frame<'_>]| r.map_err(|e| invalid(stack, e.to_string()));
        if current.is_none() {
            built(b.null(), &stack)?;
        } else if let Ok(s) = current.cast::<PyString>() {
            match s.to_str() {
                Ok(s) => built(b.string(s), &stack)?,
                Err(_) => {
                    return Err(invalid(&stack, "str is not valid Unicode (it holds a lone surrogate)".into()));
                }
            }
        } else if let Ok(flag) = current.cast::<PyBool>() {
            built(b.bool(flag.is_true()), &stack)?;
        } else if current.is_instance_of::<PyInt>() {
            match current.extract::<i64>() {
                Ok(i) => built(b.i64(i), &stack)?,
                Err(_) => built(b.number(&big_int_text(&current)?), &stack)?,
            }
        } else if let Ok(f) = current.cast::<PyFloat>() {
            let f = f.value();
            if !f.is_finite() {
                let shown = if f.is_nan() {
                    "nan"
                } else if f > 0.0 {
                    "inf"
                } else {
                    "-inf"
                };
                return Err(invalid(
                    &stack,
                    format!("float {shown} is not JSON (NaN and infinities are not numbers in JSON)"),
                ));
            }
            built(b.f64(f), &stack)?;
        } else if current.is_instance_of::<PyList>() || current.is_instance_of::<PyTuple>() {
            let id = current.as_ptr() as usize;
            if !open_ids.insert(id) {
                return Err(invalid(&stack, "circular reference: the list contains itself".into()));
            }
            built(b.begin_array(), &stack)?;
            let seq = match current.cast::<PyList>() {
                Ok(list) => Seq::List(list.clone()),
                Err(_) => Seq::Tuple(current.cast::<PyTuple>().map_err(PyErr::from)?.clone()),
            };
            stack.push(Frame { seq, is_dict: false, next: 0, id, segment: String::new() });
        } else if let Ok(dict) = current.cast::<PyDict>() {
            let id = current.as_ptr() as usize;
            if !open_ids.insert(id) {
                return Err(invalid(&stack, "circular reference: the dict contains itself".into()));
            }
            // A snapshot: nothing below can observe a dict changing size.
            let items = dict.items();
            built(b.begin_object(), &stack)?;
            stack.push(Frame { seq: Seq::Items(items), is_dict: true, next: 0, id, segment: String::new() });
        } else if let Some(text) = decimal_text(&current, &stack)? {
            built(b.number(&text), &stack)?;
        } else {
            let ty = type_name(&current);
            return Err(invalid(&stack, format!("{ty} is not JSON ({ALLOWED})")));
        }
        // Find the next child, closing finished containers.
        loop {
            let Some(top) = stack.last_mut() else {
                return b.finish().map_err(|e| ToJsonError::Invalid { path: "$".into(), problem: e.to_string() });
            };
            let len = top.seq.len();
            if top.next < len {
                let item = top.seq.get(top.next)?;
                let index = top.next;
                top.next += 1;
                if top.is_dict {
                    // An `items()` entry is an exact 2-tuple.
                    let pair = item.cast::<PyTuple>().map_err(PyErr::from)?;
                    let key = pair.get_item(0)?;
                    let Ok(key) = key.cast::<PyString>() else {
                        let ty = type_name(&key);
                        let shown = key.repr().map(|r| r.to_string()).unwrap_or_else(|_| ty.clone());
                        return Err(invalid(
                            &stack,
                            format!("dict key {shown} ({ty}) is not a str; JSON object keys are str"),
                        ));
                    };
                    let Ok(key) = key.to_str() else {
                        return Err(invalid(
                            &stack,
                            "a dict key is not valid Unicode (it holds a lone surrogate)".into(),
                        ));
                    };
                    set_key_segment(&mut top.segment, key);
                    built(b.key(key), &stack)?;
                    current = pair.get_item(1)?;
                } else {
                    top.segment.clear();
                    let _ = write!(top.segment, "[{index}]");
                    current = item;
                }
                break;
            }
            built(b.end(), &stack)?;
            if let Some(done) = stack.pop() {
                open_ids.remove(&done.id);
            }
        }
    }
}

/// The number text of a finite `decimal.Decimal` (exactly that type: a
/// subclass could override `__str__`), which is how a very long integer
/// arrives (`number_to_py`) and so must be able to go back; None for any
/// other type.
fn decimal_text(value: &Bound<'_, PyAny>, stack: &[Frame<'_>]) -> Result<Option<String>, ToJsonError> {
    let py = value.py();
    // The name first: no import of `decimal` for every value refused.
    let ty = value.get_type();
    if ty.name().map(|n| n.to_string()).ok().as_deref() != Some("Decimal") || !ty.is(&decimal(py)?) {
        return Ok(None);
    }
    if !value.call_method0("is_finite")?.is_truthy()? {
        let problem = "Decimal NaN and infinities are not JSON numbers".to_string();
        return Err(ToJsonError::Invalid { path: path_of(stack), problem });
    }
    // str() of a finite Decimal is JSON's number grammar (`-0`, `1E+5`,
    // `0.001`), with no limit on its digits.
    Ok(Some(value.str()?.to_str()?.to_owned()))
}

/// Exact decimal text of an `int` outside `i64`.
fn big_int_text(value: &Bound<'_, PyAny>) -> Result<String, ToJsonError> {
    let py = value.py();
    // An int subclass (IntEnum, ...) may override __str__, __repr__ or
    // __int__: int's own __repr__ reads the C value, as json.dumps does.
    let int_repr = py.get_type::<PyInt>().getattr("__repr__")?;
    match int_repr.call1((value,)) {
        Ok(r) => Ok(r.cast::<PyString>().map_err(PyErr::from)?.to_str()?.to_owned()),
        // Over sys.get_int_max_str_digits(): Decimal(int) reads the C value
        // and does not go through a string; str(Decimal) has no limit.
        Err(_) => Ok(decimal(py)?.call1((value,))?.str()?.to_str()?.to_owned()),
    }
}

fn type_name(value: &Bound<'_, PyAny>) -> String {
    let ty = value.get_type();
    let name = ty.qualname().map(|n| n.to_string()).unwrap_or_else(|_| "object".into());
    match ty.module().map(|m| m.to_string()) {
        Ok(m) if m != "builtins" => format!("{m}.{name}"),
        _ => name,
    }
}

fn set_key_segment(segment: &mut String, key: &str) {
    segment.clear();
    let identifier = key.chars().next().is_some_and(|c| c.is_alphabetic() || c == '_')
        && key.chars().all(|c| c.is_alphanumeric() || c == '_');
    if identifier {
        segment.push('.');
        segment.push_str(key);
    } else {
        let mut quoted = Vec::new();
        pycage_protocol::write_json_string(&mut quoted, key);
        segment.push('[');
        segment.push_str(&String::from_utf8_lossy(&quoted));
        segment.push(']');
    }
}

/// `$` followed by the segments of the open containers.
fn path_of(stack: &[Frame<'_>]) -> String {
    let mut path = String::from("$");
    for frame in stack {
        path.push_str(&frame.segment);
    }
    path
}
