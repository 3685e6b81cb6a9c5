//! Go `encoding/json` as OpenKruise v1.9.0 applies it to a CloneSet's pod template when it records
//! a ControllerRevision.
//!
//! Kruise never encodes the template the user wrote. The controller decodes the CloneSet into typed
//! Go structs (`k8s.io/api` v0.32.10), encodes those with `encoding/json`, decodes the result into a
//! `map[string]interface{}` and marshals that map again. Each step leaves a mark on the bytes:
//!
//! * the typed decode matches field names case-sensitively and drops everything unknown; the typed
//!   encode then applies `omitempty`, writes zero values of fields without it (`"resources":{}`,
//!   `"containers":null`, `"creationTimestamp":null`), and runs the custom encoders of
//!   `resource.Quantity` (canonical form), `intstr.IntOrString` and `metav1.Time`;
//! * the generic decode turns every number into a float64;
//! * the final marshal sorts object keys bytewise, prints numbers the way `encoding/json` prints a
//!   float64 and escapes strings with HTML escaping on.
//!
//! Rather than mirroring the PodTemplateSpec type tree by hand, the typed steps are driven by
//! `gojson_podtemplate_schema.json`, which the Go program in `e2e/revision-golden` generates by
//! reflecting over the real Go types (`go run . schema`); `tests/revision_golden.rs` checks both the
//! schema and the output bytes against that program.
//!
//! Input is the template as a client reads it from the apiserver. A `serde_json::Value` no longer
//! knows how a number was spelled, so numbers are re-spelled the way the apiserver writes them (it
//! stores custom resources as unstructured JSON: integers as int64, everything else as float64).
//!
//! Kruise could never see a template that fails its typed decode (the CloneSet would not decode at
//! all). For such input this module does not fail: a value of the wrong JSON type, an unparsable
//! quantity or time, or an integer out of range decodes as the field's zero value, which is what
//! `encoding/json` does with a type mismatch.
//!
//! Known limits:
//! * Decimal literals read exactly only because serde_json's `float_roundtrip` feature is on
//!   (Cargo.toml): without it, one of 16-17 significant digits may be read one ulp off
//!   (`9.999999999999999e20` as `1e21`) and print differently from Go.
//! * Strings use the escapes of Go 1.22 and later (`\b` and `\f` short forms), the toolchains
//!   Kruise v1.9.0 is built with.

use std::collections::HashMap;
use std::sync::LazyLock;

use serde::Deserialize;
use serde_json::{Map, Number, Value};

mod quantity;
mod time;

// ---------------------------------------------------------------------------------------------
// Public API

/// The pod template as Kruise holds it just before writing revision data: decoded into the typed
/// Go `PodTemplateSpec`, encoded, and decoded again into generic JSON. Numbers are what a Go float64
/// holds (integers stay integers up to 2^53; larger ones are rounded). The result is always an object;
/// it has no `"$patch"` key.
pub(crate) fn normalize_pod_template(template: &Value) -> Value {
    let schema = &*SCHEMA;
    schema.convert(&schema.root, Some(template), Numbers::Float64).0
}

/// The pod template decoded into the typed Go `PodTemplateSpec` and encoded again, as Kruise's
/// webhook writes it back into the CloneSet: like [`normalize_pod_template`] but without the
/// generic decode, so integers keep every digit and raw fields stay as they are.
pub(crate) fn typed_round_trip_pod_template(template: &Value) -> Value {
    let schema = &*SCHEMA;
    schema.convert(&schema.root, Some(template), Numbers::Exact).0
}

/// The fields of `template` (a pod template as the apiserver stores it) that the typed decode of
/// [`normalize_pod_template`] drops because Kruise's Go types have no such field: fields of a
/// Kubernetes newer than 1.32, misspelt or wrongly cased ones. Each is a path from `prefix`
/// (`spec.template`): `.name` for a field, `[i]` for a list item, `[key]` for a map value; only
/// the outermost dropped field of a subtree. Not listed, since nothing is lost with them: a field
/// whose value is null, and keys starting with `$`, merge-patch directives that name no field
/// (`kubectl kruise rollout undo` writes `$patch` into the template).
pub fn dropped_fields(template: &Value, prefix: &str) -> Vec<String> {
    let schema = &*SCHEMA;
    let mut path = prefix.to_string();
    let mut out = Vec::new();
    schema.dropped(&schema.root, template, &mut path, &mut out);
    out
}

/// Every field path of the pod template that Kruise's Go types have, relative to the template:
/// `.` between fields, `[]` after a list, `{}` after a map (`spec.containers[].image`). Leaves
/// with an encoding of their own (quantities, times, raw JSON) end a path.
pub fn pod_template_field_paths() -> Vec<String> {
    let schema = &*SCHEMA;
    let mut out = Vec::new();
    schema.field_paths(&schema.root, &mut String::new(), &mut Vec::new(), &mut out);
    out
}

