//! A small parser for the subset of Python literals that `CONFIG` and `TUNABLES` use, and
//! the code that finds, reads and rewrites those two assignments in a `kernel.py`.
//!
//! # The accepted subset
//! - integers (`1024`, `-1`, `0x40`, `1_024`), floats (`0.5`, `1e-3`), `True`, `False`,
//!   `None`;
//! - strings in single or double quotes with the common escapes (`\\`, `\'`, `\"`, `\n`,
//!   `\t`); no prefixes (`b''`, `f''`), no triple quotes;
//! - lists `[..]` and tuples `(..)` (read as lists) of any of these;
//! - dicts `{..}` whose keys are strings;
//! - whitespace, newlines, trailing commas and `#` comments between tokens.
//!
//! Anything else (names, expressions such as `2 ** 10`, set literals) is a [`LiteralError`]
//! naming the offending byte offset: the tuner then leaves the file alone rather than guess.

use std::fmt;

/// A parsed Python literal.
#[derive(Debug, Clone, PartialEq)]
pub enum PyValue {
    /// An `int`.
    Int(i64),
    /// A `float`.
    Float(f64),
    /// `True` or `False`.
    Bool(bool),
    /// A `str`.
    Str(String),
    /// `None`.
    None,
    /// A `list` or `tuple`.
    List(Vec<PyValue>),
    /// A `dict` with string keys, in source order.
    Dict(Vec<(String, PyValue)>),
}

impl PyValue {
    /// The entries when this is a dict.
    pub fn as_dict(&self) -> Option<&[(String, PyValue)]> {
        match self {
            PyValue::Dict(entries) => Some(entries),
            _ => None,
        }
    }

    /// A numeric view for ordering values that are not in a `TUNABLES` list (ints, floats
    /// and bools), else `None`.
    pub fn as_f64(&self) -> Option<f64> {
        match self {
            PyValue::Int(v) => Some(*v as f64),
            PyValue::Float(v) => Some(*v),
            PyValue::Bool(b) => Some(f64::from(u8::from(*b))),
            _ => None,
        }
    }
}

/// Renders the value as Python source, e.g. `{"BLOCK_SIZE": 1024, "num_warps": 8}`:
/// double-quoted strings, `", "` and `": "` separators, floats with a decimal point.
impl fmt::Display for PyValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PyValue::Int(v) => write!(f, "{v}"),
            PyValue::Float(v) => {
                if v.is_finite() && v.fract() == 0.0 && v.abs() < 1e16 {
                    write!(f, "{v:.1}")
                } else if v.is_nan() {
                    f.write_str("float('nan')")
                } else if v.is_infinite() {
                    f.write_str(if *v > 0.0 {
                        "float('inf')"
                    } else {
                        "-float('inf')"
                    })
                } else {
                    write!(f, "{v}")
                }
            }
            PyValue::Bool(true) => f.write_str("True"),
            PyValue::Bool(false) => f.write_str("False"),
            PyValue::None => f.write_str("None"),
            PyValue::Str(s) => write_str_literal(f, s),
            PyValue::List(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
            PyValue::Dict(entries) => {
                f.write_str("{")?;
                for (i, (k, v)) in entries.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write_str_literal(f, k)?;
                    write!(f, ": {v}")?;
                }
                f.write_str("}")
            }
        }
    }
}

fn write_str_literal(f: &mut fmt::Formatter<'_>, s: &str) -> fmt::Result {
    f.write_str("\"")?;
    for c in s.chars() {
        match c {
            '\\' => f.write_str("\\\\")?,
            '"' => f.write_str("\\\"")?,
            '\n' => f.write_str("\\n")?,
            '\t' => f.write_str("\\t")?,
            '\r' => f.write_str("\\r")?,
            c => write!(f, "{c}")?,
        }
    }
    f.write_str("\"")
}

/// A literal outside the accepted subset, or a malformed one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a supported Python literal at byte {offset}: {message}")]
pub struct LiteralError {
    /// Byte offset into the parsed text where the problem is.
    pub offset: usize,
    /// What was expected or found.
    pub message: String,
}

