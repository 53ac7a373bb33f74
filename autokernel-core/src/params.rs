//! Semantic parameters of a kind (an epsilon, a bias flag, a cast order): their declaration
//! in the catalogue ([`ParamSpec`]), the values a target carries ([`Params`]), and the check
//! of one against the other ([`resolve`]).
//!
//! A parameter is part of the kernel contract: the judge hands its value to the input
//! generator, the reference, the eager baseline and `kernel_fn` (as a keyword argument).
//! Every parameter has a default that reproduces the kind's semantics from before it had
//! parameters, so a target without any (an older `plan.json`) means what it meant.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Parameter values by name, as JSON (numbers, booleans, strings). Sorted by name, so that
/// equal parameter sets serialise and print alike.
pub type Params = BTreeMap<String, Value>;

/// The values a parameter may take.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
#[non_exhaustive]
pub enum ParamType {
    /// A finite number, strictly greater than `above` when that is set (an epsilon: above 0).
    Float {
        /// The exclusive lower bound, if any.
        #[serde(default)]
        above: Option<f64>,
    },
    /// A whole number, at least `min` when that is set (flash_attention's `kv_heads`).
    Int {
        /// The inclusive lower bound, if any.
        #[serde(default)]
        min: Option<i64>,
    },
    /// `true` or `false`.
    Bool,
    /// Exactly one of `values` (numbers compare by value: `1` and `1.0` are the same).
    OneOf {
        /// The allowed values.
        values: Vec<Value>,
    },
}

/// A semantic parameter of a kind, passed to `kernel_fn` as a keyword argument.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ParamSpec {
    /// Its keyword name, e.g. `eps`.
    pub name: String,
    /// The values it may take (serialised flat: `"type": "float"`, …).
    #[serde(flatten)]
    pub ty: ParamType,
    /// Its value when a target does not set one: the kind's semantics before it had the
    /// parameter. `null` where that value depends on the shape (flash_attention's `scale`
    /// is 1/√head_dim, its `kv_heads` the number of heads); `null` is never accepted as a
    /// given value, so it only ever means "the default".
    pub default: Value,
    /// One line: what it means, with the source of each variant.
    #[serde(default)]
    pub doc: String,
    /// The dim (of the kind's `dim_names`) that a whole-number value must divide
    /// (flash_attention's `kv_heads` divides `heads`); the judge's own shapes are fitted to
    /// it ([`crate::catalogue::KindSpec::fit_shape`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub divides: Option<String>,
}

impl ParamSpec {
    /// A parameter of type `ty` with its default and doc line.
    pub fn new(name: &str, ty: ParamType, default: Value, doc: &str) -> Self {
        ParamSpec {
            name: name.into(),
            ty,
            default,
            doc: doc.into(),
            divides: None,
        }
    }

    /// The same parameter, whose value must divide the dim `dim`.
    pub fn dividing(mut self, dim: &str) -> Self {
        self.divides = Some(dim.into());
        self
    }

    /// What the parameter accepts, in words: "a number above 0", "true or false",
    /// "one of 0, 1".
    pub fn allowed(&self) -> String {
        match &self.ty {
            ParamType::Float { above: Some(a) } => format!("a finite number above {a}"),
            ParamType::Float { above: None } => "a finite number".into(),
            ParamType::Int { min: Some(m) } => format!("a whole number of at least {m}"),
            ParamType::Int { min: None } => "a whole number".into(),
            ParamType::Bool => "true or false".into(),
            ParamType::OneOf { values } => {
                let v: Vec<String> = values.iter().map(value_text).collect();
                format!("one of {}", v.join(", "))
            }
        }
    }

    /// `value` in its canonical form when the parameter accepts it (a float as a JSON
    /// float; a `OneOf` number as the allowed value it equals), else `None`.
    pub fn accept(&self, value: &Value) -> Option<Value> {
        match &self.ty {
            ParamType::Float { above } => {
                let f = value.as_f64().filter(|f| f.is_finite())?;
                if above.is_some_and(|a| f <= a) {
                    return None;
                }
                serde_json::Number::from_f64(f).map(Value::Number)
            }
            ParamType::Int { min } => {
                // 2 and 2.0 alike (JSON from Python may carry either); 2.5 is not whole
                let f = value
                    .as_f64()
                    .filter(|f| f.is_finite() && f.fract() == 0.0)?;
                let i = f as i64;
                if min.is_some_and(|m| i < m) {
                    return None;
                }
                Some(Value::from(i))
            }
            ParamType::Bool => value.as_bool().map(Value::Bool),
            ParamType::OneOf { values } => values.iter().find(|v| same(v, value)).cloned(),
        }
    }
}