/// Go's `json.Marshal` of a value of the Go struct type `type_name` (for example
/// `"k8s.io/api/core/v1.PersistentVolumeClaim"`, any struct in the schema) decoded from `input`:
/// fields in declaration order, as a typed encode writes them, map keys sorted. `None` when the
/// schema has no such type.
///
/// Known limit: raw fields (`managedFields[].fieldsV1`) are re-encoded with sorted keys, where Go
/// writes the stored bytes.
pub(crate) fn encode_typed(type_name: &str, input: &Value) -> Option<Vec<u8>> {
    let schema = &*SCHEMA;
    let index = *schema.by_name.get(type_name)?;
    let mut out = Vec::new();
    schema.write_typed(&mut out, &Kind::Struct(index), Some(input));
    Some(out)
}

/// Go's `json.Marshal` of a generic value (`map[string]interface{}` and friends): object keys sorted
/// bytewise, every number printed as a float64, strings escaped with HTML escaping.
///
/// For revision data read back from the apiserver this reproduces the exact bytes Kruise stored, because
/// Kruise produced them with this same marshal.
pub fn encode_value(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    write_value(&mut out, value);
    out
}

/// Appends `s` as a JSON string literal the way Go's `encoding/json` writes it with HTML escaping
/// (the default of `json.Marshal`): `"` and `\` escaped, `\b \f \n \r \t` short forms, other control
/// characters as `\u00XX`, `< > &` as `\u003c \u003e \u0026`, U+2028 and U+2029 as `\u2028 \u2029`,
/// everything else (DEL and all non-ASCII) raw.
pub(crate) fn append_string(out: &mut Vec<u8>, s: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let mut buf = [0u8; 4];
    for c in s.chars() {
        match c {
            '"' => out.extend_from_slice(b"\\\""),
            '\\' => out.extend_from_slice(b"\\\\"),
            '\u{8}' => out.extend_from_slice(b"\\b"),
            '\u{c}' => out.extend_from_slice(b"\\f"),
            '\n' => out.extend_from_slice(b"\\n"),
            '\r' => out.extend_from_slice(b"\\r"),
            '\t' => out.extend_from_slice(b"\\t"),
            '<' | '>' | '&' | '\u{0}'..='\u{1f}' => {
                let b = c as u8;
                out.extend_from_slice(b"\\u00");
                out.push(HEX[usize::from(b >> 4)]);
                out.push(HEX[usize::from(b & 0xf)]);
            }
            '\u{2028}' => out.extend_from_slice(b"\\u2028"),
            '\u{2029}' => out.extend_from_slice(b"\\u2029"),
            _ => out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes()),
        }
    }
    out.push(b'"');
}