/// Parses one literal at the start of `text` (after optional whitespace and comments) and
/// returns it with the byte offset just past it.
///
/// # Errors
/// [`LiteralError`] when the text there is not in the subset described in the module docs.
pub fn parse_literal_prefix(text: &str) -> Result<(PyValue, usize), LiteralError> {
    let mut p = Parser { s: text, pos: 0 };
    let value = p.value(0)?;
    Ok((value, p.pos))
}

/// Parses `text` as exactly one literal (surrounding whitespace and comments allowed).
///
/// # Errors
/// [`LiteralError`] when it is not in the subset, or when anything follows the literal.
pub fn parse_literal(text: &str) -> Result<PyValue, LiteralError> {
    let mut p = Parser { s: text, pos: 0 };
    let value = p.value(0)?;
    p.skip_trivia();
    if p.pos != text.len() {
        return Err(p.err("unexpected text after the literal"));
    }
    Ok(value)
}

/// Deeper nesting than this is refused (no stack overflow on hostile input).
const MAX_DEPTH: usize = 32;

struct Parser<'a> {
    s: &'a str,
    pos: usize,
}

impl Parser<'_> {
    fn err(&self, message: impl Into<String>) -> LiteralError {
        LiteralError {
            offset: self.pos,
            message: message.into(),
        }
    }

    fn peek(&self) -> Option<u8> {
        self.s.as_bytes().get(self.pos).copied()
    }

    fn skip_trivia(&mut self) {
        while let Some(c) = self.peek() {
            match c {
                b' ' | b'\t' | b'\r' | b'\n' | b'\x0c' => self.pos += 1,
                b'\\' if self.s[self.pos..].starts_with("\\\n") => self.pos += 2,
                b'#' => {
                    while let Some(c) = self.peek() {
                        if c == b'\n' {
                            break;
                        }
                        self.pos += 1;
                    }
                }
                _ => break,
            }
        }
    }

    fn value(&mut self, depth: usize) -> Result<PyValue, LiteralError> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deeply"));
        }
        self.skip_trivia();
        match self.peek() {
            None => Err(self.err("expected a value, found the end of the text")),
            Some(b'{') => self.dict(depth),
            Some(b'[') => self.seq(b']', depth),
            Some(b'(') => self.seq(b')', depth),
            Some(b'"') | Some(b'\'') => self.string().map(PyValue::Str),
            Some(c) if c == b'-' || c == b'+' || c == b'.' || c.is_ascii_digit() => self.number(),
            Some(c) if c.is_ascii_alphabetic() || c == b'_' => {
                let start = self.pos;
                while self
                    .peek()
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_')
                {
                    self.pos += 1;
                }
                match &self.s[start..self.pos] {
                    "True" => Ok(PyValue::Bool(true)),
                    "False" => Ok(PyValue::Bool(false)),
                    "None" => Ok(PyValue::None),
                    name => {
                        self.pos = start;
                        Err(self.err(format!(
                            "the name `{name}` is not a literal (only numbers, strings, True, False, None, lists, tuples and dicts are read)"
                        )))
                    }
                }
            }
            Some(_) => Err(self.err(format!(
                "unexpected character `{}`",
                self.s[self.pos..].chars().next().unwrap_or('?')
            ))),
        }
    }

    fn seq(&mut self, close: u8, depth: usize) -> Result<PyValue, LiteralError> {
        self.pos += 1; // the opening bracket
        let mut items = Vec::new();
        loop {
            self.skip_trivia();
            if self.peek() == Some(close) {
                self.pos += 1;
                return Ok(PyValue::List(items));
            }
            items.push(self.value(depth + 1)?);
            self.skip_trivia();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(c) if c == close => {
                    self.pos += 1;
                    return Ok(PyValue::List(items));
                }
                _ => return Err(self.err(format!("expected `,` or `{}`", close as char))),
            }
        }
    }

    fn dict(&mut self, depth: usize) -> Result<PyValue, LiteralError> {
        self.pos += 1; // `{`
        let mut entries: Vec<(String, PyValue)> = Vec::new();
        loop {
            self.skip_trivia();
            match self.peek() {
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(PyValue::Dict(entries));
                }
                Some(b'"') | Some(b'\'') => {}
                _ => return Err(self.err("expected a string key or `}`")),
            }
            let key = self.string()?;
            self.skip_trivia();
            if self.peek() != Some(b':') {
                return Err(self.err("expected `:` after a dict key"));
            }
            self.pos += 1;
            let value = self.value(depth + 1)?;
            // Python keeps the last duplicate, at the first one's position
            if let Some(slot) = entries.iter_mut().find(|(k, _)| *k == key) {
                slot.1 = value;
            } else {
                entries.push((key, value));
            }
            self.skip_trivia();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    return Ok(PyValue::Dict(entries));
                }
                _ => return Err(self.err("expected `,` or `}`")),
            }
        }
    }

    fn string(&mut self) -> Result<String, LiteralError> {
        let quote = self.peek().expect("called on a quote");
        if self.s[self.pos..].starts_with(if quote == b'"' { "\"\"\"" } else { "'''" }) {
            return Err(self.err("triple-quoted strings are not supported"));
        }
        self.pos += 1;
        let mut out = String::new();
        let mut chars = self.s[self.pos..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                c if c as u32 == u32::from(quote) => {
                    self.pos += i + 1;
                    return Ok(out);
                }
                '\n' => break,
                '\\' => match chars.next() {
                    Some((_, 'n')) => out.push('\n'),
                    Some((_, 't')) => out.push('\t'),
                    Some((_, 'r')) => out.push('\r'),
                    Some((_, '0')) => out.push('\0'),
                    Some((_, c @ ('\\' | '\'' | '"'))) => out.push(c),
                    Some((_, c)) => {
                        // Python keeps unknown escapes as written
                        out.push('\\');
                        out.push(c);
                    }
                    None => break,
                },
                c => out.push(c),
            }
        }
        Err(self.err("unterminated string"))
    }

    fn number(&mut self) -> Result<PyValue, LiteralError> {
        let start = self.pos;
        let mut negative = false;
        while let Some(c @ (b'-' | b'+')) = self.peek() {
            negative ^= c == b'-';
            self.pos += 1;
            self.skip_trivia();
        }
        let body_start = self.pos;
        while self
            .peek()
            .is_some_and(|c| c.is_ascii_alphanumeric() || c == b'.' || c == b'_')
            || (matches!(self.peek(), Some(b'-' | b'+'))
                && matches!(self.s.as_bytes().get(self.pos - 1), Some(b'e' | b'E'))
                && !self.s[body_start..self.pos].starts_with("0x"))
        {
            self.pos += 1;
        }
        let body: String = self.s[body_start..self.pos]
            .chars()
            .filter(|&c| c != '_')
            .collect();
        let lower = body.to_ascii_lowercase();
        let int = if let Some(hex) = lower.strip_prefix("0x") {
            i64::from_str_radix(hex, 16).ok()
        } else if let Some(oct) = lower.strip_prefix("0o") {
            i64::from_str_radix(oct, 8).ok()
        } else if let Some(bin) = lower.strip_prefix("0b") {
            i64::from_str_radix(bin, 2).ok()
        } else if lower.bytes().all(|c| c.is_ascii_digit()) && !lower.is_empty() {
            lower.parse::<i64>().ok()
        } else {
            None
        };
        if let Some(v) = int {
            return Ok(PyValue::Int(if negative { -v } else { v }));
        }
        let is_float_text = !lower.is_empty()
            && lower
                .bytes()
                .all(|c| c.is_ascii_digit() || matches!(c, b'.' | b'e' | b'-' | b'+'))
            && lower.bytes().any(|c| c.is_ascii_digit());
        match lower.parse::<f64>() {
            Ok(v) if is_float_text => Ok(PyValue::Float(if negative { -v } else { v })),
            _ => {
                let text = self.s[start..self.pos].to_string();
                self.pos = start;
                Err(self.err(format!("`{text}` is not a number")))
            }
        }
    }
}