/// JSON equality, except that numbers compare by value (`0` equals `0.0`).
fn same(a: &Value, b: &Value) -> bool {
    match (a.as_f64(), b.as_f64()) {
        (Some(x), Some(y)) => x == y,
        _ => a == b,
    }
}

/// A value as a person writes it: strings without quotes.
pub fn value_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A parameter value that the kind's catalogue entry does not accept.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum ParamError {
    /// The kind has no parameter of that name.
    #[error("{kind} has no parameter `{name}`; {}", known_text(.known))]
    Unknown {
        /// The kind's name.
        kind: String,
        /// The name given.
        name: String,
        /// The kind's parameter names.
        known: Vec<String>,
    },
    /// The value is not one the parameter accepts.
    #[error("{kind} parameter `{name}` cannot be {}: it takes {allowed}", value_text(.value))]
    Invalid {
        /// The kind's name.
        kind: String,
        /// The parameter's name.
        name: String,
        /// The value given.
        value: Value,
        /// What it accepts ([`ParamSpec::allowed`]).
        allowed: String,
    },
}

fn known_text(known: &[String]) -> String {
    if known.is_empty() {
        "it takes none".into()
    } else {
        format!("its parameters are {}", known.join(", "))
    }
}

/// Checks `given` against `specs` (the parameters of kind `kind`) and returns every
/// parameter of the kind: the given value in canonical form ([`ParamSpec::accept`]), or
/// its default.
///
/// # Errors
/// [`ParamError::Unknown`] for a name the kind does not declare, [`ParamError::Invalid`]
/// for a value its parameter does not accept; both name the parameter and what is allowed.
pub fn resolve(kind: &str, specs: &[ParamSpec], given: &Params) -> Result<Params, ParamError> {
    if let Some(name) = given.keys().find(|n| !specs.iter().any(|s| &s.name == *n)) {
        return Err(ParamError::Unknown {
            kind: kind.into(),
            name: name.clone(),
            known: specs.iter().map(|s| s.name.clone()).collect(),
        });
    }
    specs
        .iter()
        .map(|s| {
            let value = match given.get(&s.name) {
                None => s.default.clone(),
                // a null default ("the shape decides", attention's scale) given back as
                // null, as a plan made from a model's call site records it
                Some(Value::Null) if s.default.is_null() => Value::Null,
                Some(v) => s.accept(v).ok_or_else(|| ParamError::Invalid {
                    kind: kind.into(),
                    name: s.name.clone(),
                    value: v.clone(),
                    allowed: s.allowed(),
                })?,
            };
            Ok((s.name.clone(), value))
        })
        .collect()
}

/// Parses `NAME=VALUE` as typed on the command line (`eps=1e-5`, `bias=false`,
/// `cast_order=llama`): the value as JSON when it reads as JSON (a number, `true`,
/// `"text"`), else as a string.
///
/// # Errors
/// A message when there is no `=` or the name is empty.
pub fn parse_param(text: &str) -> Result<(String, Value), String> {
    let (name, value) = text
        .split_once('=')
        .filter(|(n, _)| !n.trim().is_empty())
        .ok_or_else(|| format!("`{text}` is not NAME=VALUE (e.g. eps=1e-5)"))?;
    let value = value.trim();
    let v = serde_json::from_str(value).unwrap_or_else(|_| Value::String(value.to_string()));
    Ok((name.trim().to_string(), v))
}