/// A float64 as Go's `encoding/json` prints it: the shortest digits that read back as the same
/// float64, in plain notation when 1e-6 <= |f| < 1e21 (`100`, `0.5`, `-0`), otherwise in exponent
/// notation with Go's exponent style (`1e+21`, `1.5e-7`).
pub(crate) fn format_float(f: f64) -> String {
    if f == 0.0 {
        return if f.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let abs = f.abs();
    // Rust's `{:e}` also gives the shortest round-tripping digits, as d[.ddd]e<exp>.
    let sci = format!("{abs:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::with_capacity(digits.len() + 8);
    if f < 0.0 {
        out.push('-');
    }
    if !(1e-6..1e21).contains(&abs) {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        out.push('e');
        if exp < 0 {
            // strconv pads the exponent to two digits; encoding/json strips the pad of a negative one.
            out.push('-');
            out.push_str(&(-exp).to_string());
        } else {
            out.push('+');
            if exp < 10 {
                out.push('0');
            }
            out.push_str(&exp.to_string());
        }
        return out;
    }
    let point = exp + 1; // digits before the decimal point
    if point <= 0 {
        out.push_str("0.");
        out.extend(std::iter::repeat_n('0', point.unsigned_abs() as usize));
        out.push_str(&digits);
    } else if point as usize >= digits.len() {
        out.push_str(&digits);
        out.extend(std::iter::repeat_n('0', point as usize - digits.len()));
    } else {
        out.push_str(&digits[..point as usize]);
        out.push('.');
        out.push_str(&digits[point as usize..]);
    }
    out
}

/// What a Go `resource.Quantity` decoded from the JSON string `s` encodes as: the input itself when
/// `ParseQuantity` found it canonical (`"100m"`, `"2Gi"`, `"1e3"`, even `"+1"`), otherwise the
/// canonical form (`"1024Mi"` → `"1Gi"`, `"0.5"` → `"500m"`, `"1000"` → `"1k"`, `"1.5Gi"` →
/// `"1536Mi"`). `None` when Go rejects the string.
#[cfg(test)]
pub(crate) fn canonical_quantity(s: &str) -> Option<String> {
    quantity::marshal(s)
}

/// What Kruise's webhook stores for one value of a container's `resources.limits`/`requests`:
/// the JSON value decoded as a `resource.Quantity`, rounded up to milli-units
/// (`SetDefaults_ResourceList`: `Quantity.RoundUp(-3)`) and encoded again. `100u` becomes `1m`;
/// a value already at milli precision or coarser keeps its spelling when Go would (`"0.1"` is
/// then encoded `"100m"`, as always). JSON `null` decodes as zero. `None`: not a quantity (the
/// webhook would reject the object).
pub(crate) fn quantity_rounded_up_to_milli(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => quantity::marshal_json_string_rounded_up_to_milli(s),
        Value::Number(n) => quantity::marshal_rounded_up_to_milli(&apiserver_number_text(n)),
        Value::Null => Some("0".into()),
        _ => None,
    }
}

// ---------------------------------------------------------------------------------------------
// Encoding generic values

fn write_value(out: &mut Vec<u8>, value: &Value) {
    write_json(out, value, &|out, n| out.extend_from_slice(format_float(number_as_f64(n)).as_bytes()));
}

/// Like [`write_value`], but integers keep every digit (a typed encode of int64 and uint64 fields).
fn write_exact(out: &mut Vec<u8>, value: &Value) {
    write_json(out, value, &|out, n| match n.is_i64() || n.is_u64() {
        true => out.extend_from_slice(n.to_string().as_bytes()),
        false => out.extend_from_slice(format_float(number_as_f64(n)).as_bytes()),
    });
}

/// Go's encoding of generic JSON, with numbers written by `number`.
fn write_json(out: &mut Vec<u8>, value: &Value, number: &dyn Fn(&mut Vec<u8>, &Number)) {
    match value {
        Value::Null => out.extend_from_slice(b"null"),
        Value::Bool(true) => out.extend_from_slice(b"true"),
        Value::Bool(false) => out.extend_from_slice(b"false"),
        Value::Number(n) => number(out, n),
        Value::String(s) => append_string(out, s),
        Value::Array(items) => {
            out.push(b'[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                write_json(out, item, number);
            }
            out.push(b']');
        }
        Value::Object(map) => write_sorted_object(out, map, |out, v| write_json(out, v, number)),
    }
}

/// An object with its keys sorted bytewise (how Go encodes maps), each value written by `value`.
fn write_sorted_object(out: &mut Vec<u8>, map: &Map<String, Value>, mut value: impl FnMut(&mut Vec<u8>, &Value)) {
    // serde_json's map is usually sorted already, but not with its preserve_order feature.
    let mut entries: Vec<(&String, &Value)> = map.iter().collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push(b'{');
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        append_string(out, k);
        out.push(b':');
        value(out, v);
    }
    out.push(b'}');
}

/// The float64 Go's generic decode makes of a number (correctly rounded, like strconv.ParseFloat).
fn number_as_f64(n: &Number) -> f64 {
    n.as_f64().unwrap_or(0.0)
}

/// A float64 as a `Value`: an integer variant when it holds an integer (so that serde users see `80`,
/// not `80.0`), otherwise a float.
fn float_value(f: f64) -> Value {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if f.fract() == 0.0 && !(f == 0.0 && f.is_sign_negative()) {
        if (-TWO_63..TWO_63).contains(&f) {
            return Value::from(f as i64);
        }
        if (0.0..2.0 * TWO_63).contains(&f) {
            return Value::from(f as u64);
        }
    }
    Number::from_f64(f).map_or(Value::Null, Value::Number)
}

/// The text of a number as the apiserver writes it back: int64 values as integers, anything else
/// through float64.
fn apiserver_number_text(n: &Number) -> String {
    match n.as_i64() {
        Some(i) => i.to_string(),
        None => format_float(number_as_f64(n)),
    }
}

/// Generic decode of arbitrary JSON (interface{} and raw fields): numbers become float64.
fn generic(value: &Value) -> Value {
    match value {
        Value::Number(n) => float_value(number_as_f64(n)),
        Value::Array(items) => Value::Array(items.iter().map(generic).collect()),
        Value::Object(map) => Value::Object(map.iter().map(|(k, v)| (k.clone(), generic(v))).collect()),
        other => other.clone(),
    }
}

// ---------------------------------------------------------------------------------------------
// The schema