/// Where an assignment `NAME = <literal>` sits in a source file.
#[derive(Debug, Clone, PartialEq)]
pub struct Assignment {
    /// The parsed literal.
    pub value: PyValue,
    /// Byte range of the whole line(s), from the line's start to the end of the last line
    /// (before its newline).
    pub line: std::ops::Range<usize>,
    /// Byte range of the literal itself.
    pub literal: std::ops::Range<usize>,
}

/// Errors finding or reading `CONFIG`/`TUNABLES` in a `kernel.py`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AssignmentError {
    /// No module-level `NAME = …` line.
    #[error("kernel.py has no module-level `{name} = {{...}}` assignment")]
    Missing {
        /// `CONFIG` or `TUNABLES`.
        name: &'static str,
    },
    /// More than one module-level assignment: which one Python ends with is not obvious to
    /// a line-based editor, so the file is left alone.
    #[error(
        "kernel.py assigns `{name}` at module level more than once (lines {lines:?}); keep one"
    )]
    Repeated {
        /// `CONFIG` or `TUNABLES`.
        name: &'static str,
        /// 1-based line numbers.
        lines: Vec<usize>,
    },
    /// The literal is outside the supported subset.
    #[error("`{name}` on line {line_number} is not a supported literal: {source}")]
    Literal {
        /// `CONFIG` or `TUNABLES`.
        name: &'static str,
        /// 1-based line number of the assignment.
        line_number: usize,
        /// The parser's complaint.
        #[source]
        source: LiteralError,
    },
    /// `CONFIG` must stay on one line so that the tuner's edit is exactly one line.
    #[error("`CONFIG` on line {line_number} spans several lines; write it on one line")]
    ConfigNotOneLine {
        /// 1-based line number of the assignment.
        line_number: usize,
    },
    /// Something follows the literal on its last line other than a comment.
    #[error("unexpected text after `{name} = {{...}}` on line {line_number}")]
    TrailingText {
        /// `CONFIG` or `TUNABLES`.
        name: &'static str,
        /// 1-based line number.
        line_number: usize,
    },
    /// The value is not a dict.
    #[error("`{name}` must be a dict literal")]
    NotADict {
        /// `CONFIG` or `TUNABLES`.
        name: &'static str,
    },
}