/// `eps=1e-05, bias=false`: the parameters in name order, for tables and reports; empty
/// for none.
pub fn params_label(params: &Params) -> String {
    params
        .iter()
        .map(|(k, v)| format!("{k}={}", value_text(v)))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn specs() -> Vec<ParamSpec> {
        vec![
            ParamSpec::new(
                "eps",
                ParamType::Float { above: Some(0.0) },
                json!(1e-6),
                "",
            ),
            ParamSpec::new("bias", ParamType::Bool, json!(true), ""),
            ParamSpec::new(
                "offset",
                ParamType::OneOf {
                    values: vec![json!(0), json!(1)],
                },
                json!(0),
                "",
            ),
        ]
    }

    fn given(pairs: &[(&str, Value)]) -> Params {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.clone()))
            .collect()
    }

    #[test]
    fn defaults_fill_what_is_not_given_and_values_are_canonical() {
        let p = resolve(
            "k",
            &specs(),
            &given(&[("eps", json!(1)), ("offset", json!(1.0))]),
        )
        .unwrap();
        assert_eq!(p["eps"], json!(1.0));
        assert!(p["eps"].is_f64());
        assert_eq!(p["offset"], json!(1)); // the allowed value itself, not 1.0
        assert_eq!(p["bias"], json!(true));
        assert_eq!(
            resolve("k", &specs(), &Params::new()).unwrap()["eps"],
            json!(1e-6)
        );
    }

    #[test]
    fn errors_name_the_parameter_and_what_it_takes() {
        let e = resolve("k", &specs(), &given(&[("epsilon", json!(1e-5))])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k has no parameter `epsilon`; its parameters are eps, bias, offset"
        );
        let e = resolve("k", &specs(), &given(&[("eps", json!(0.0))])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "k parameter `eps` cannot be 0.0: it takes a finite number above 0"
        );
        let e = resolve("k", &specs(), &given(&[("offset", json!(2))])).unwrap_err();
        assert!(e.to_string().ends_with("it takes one of 0, 1"), "{e}");
        let e = resolve("k", &specs(), &given(&[("bias", json!("yes"))])).unwrap_err();
        assert!(e.to_string().contains("`bias` cannot be yes"), "{e}");
        let e = resolve("k", &[], &given(&[("eps", json!(1))])).unwrap_err();
        assert!(e.to_string().ends_with("it takes none"), "{e}");
    }

    #[test]
    fn command_line_values_read_as_json_else_as_strings() {
        assert_eq!(
            parse_param("eps=1e-5").unwrap(),
            ("eps".into(), json!(1e-5))
        );
        assert_eq!(parse_param("bias=false").unwrap().1, json!(false));
        assert_eq!(parse_param("cast_order=llama").unwrap().1, json!("llama"));
        assert!(parse_param("eps").is_err());
        assert!(parse_param("=1").is_err());
        let p = given(&[
            ("eps", json!(1e-5)),
            ("bias", json!(false)),
            ("c", json!("t5")),
        ]);
        assert_eq!(params_label(&p), "bias=false, c=t5, eps=0.00001");
    }

    #[test]
    fn whole_numbers_take_integral_values_at_or_above_their_minimum() {
        let s = ParamSpec::new("n", ParamType::Int { min: Some(1) }, Value::Null, "");
        assert_eq!(s.accept(&json!(2.0)), Some(json!(2)));
        assert!(s.accept(&json!(2)).unwrap().is_i64());
        assert_eq!(s.accept(&json!(2.5)), None);
        assert_eq!(s.accept(&json!(0)), None);
        assert_eq!(s.accept(&Value::Null), None);
        assert_eq!(s.allowed(), "a whole number of at least 1");
        // a null default fills an unset parameter as null (the shape decides its value)
        assert_eq!(
            resolve("k", &[s], &Params::new()).unwrap()["n"],
            Value::Null
        );
    }

    #[test]
    fn a_spec_round_trips_through_json_flat() {
        let s = &specs()[0];
        let v = serde_json::to_value(s).unwrap();
        assert_eq!(v["type"], json!("float"));
        assert_eq!(v["above"], json!(0.0));
        assert_eq!(&serde_json::from_value::<ParamSpec>(v).unwrap(), s);
    }

    #[test]
    fn a_null_given_for_a_null_default_is_the_default_and_for_another_is_refused() {
        let specs = [
            ParamSpec::new(
                "scale",
                ParamType::Float { above: Some(0.0) },
                Value::Null,
                "",
            ),
            ParamSpec::new(
                "eps",
                ParamType::Float { above: Some(0.0) },
                serde_json::json!(1e-6),
                "",
            ),
        ];
        let given: Params = [("scale".to_string(), Value::Null)].into_iter().collect();
        let resolved = resolve("k", &specs, &given).unwrap();
        assert_eq!(resolved["scale"], Value::Null);
        assert_eq!(resolved["eps"], serde_json::json!(1e-6));
        let given: Params = [("eps".to_string(), Value::Null)].into_iter().collect();
        assert!(resolve("k", &specs, &given).is_err());
    }
}