static SCHEMA: LazyLock<Schema> =
    LazyLock::new(|| Schema::parse(include_str!("../gojson_podtemplate_schema.json")).expect("gojson_podtemplate_schema.json is invalid"));

/// How `encoding/json` treats a Go type, reduced to what changes the bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Kind {
    String,
    Bool,
    /// A signed integer of that many bits.
    Int(u32),
    /// An unsigned integer of that many bits.
    Uint(u32),
    /// `resource.Quantity` (a struct: never empty for omitempty).
    Quantity,
    /// `intstr.IntOrString` (a struct).
    IntOrString,
    /// `metav1.Time` (a struct).
    Time,
    /// `interface{}`: generic JSON, empty when nil.
    Any,
    /// `metav1.FieldsV1` and `runtime.RawExtension`: structs holding raw JSON, null when unset.
    RawStruct,
    /// A struct, by index into `Schema::structs`.
    Struct(usize),
    Ptr(Box<Kind>),
    Slice(Box<Kind>),
    /// A map with string keys.
    Map(Box<Kind>),
}

#[derive(Debug, Clone)]
struct Field {
    name: String,
    omit_empty: bool,
    kind: Kind,
}

#[derive(Debug)]
struct Schema {
    root: Kind,
    structs: Vec<Vec<Field>>,
    /// Go type name (`k8s.io/api/core/v1.PodSpec`) → index into `structs`.
    by_name: HashMap<String, usize>,
}

#[derive(Deserialize)]
struct RawSchema {
    root: String,
    leaves: HashMap<String, String>,
    types: HashMap<String, Vec<RawField>>,
}

#[derive(Deserialize)]
struct RawField {
    name: String,
    omitempty: bool,
    #[serde(rename = "type")]
    ty: String,
}

/// How [`Schema::convert`] writes numbers and raw fields: as Go's generic decode leaves them
/// (float64), or as the typed encode writes them.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Numbers {
    Float64,
    Exact,
}

impl Schema {
    fn parse(text: &str) -> Result<Self, String> {
        let raw: RawSchema = serde_json::from_str(text).map_err(|e| e.to_string())?;
        for leaf in raw.leaves.keys() {
            if !matches!(leaf.as_str(), "quantity" | "intorstring" | "time" | "fieldsv1" | "rawextension" | "any") {
                return Err(format!("the schema uses leaf kind {leaf:?}, which gojson.rs does not implement"));
            }
        }
        let mut names: Vec<&String> = raw.types.keys().collect();
        names.sort();
        let index: HashMap<&str, usize> = names.iter().enumerate().map(|(i, n)| (n.as_str(), i)).collect();
        let mut structs = Vec::with_capacity(names.len());
        for name in &names {
            let fields = raw.types[*name]
                .iter()
                .map(|f| {
                    let kind = parse_kind(&f.ty, &index).map_err(|e| format!("{name}.{}: {e}", f.name))?;
                    Ok(Field { name: f.name.clone(), omit_empty: f.omitempty, kind })
                })
                .collect::<Result<Vec<_>, String>>()?;
            structs.push(fields);
        }
        let root = parse_kind(&raw.root, &index)?;
        let by_name = index.into_iter().map(|(name, i)| (name.to_string(), i)).collect();
        Ok(Schema { root, structs, by_name })
    }

    /// Like [`Schema::convert`] with exact numbers, but writes the encoding's bytes with struct
    /// fields in declaration order, as `encoding/json` does for a typed value.
    fn write_typed(&self, out: &mut Vec<u8>, kind: &Kind, input: Option<&Value>) {
        match kind {
            Kind::Struct(index) => {
                let object = input.and_then(Value::as_object);
                out.push(b'{');
                let mut first = true;
                for field in &self.structs[*index] {
                    let value = object.and_then(|m| m.get(&field.name));
                    if field.omit_empty && self.convert(&field.kind, value, Numbers::Exact).1 {
                        continue;
                    }
                    if !first {
                        out.push(b',');
                    }
                    first = false;
                    append_string(out, &field.name);
                    out.push(b':');
                    self.write_typed(out, &field.kind, value);
                }
                out.push(b'}');
            }
            Kind::Ptr(elem) => match input {
                None | Some(Value::Null) => out.extend_from_slice(b"null"),
                Some(v) => self.write_typed(out, elem, Some(v)),
            },
            Kind::Slice(elem) => match input {
                Some(Value::Array(items)) => {
                    out.push(b'[');
                    for (i, item) in items.iter().enumerate() {
                        if i > 0 {
                            out.push(b',');
                        }
                        self.write_typed(out, elem, Some(item));
                    }
                    out.push(b']');
                }
                _ => out.extend_from_slice(b"null"),
            },
            Kind::Map(elem) => match input {
                Some(Value::Object(map)) => write_sorted_object(out, map, |out, v| self.write_typed(out, elem, Some(v))),
                _ => out.extend_from_slice(b"null"),
            },
            leaf => write_exact(out, &self.convert(leaf, input, Numbers::Exact).0),
        }
    }