/// Finds the module-level assignment `name = <literal>` (at column 0; an optional type
/// annotation `name: dict = …` is allowed) and parses its literal, which may span lines.
///
/// # Errors
/// [`AssignmentError`] when it is missing, repeated, not a supported literal, or followed
/// by anything but a comment.
pub fn find_assignment(source: &str, name: &'static str) -> Result<Assignment, AssignmentError> {
    let mut found: Vec<(usize, usize)> = Vec::new(); // (line start, literal start)
    let mut line_start = 0usize;
    for (index, line) in source.split_inclusive('\n').enumerate() {
        if let Some(rest) = line.strip_prefix(name) {
            let after_name = rest.trim_start_matches([' ', '\t']);
            let after_annotation = match after_name.strip_prefix(':') {
                Some(ann) => ann.find('=').map(|i| &ann[i..]).unwrap_or(""),
                None => after_name,
            };
            if let Some(value_text) = after_annotation.strip_prefix('=') {
                if !value_text.starts_with('=') {
                    let literal_start = line_start + (line.len() - value_text.len());
                    found.push((index, literal_start));
                }
            }
        }
        line_start += line.len();
    }
    let (line_index, literal_search) = match found.as_slice() {
        [] => return Err(AssignmentError::Missing { name }),
        [one] => *one,
        many => {
            return Err(AssignmentError::Repeated {
                name,
                lines: many.iter().map(|(i, _)| i + 1).collect(),
            })
        }
    };
    let line_number = line_index + 1;
    let (value, consumed) = parse_literal_prefix(&source[literal_search..]).map_err(|source| {
        AssignmentError::Literal {
            name,
            line_number,
            source,
        }
    })?;
    let literal_end = literal_search + consumed;
    let literal_start = literal_search
        + (source[literal_search..].len()
            - source[literal_search..]
                .trim_start_matches([' ', '\t'])
                .len());
    let end = source[literal_end..]
        .find('\n')
        .map_or(source.len(), |i| literal_end + i);
    let tail = source[literal_end..end].trim_start_matches([' ', '\t', ';']);
    if !(tail.is_empty() || tail.starts_with('#') || tail == "\r") {
        return Err(AssignmentError::TrailingText { name, line_number });
    }
    let start = source[..literal_search].rfind('\n').map_or(0, |i| i + 1);
    if !matches!(value, PyValue::Dict(_)) {
        return Err(AssignmentError::NotADict { name });
    }
    Ok(Assignment {
        value,
        line: start..end,
        literal: literal_start..literal_end,
    })
}

/// The `CONFIG` and `TUNABLES` of a `kernel.py`.
#[derive(Debug, Clone, PartialEq)]
pub struct TunableSource {
    /// `CONFIG`, in source order.
    pub config: Vec<(String, PyValue)>,
    /// `TUNABLES`: each key's candidate values, in source order. Keys whose value is not a
    /// list are ignored.
    pub tunables: Vec<(String, Vec<PyValue>)>,
    config_literal: std::ops::Range<usize>,
}

impl TunableSource {
    /// Reads `CONFIG` (one line) and `TUNABLES` (any number of lines) from `source`.
    ///
    /// # Errors
    /// [`AssignmentError`] from [`find_assignment`], or
    /// [`AssignmentError::ConfigNotOneLine`].
    pub fn parse(source: &str) -> Result<Self, AssignmentError> {
        let config = find_assignment(source, "CONFIG")?;
        if source[config.line.clone()].contains('\n') {
            let line_number = source[..config.line.start].matches('\n').count() + 1;
            return Err(AssignmentError::ConfigNotOneLine { line_number });
        }
        let tunables = find_assignment(source, "TUNABLES")?;
        let as_dict = |a: &Assignment| a.value.as_dict().map(<[_]>::to_vec).unwrap_or_default();
        Ok(TunableSource {
            config: as_dict(&config),
            tunables: as_dict(&tunables)
                .into_iter()
                .filter_map(|(k, v)| match v {
                    PyValue::List(values) => Some((k, values)),
                    _ => None,
                })
                .collect(),
            config_literal: config.literal,
        })
    }

    /// `source` with the `CONFIG` literal replaced by `config`; every other byte, the rest
    /// of that line included (`CONFIG = ` and any trailing comment), is unchanged.
    ///
    /// `source` must be the text this was parsed from.
    pub fn with_config(&self, source: &str, config: &[(String, PyValue)]) -> String {
        let rendered = PyValue::Dict(config.to_vec()).to_string();
        let mut out = String::with_capacity(source.len() + rendered.len());
        out.push_str(&source[..self.config_literal.start]);
        out.push_str(&rendered);
        out.push_str(&source[self.config_literal.end..]);
        out
    }

    /// `source` with the `CONFIG` line removed: what stays the same while only `CONFIG`
    /// is tuned (the kernel's "structure").
    pub fn structure<'a>(&self, source: &'a str) -> (&'a str, &'a str) {
        (
            &source[..self.config_literal.start],
            &source[self.config_literal.end..],
        )
    }
}

/// The digest of a kernel's structure: SHA-256 (hex) of the text before the `CONFIG`
/// literal, a `0xFF` byte (never in UTF-8, so the split point cannot be forged), and the
/// text after it. Two files with equal digests differ at most in their `CONFIG` values.
fn structure_digest(before: &str, after: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hasher = Sha256::new();
    hasher.update(before.as_bytes());
    hasher.update([0xFF]);
    hasher.update(after.as_bytes());
    hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

impl TunableSource {
    /// The digest of `source` without its `CONFIG` literal, as [`KernelConfig::structure`]
    /// records it. `source` must be the text this was parsed from.
    pub fn structure_digest(&self, source: &str) -> String {
        let (before, after) = self.structure(source);
        structure_digest(before, after)
    }
}

/// The `CONFIG` a `kernel.py` was benchmarked with, and which kernel it configured: kept
/// with each experiment (in [`crate::ExperimentRecord::config`] and the experiment's note)
/// so that a tuner knows, after a restart, which configurations of the current kernel were
/// already measured, without reading descriptions.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct KernelConfig {
    /// `CONFIG`'s entries, in source order.
    pub values: Vec<(String, PyValue)>,
    /// SHA-256 (hex) of the file with the `CONFIG` literal cut out: equal digests mean the
    /// same kernel, whatever its `CONFIG`, so measurements on it stay comparable.
    pub structure: String,
}

impl KernelConfig {
    /// Reads the module-level `CONFIG = {...}` of `source` ([`find_assignment`]; it may
    /// span lines, and `TUNABLES` need not exist). `None` when there is no such literal
    /// or it is outside the subset this module reads: nothing structured to keep.
    pub fn read(source: &str) -> Option<KernelConfig> {
        let config = find_assignment(source, "CONFIG").ok()?;
        let values = config.value.as_dict()?.to_vec();
        Some(KernelConfig {
            values,
            structure: structure_digest(
                &source[..config.literal.start],
                &source[config.literal.end..],
            ),
        })
    }
}