    /// Decodes `input` (absent when `None`) into a Go value of kind `kind` and encodes it again.
    /// Returns the generic JSON of the encoding and whether the Go value is "empty" for omitempty.
    fn convert(&self, kind: &Kind, input: Option<&Value>, numbers: Numbers) -> (Value, bool) {
        let int_value = |n: i64| if numbers == Numbers::Exact { Value::from(n) } else { float_value(n as f64) };
        let raw_value = |v: &Value| if numbers == Numbers::Exact { v.clone() } else { generic(v) };
        match kind {
            Kind::String => match input {
                Some(Value::String(s)) => (Value::String(s.clone()), s.is_empty()),
                _ => (Value::String(String::new()), true),
            },
            Kind::Bool => match input {
                Some(Value::Bool(b)) => (Value::Bool(*b), !*b),
                _ => (Value::Bool(false), true),
            },
            Kind::Int(bits) => {
                let n = match input {
                    Some(Value::Number(n)) => parse_int(&apiserver_number_text(n), *bits).unwrap_or(0),
                    _ => 0,
                };
                (int_value(n), n == 0)
            }
            Kind::Uint(bits) => {
                let n = match input {
                    Some(Value::Number(n)) => parse_uint(&apiserver_number_text(n), *bits).unwrap_or(0),
                    _ => 0,
                };
                (if numbers == Numbers::Exact { Value::from(n) } else { float_value(n as f64) }, n == 0)
            }
            Kind::Quantity => {
                let text = match input {
                    Some(Value::String(s)) => quantity::marshal_json_string(s),
                    Some(Value::Number(n)) => quantity::marshal(&apiserver_number_text(n)),
                    _ => None,
                };
                (Value::String(text.unwrap_or_else(|| "0".into())), false)
            }
            Kind::IntOrString => match input {
                Some(Value::String(s)) => (Value::String(s.clone()), false),
                Some(Value::Number(n)) => (float_value(parse_int(&apiserver_number_text(n), 32).unwrap_or(0) as f64), false),
                _ => (float_value(0.0), false),
            },
            Kind::Time => {
                let formatted = match input {
                    Some(Value::String(s)) => time::reformat_rfc3339(s),
                    _ => None,
                };
                (formatted.map_or(Value::Null, Value::String), false)
            }
            Kind::Any => match input {
                None | Some(Value::Null) => (Value::Null, true),
                Some(v) => (raw_value(v), false),
            },
            Kind::RawStruct => match input {
                None | Some(Value::Null) => (Value::Null, false),
                Some(v) => (raw_value(v), false),
            },
            Kind::Ptr(elem) => match input {
                None | Some(Value::Null) => (Value::Null, true),
                // A non-null token allocates the pointee even when its decode then fails.
                Some(v) => (self.convert(elem, Some(v), numbers).0, false),
            },
            Kind::Slice(elem) => match input {
                Some(Value::Array(items)) => {
                    (Value::Array(items.iter().map(|item| self.convert(elem, Some(item), numbers).0).collect()), items.is_empty())
                }
                _ => (Value::Null, true),
            },
            Kind::Map(elem) => match input {
                Some(Value::Object(map)) => {
                    (Value::Object(map.iter().map(|(k, v)| (k.clone(), self.convert(elem, Some(v), numbers).0)).collect()), map.is_empty())
                }
                _ => (Value::Null, true),
            },
            Kind::Struct(index) => {
                let object = match input {
                    Some(Value::Object(map)) => Some(map),
                    _ => None,
                };
                let mut out = Map::new();
                for field in &self.structs[*index] {
                    let (value, empty) = self.convert(&field.kind, object.and_then(|m| m.get(&field.name)), numbers);
                    if !(field.omit_empty && empty) {
                        out.insert(field.name.clone(), value);
                    }
                }
                (Value::Object(out), false)
            }
        }
    }
}

impl Schema {
    /// See [`dropped_fields`]; `path` is where `value` sits, and is left as it was found.
    fn dropped(&self, kind: &Kind, value: &Value, path: &mut String, out: &mut Vec<String>) {
        let at = path.len();
        match (kind, value) {
            (Kind::Ptr(elem), v) => self.dropped(elem, v, path, out),
            (Kind::Slice(elem), Value::Array(items)) => {
                for (i, item) in items.iter().enumerate() {
                    path.push_str(&format!("[{i}]"));
                    self.dropped(elem, item, path, out);
                    path.truncate(at);
                }
            }
            (Kind::Map(elem), Value::Object(map)) => {
                for (key, item) in map {
                    path.push_str(&format!("[{key}]"));
                    self.dropped(elem, item, path, out);
                    path.truncate(at);
                }
            }
            (Kind::Struct(index), Value::Object(map)) => {
                for (key, item) in map {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(key);
                    match self.structs[*index].iter().find(|f| f.name == *key) {
                        Some(field) => self.dropped(&field.kind, item, path, out),
                        None if !key.starts_with('$') && !item.is_null() => out.push(path.clone()),
                        None => {}
                    }
                    path.truncate(at);
                }
            }
            // A leaf, or a value of the wrong JSON type (decoded as the zero value): no fields.
            _ => {}
        }
    }

    /// See [`pod_template_field_paths`]; `open` holds the structs being walked, so that a type
    /// containing itself ends the walk instead of looping.
    fn field_paths(&self, kind: &Kind, path: &mut String, open: &mut Vec<usize>, out: &mut Vec<String>) {
        let at = path.len();
        match kind {
            Kind::Ptr(elem) => self.field_paths(elem, path, open, out),
            Kind::Slice(elem) | Kind::Map(elem) => {
                path.push_str(if matches!(kind, Kind::Slice(_)) { "[]" } else { "{}" });
                self.field_paths(elem, path, open, out);
                path.truncate(at);
            }
            Kind::Struct(index) if !open.contains(index) => {
                open.push(*index);
                for field in &self.structs[*index] {
                    if !path.is_empty() {
                        path.push('.');
                    }
                    path.push_str(&field.name);
                    out.push(path.clone());
                    self.field_paths(&field.kind, path, open, out);
                    path.truncate(at);
                }
                open.pop();
            }
            _ => {}
        }
    }
}

fn parse_kind(expr: &str, index: &HashMap<&str, usize>) -> Result<Kind, String> {
    if let Some(rest) = expr.strip_prefix('*') {
        return Ok(Kind::Ptr(Box::new(parse_kind(rest, index)?)));
    }
    if let Some(rest) = expr.strip_prefix("[]") {
        return Ok(Kind::Slice(Box::new(parse_kind(rest, index)?)));
    }
    if let Some(rest) = expr.strip_prefix("map[]") {
        return Ok(Kind::Map(Box::new(parse_kind(rest, index)?)));
    }
    if let Some(name) = expr.strip_prefix("struct:") {
        return index.get(name).map(|i| Kind::Struct(*i)).ok_or_else(|| format!("unknown struct {name}"));
    }
    Ok(match expr {
        "string" => Kind::String,
        "bool" => Kind::Bool,
        "int8" => Kind::Int(8),
        "int16" => Kind::Int(16),
        "int32" => Kind::Int(32),
        "int64" => Kind::Int(64),
        "uint8" => Kind::Uint(8),
        "uint16" => Kind::Uint(16),
        "uint32" => Kind::Uint(32),
        "uint64" => Kind::Uint(64),
        "quantity" => Kind::Quantity,
        "intorstring" => Kind::IntOrString,
        "time" => Kind::Time,
        "any" => Kind::Any,
        "fieldsv1" | "rawextension" => Kind::RawStruct,
        other => return Err(format!("kind {other:?} is not implemented by gojson.rs")),
    })
}

/// strconv.ParseInt(text, 10, bits): optional sign, decimal digits, in range.
fn parse_int(text: &str, bits: u32) -> Option<i64> {
    let n: i64 = text.parse().ok()?;
    let limit = 1i128 << (bits - 1);
    (i128::from(n) >= -limit && i128::from(n) < limit).then_some(n)
}

/// strconv.ParseUint(text, 10, bits).
fn parse_uint(text: &str, bits: u32) -> Option<u64> {
    if text.starts_with('+') {
        return None;
    }
    let n: u64 = text.parse().ok()?;
    (bits >= 64 || n < (1u64 << bits)).then_some(n)
}