/// As JSON-like data: ints, floats, booleans, strings, `null`, arrays, and maps for dicts.
impl serde::Serialize for PyValue {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        match self {
            PyValue::Int(v) => serializer.serialize_i64(*v),
            PyValue::Float(v) => serializer.serialize_f64(*v),
            PyValue::Bool(b) => serializer.serialize_bool(*b),
            PyValue::Str(s) => serializer.serialize_str(s),
            PyValue::None => serializer.serialize_none(),
            PyValue::List(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            PyValue::Dict(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// The inverse of the `Serialize` form: whole numbers that fit an `i64` read as ints,
/// other numbers as floats.
impl<'de> serde::Deserialize<'de> for PyValue {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        fn from_json(v: serde_json::Value) -> PyValue {
            use serde_json::Value;
            match v {
                Value::Null => PyValue::None,
                Value::Bool(b) => PyValue::Bool(b),
                Value::Number(n) => match n.as_i64() {
                    Some(i) => PyValue::Int(i),
                    None => PyValue::Float(n.as_f64().unwrap_or(f64::NAN)),
                },
                Value::String(s) => PyValue::Str(s),
                Value::Array(items) => PyValue::List(items.into_iter().map(from_json).collect()),
                Value::Object(map) => {
                    PyValue::Dict(map.into_iter().map(|(k, v)| (k, from_json(v))).collect())
                }
            }
        }
        <serde_json::Value as serde::Deserialize>::deserialize(deserializer).map(from_json)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_dicts_kernels_use_across_lines_with_comments() {
        let text = "{\n    \"BLOCK_SIZE\": [256, 512, 1_024],  # powers of two\n    'num_warps': (4, 8,),\n    \"EPS\": 1e-5, \"flag\": True, \"mode\": 'a\\'b', \"neg\": -0x10,\n}";
        let v = parse_literal(text).unwrap();
        assert_eq!(
            v,
            PyValue::Dict(vec![
                (
                    "BLOCK_SIZE".into(),
                    PyValue::List(vec![
                        PyValue::Int(256),
                        PyValue::Int(512),
                        PyValue::Int(1024)
                    ])
                ),
                (
                    "num_warps".into(),
                    PyValue::List(vec![PyValue::Int(4), PyValue::Int(8)])
                ),
                ("EPS".into(), PyValue::Float(1e-5)),
                ("flag".into(), PyValue::Bool(true)),
                ("mode".into(), PyValue::Str("a'b".into())),
                ("neg".into(), PyValue::Int(-16)),
            ])
        );
    }

    #[test]
    fn refuses_expressions_and_names_with_the_offset() {
        let err = parse_literal("{\"BLOCK\": 2 ** 10}").unwrap_err();
        assert_eq!(err.offset, 12, "{err}");
        let err = parse_literal("{\"BLOCK\": SIZE}").unwrap_err();
        assert!(err.message.contains("`SIZE`"), "{err}");
        assert!(parse_literal("{1: 2}").is_err(), "non-string keys");
        assert!(parse_literal("[1, 2").is_err(), "unclosed list");
        assert!(parse_literal(&"[".repeat(100)).is_err(), "depth limit");
    }

    #[test]
    fn rendering_parses_back_to_the_same_value() {
        let v = parse_literal("{'a': [1, 2.0, -3.5e-7], 'b': 'x\"y\\n', 'c': None, 'd': False}")
            .unwrap();
        let text = v.to_string();
        assert_eq!(
            text,
            "{\"a\": [1, 2.0, -0.00000035], \"b\": \"x\\\"y\\n\", \"c\": None, \"d\": False}"
        );
        assert_eq!(parse_literal(&text).unwrap(), v);
    }

    const SOURCE: &str = "KERNEL_KIND = \"softmax\"\nCONFIG = {\"BLOCK_SIZE\": 1024, \"num_warps\": 4}  # tuned\nTUNABLES = {\n    \"BLOCK_SIZE\": [512, 1024, 2048],\n    \"num_warps\": [2, 4, 8],\n}\n\ndef kernel_fn(x):\n    CONFIG_COPY = dict(CONFIG)\n    return x\n";

    #[test]
    fn finds_config_and_multiline_tunables_and_rewrites_one_literal() {
        let t = TunableSource::parse(SOURCE).unwrap();
        assert_eq!(
            t.config,
            vec![
                ("BLOCK_SIZE".to_string(), PyValue::Int(1024)),
                ("num_warps".to_string(), PyValue::Int(4))
            ]
        );
        assert_eq!(t.tunables.len(), 2);
        assert_eq!(
            t.tunables[1].1,
            vec![PyValue::Int(2), PyValue::Int(4), PyValue::Int(8)]
        );
        let new = t.with_config(
            SOURCE,
            &[
                ("BLOCK_SIZE".to_string(), PyValue::Int(2048)),
                ("num_warps".to_string(), PyValue::Int(4)),
            ],
        );
        assert_eq!(
            new,
            SOURCE.replace(
                "CONFIG = {\"BLOCK_SIZE\": 1024,",
                "CONFIG = {\"BLOCK_SIZE\": 2048,"
            )
        );
    }

    #[test]
    fn refuses_missing_repeated_and_multiline_config() {
        assert_eq!(
            TunableSource::parse("TUNABLES = {}\n").unwrap_err(),
            AssignmentError::Missing { name: "CONFIG" }
        );
        let twice = format!("{SOURCE}CONFIG = {{}}\n");
        assert!(matches!(
            TunableSource::parse(&twice).unwrap_err(),
            AssignmentError::Repeated { lines, .. } if lines == vec![2, 11]
        ));
        let multi = SOURCE.replace(
            "CONFIG = {\"BLOCK_SIZE\": 1024, ",
            "CONFIG = {\"BLOCK_SIZE\": 1024,\n    ",
        );
        assert_eq!(
            TunableSource::parse(&multi).unwrap_err(),
            AssignmentError::ConfigNotOneLine { line_number: 2 }
        );
        // a comparison is not an assignment; an annotated assignment is
        let annotated = SOURCE.replace("CONFIG = {", "CONFIG: dict = {");
        assert!(TunableSource::parse(&annotated).is_ok());
        assert!(matches!(
            find_assignment("CONFIG == {}\n", "CONFIG").unwrap_err(),
            AssignmentError::Missing { .. }
        ));
    }

    #[test]
    fn a_kernel_config_is_its_config_and_the_digest_of_everything_else() {
        let a = "import x\nCONFIG = {\"BLOCK\": 64, \"mode\": 'fast'}  # tuned\nTUNABLES = {}\n";
        let config = KernelConfig::read(a).unwrap();
        assert_eq!(
            config.values,
            vec![
                ("BLOCK".to_string(), PyValue::Int(64)),
                ("mode".to_string(), PyValue::Str("fast".into())),
            ]
        );
        // only CONFIG's values differ: the same structure
        let b = a.replace("64", "128");
        let other = KernelConfig::read(&b).unwrap();
        assert_ne!(other.values, config.values);
        assert_eq!(other.structure, config.structure);
        // any other byte differs: another structure
        let c = a.replace("import x", "import y");
        assert_ne!(KernelConfig::read(&c).unwrap().structure, config.structure);
        // the digest is the one the tuner's parse gives (TUNABLES present here)
        let parsed = TunableSource::parse(a).unwrap();
        assert_eq!(parsed.structure_digest(a), config.structure);
        // no CONFIG, or one outside the subset: nothing to record
        assert_eq!(KernelConfig::read("TUNABLES = {}\n"), None);
        assert_eq!(KernelConfig::read("CONFIG = dict(BLOCK=64)\n"), None);
    }

    #[test]
    fn a_kernel_config_round_trips_through_json() {
        let config = KernelConfig {
            values: vec![
                ("BLOCK".to_string(), PyValue::Int(64)),
                ("eps".to_string(), PyValue::Float(1.0)),
                (
                    "order".to_string(),
                    PyValue::List(vec![PyValue::Int(1), PyValue::None]),
                ),
                ("on".to_string(), PyValue::Bool(true)),
            ],
            structure: "ab".repeat(32),
        };
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(
            json,
            format!(
                "{{\"values\":[[\"BLOCK\",64],[\"eps\",1.0],[\"order\",[1,null]],[\"on\",true]],\"structure\":\"{}\"}}",
                "ab".repeat(32)
            )
        );
        assert_eq!(serde_json::from_str::<KernelConfig>(&json).unwrap(), config);
    }
}