/// Go's `unicode.IsSpace`, which `strings.TrimSpace` uses.
fn is_go_space(c: char) -> bool {
    matches!(c, '\t' | '\n' | '\u{b}' | '\u{c}' | '\r' | ' ' | '\u{85}' | '\u{a0}') || (c > '\u{ff}' && c.is_whitespace())
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn encoded(v: &Value) -> String {
        String::from_utf8(encode_value(v)).unwrap()
    }

    #[test]
    fn schema_loads() {
        assert!(matches!(SCHEMA.root, Kind::Struct(_)));
        assert!(SCHEMA.structs.len() > 50);
    }

    #[test]
    fn floats_print_like_go() {
        let cases = [
            (0.0, "0"),
            (-0.0, "-0"),
            (1.0, "1"),
            (-42.0, "-42"),
            (0.5, "0.5"),
            (0.1, "0.1"),
            (123.456, "123.456"),
            (1e-6, "0.000001"),
            (1.5e-7, "1.5e-7"),
            (1e-10, "1e-10"),
            (1e20, "100000000000000000000"),
            (1e21, "1e+21"),
            (1.234e100, "1.234e+100"),
            (9007199254740993.0, "9007199254740992"),
            (9223372036854775807.0, "9223372036854776000"),
            (5e-324, "5e-324"),
            (f64::MAX, "1.7976931348623157e+308"),
        ];
        for (f, want) in cases {
            assert_eq!(format_float(f), want, "{f:e}");
        }
    }

    #[test]
    fn strings_escape_like_go() {
        let v = json!("a<b>&c\"\\ \u{1}\u{8}\u{c}\n\r\t\u{1f}\u{7f} é 日本 😀 \u{2028}\u{2029}");
        assert_eq!(encoded(&v), r#""a\u003cb\u003e\u0026c\"\\ \u0001\b\f\n\r\t\u001f"#.to_string() + "\u{7f} é 日本 😀 \\u2028\\u2029\"");
    }

    #[test]
    fn objects_sort_keys_bytewise_and_numbers_go_through_float64() {
        let v = json!({"b": 1, "a": [true, null, 2.5], "B": {"é": 1, "z": 9007199254740993u64}, "$patch": "replace"});
        assert_eq!(encoded(&v), r#"{"$patch":"replace","B":{"z":9007199254740992,"é":1},"a":[true,null,2.5],"b":1}"#);
    }

    #[test]
    fn quantities_canonicalize_like_go() {
        let cases = [
            ("0", "0"),
            ("100m", "100m"),
            ("1024Mi", "1Gi"),
            ("0.5", "500m"),
            ("1000", "1k"),
            ("1e3", "1e3"),
            ("1.5Gi", "1536Mi"),
            ("2Gi", "2Gi"),
            ("+1", "+1"),
            ("01Gi", "01Gi"),
            ("1.0", "1"),
            ("12e6", "12e6"),
            ("1.5e3", "1500"),
            ("0.5Ki", "512"),
            ("1.5Ki", "1536"),
            ("1Pi", "1Pi"),
            ("8Ei", "9223372036854775807"),
            ("1000E", "1"),
            ("0.1n", "1n"),
            ("1e-10", "1e-9"),
            ("-0.0000000001", "-1n"),
            ("-1.5Gi", "-1536Mi"),
            ("123456789012345678901234567890", "123456789012345678901234567890"),
            ("-", "0"),
            (".", "0"),
            (" 1Gi ", "1Gi"),
            ("1.", "1."),
        ];
        for (input, want) in cases {
            assert_eq!(canonical_quantity(input).as_deref(), Some(want), "{input}");
        }
        for bad in ["", "1Gb", "abc", "1e", "1.2.3", ".e-20", "--1", "1 Gi"] {
            assert_eq!(canonical_quantity(bad), None, "{bad}");
        }
    }

    #[test]
    fn typed_decode_drops_unknown_fields_and_writes_zero_values() {
        let t = json!({
            "$patch": "merge",
            "unknown": 1,
            "metadata": {"labels": {"app": "x", "n": null}, "annotations": {}},
            "spec": {
                "containers": [{"name": "c", "Image": "wrong-case", "resources": {"limits": {}, "requests": {"cpu": 0.5}}}],
                "initContainers": [],
                "securityContext": {},
                "terminationGracePeriodSeconds": 30.0,
                "priority": "high",
                "activeDeadlineSeconds": 1.5
            }
        });
        assert_eq!(
            encoded(&normalize_pod_template(&t)),
            concat!(
                r#"{"metadata":{"creationTimestamp":null,"labels":{"app":"x","n":""}},"#,
                r#""spec":{"activeDeadlineSeconds":0,"containers":[{"name":"c","resources":{"requests":{"cpu":"500m"}}}],"#,
                r#""priority":0,"securityContext":{},"terminationGracePeriodSeconds":30}}"#
            )
        );
    }

    #[test]
    fn dropped_fields_are_named_by_their_path_outermost_first() {
        let t = json!({
            "$patch": "replace",
            "metadata": {"labels": {"app": "x"}, "labelz": {"a": "b"}, "annotations": {"k": "v"}},
            "spec": {
                "hostnameOverride": "web",
                "hostnamee": "typo",
                "schedulingGroup": null,
                "containers": [
                    {"name": "a", "image": "i", "Image": "wrong-case"},
                    {"name": "b", "image": "i", "restartPolicyRules": [{"action": "Restart"}],
                     "env": [{"name": "E", "valueFrom": {"fileKeyRef": {"path": "p", "key": "k"}}}],
                     "lifecycle": {"stopSignal": "SIGUSR1", "preStop": {"httpGet": {"port": 80, "protocol": "HTTPS"}}},
                     "resources": {"limits": {"cpu": "1"}}}
                ],
                "initContainers": [{"name": "init", "image": "i", "volumeMounts": [{"name": "v", "mountPath": "/v", "bindMountOptions": {}}]}],
                "volumes": [{"name": "v", "projected": {"sources": [{"secret": {"name": "s", "items": [{"key": "k", "path": "p", "user": 1}]}}]}}]
            }
        });
        assert_eq!(
            dropped_fields(&t, "spec.template"),
            [
                "spec.template.metadata.labelz",
                "spec.template.spec.containers[0].Image",
                "spec.template.spec.containers[1].env[0].valueFrom.fileKeyRef",
                "spec.template.spec.containers[1].lifecycle.preStop.httpGet.protocol",
                "spec.template.spec.containers[1].lifecycle.stopSignal",
                "spec.template.spec.containers[1].restartPolicyRules",
                "spec.template.spec.hostnameOverride",
                "spec.template.spec.hostnamee",
                "spec.template.spec.initContainers[0].volumeMounts[0].bindMountOptions",
                "spec.template.spec.volumes[0].projected.sources[0].secret.items[0].user",
            ]
        );
        let without: Value = serde_json::from_str(&encoded(&normalize_pod_template(&t))).unwrap();
        assert_eq!(dropped_fields(&without, "spec.template"), Vec::<String>::new(), "what the typed decode keeps drops nothing");
    }

    #[test]
    fn dropped_fields_ignore_values_of_the_wrong_type_and_the_fields_of_leaves() {
        let t = json!({
            "spec": {"containers": "not a list", "securityContext": [1], "overhead": {"cpu": {"nested": 1}},
                     "volumes": [{"name": "v", "emptyDir": {"sizeLimit": {"x": 1}}}]},
            "metadata": {"managedFields": [{"fieldsV1": {"f:anything": {}}}], "creationTimestamp": {"y": 1}}
        });
        assert_eq!(dropped_fields(&t, ""), Vec::<String>::new());
        assert_eq!(dropped_fields(&json!({"specs": {}}), ""), ["specs"]);
        assert_eq!(dropped_fields(&json!(null), "spec.template"), Vec::<String>::new());
    }

    #[test]
    fn the_field_paths_of_the_template_follow_lists_maps_and_embedded_structs() {
        let paths = pod_template_field_paths();
        for p in [
            "metadata",
            "metadata.labels",
            "metadata.managedFields[].fieldsV1",
            "spec.containers[].image",
            "spec.containers[].resources.limits",
            "spec.initContainers[].restartPolicy",
            "spec.ephemeralContainers[].targetContainerName",
            "spec.ephemeralContainers[].image",
            "spec.volumes[].projected.sources[].secret.items[].path",
        ] {
            assert!(paths.iter().any(|q| q == p), "{p} missing");
        }
        for p in ["spec.hostnameOverride", "spec.containers[].restartPolicyRules", "spec.containers[].resources.limits{}"] {
            assert!(!paths.iter().any(|q| q == p), "{p} listed");
        }
        let unique: std::collections::BTreeSet<&String> = paths.iter().collect();
        assert_eq!(unique.len(), paths.len());
    }

    /// The committed list of newer fields (`api::template_fields`) fits this schema: each field
    /// is missing from it, sits in a struct it has, and is the outermost missing one.
    #[test]
    fn the_newer_fields_list_names_fields_this_schema_lacks_under_fields_it_has() {
        let paths: std::collections::BTreeSet<String> = pod_template_field_paths().into_iter().collect();
        let newer = crate::api::template_fields::newer_fields().fields;
        assert!(!newer.is_empty());
        for field in &newer {
            assert!(!paths.contains(field), "{field} is in the schema");
            let parent = field.rsplit_once('.').map(|(p, _)| p.trim_end_matches(['[', ']', '{', '}']));
            assert!(parent.is_none_or(|p| paths.contains(p)), "{field}: its parent is not in the schema");
        }
    }

    #[test]
    fn odd_input_never_panics() {
        for t in [json!(null), json!([]), json!("x"), json!({"spec": []}), json!({"spec": {"containers": {"a": 1}}})] {
            let out = normalize_pod_template(&t);
            assert!(out.is_object());
        }
        assert_eq!(encoded(&normalize_pod_template(&json!(null))), r#"{"metadata":{"creationTimestamp":null},"spec":{"containers":null}}"#);
    }
}
