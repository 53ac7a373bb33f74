//! A tolerant JSON scanner: finds where one JSON value ends in a byte buffer, accepting the
//! malformed strings `torch.profiler`'s `export_chrome_trace` writes (raw control
//! characters, raw double quotes, lone backslashes), and optionally writes a repaired copy.
//!
//! The scanner never builds values; it only tracks strings and nesting, so it runs at
//! memory speed. [`crate::import`] cuts the `traceEvents` array into events with it and
//! hands each event's bytes to `serde_json::from_slice`.
//!
//! # Raw quotes
//! A `"` inside a string closes it only if what follows makes sense for the string's
//! position: `:` after a key; `}` or `,` followed by a key and `:` after a value in an
//! object; `]` or `,` followed by the start of a value after a value in an array. Every
//! closing quote of valid JSON passes these tests, so valid input is never changed; a quote
//! that fails them is content and is escaped in the repaired copy.

/// Whether a byte needs attention inside a string: `"`, `\` or a control character.
const SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    let mut i = 0;
    while i < 0x20 {
        t[i] = true;
        i += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
};

/// Where a string sits, which decides what may follow its closing quote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ctx {
    /// An object key: `:` follows.
    Key,
    /// A value inside an object: `}` or `, "key":` follows.
    ObjValue,
    /// A value inside an array: `]` or `, value` follows.
    ArrValue,
}

/// A scanned value: its end (exclusive) and whether it needed repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Scanned {
    /// Index one past the value's last byte.
    pub end: usize,
    /// The value held raw control characters, raw quotes, lone backslashes, or ended at
    /// the end of the input before it was complete.
    pub dirty: bool,
}

#[inline]
fn is_ws(b: u8) -> bool {
    matches!(b, b' ' | b'\t' | b'\n' | b'\r')
}

#[inline]
pub(crate) fn skip_ws(buf: &[u8], mut i: usize) -> usize {
    while i < buf.len() && is_ws(buf[i]) {
        i += 1;
    }
    i
}

/// Decides whether the quote at `q` closes a string in position `ctx`.
/// `None` means more input is needed to decide.
fn closes(buf: &[u8], q: usize, eof: bool, ctx: Ctx) -> Option<bool> {
    let more = |eof: bool| if eof { Some(true) } else { None };
    let j = skip_ws(buf, q + 1);
    let Some(&c) = buf.get(j) else {
        return more(eof);
    };
    match ctx {
        Ctx::Key => Some(c == b':'),
        Ctx::ArrValue => match c {
            b']' => Some(true),
            b',' => {
                let k = skip_ws(buf, j + 1);
                let Some(&n) = buf.get(k) else {
                    return more(eof);
                };
                Some(matches!(
                    n,
                    b'"' | b'{' | b'[' | b'-' | b'0'..=b'9' | b't' | b'f' | b'n'
                ))
            }
            _ => Some(false),
        },
        Ctx::ObjValue => match c {
            b'}' => Some(true),
            b',' => {
                let k = skip_ws(buf, j + 1);
                let Some(&n) = buf.get(k) else {
                    return more(eof);
                };
                if n != b'"' {
                    return Some(false);
                }
                // the next key must be a plain string followed by `:`
                let mut m = k + 1;
                let limit = m + 4096;
                loop {
                    let Some(&b) = buf.get(m) else {
                        return more(eof);
                    };
                    if m > limit {
                        return Some(true);
                    }
                    match b {
                        b'\\' => m += 2,
                        b'"' => break,
                        b if b < 0x20 => return Some(false),
                        _ => m += 1,
                    }
                }
                let m = skip_ws(buf, m + 1);
                match buf.get(m) {
                    Some(&b) => Some(b == b':'),
                    None => more(eof),
                }
            }
            _ => Some(false),
        },
    }
}

fn is_hex(b: u8) -> bool {
    b.is_ascii_hexdigit()
}

fn hex4(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0u32, |acc, &b| {
        acc * 16 + (b as char).to_digit(16).unwrap_or(0)
    })
}

/// Scans the string whose opening quote is at `open`. Returns the index after its closing
/// quote and whether it needed repair, or `None` when more input is needed. With `R`,
/// appends the repaired string (quotes included) to `out`.
fn scan_string<const R: bool>(
    buf: &[u8],
    open: usize,
    eof: bool,
    ctx: Ctx,
    out: &mut Vec<u8>,
) -> Option<(usize, bool)> {
    if R {
        out.push(b'"');
    }
    let mut i = open + 1;
    let mut dirty = false;
    loop {
        let run = i;
        while i < buf.len() && !SPECIAL[buf[i] as usize] {
            i += 1;
        }
        if R {
            out.extend_from_slice(&buf[run..i]);
        }
        let Some(&b) = buf.get(i) else {
            if eof {
                if R {
                    out.push(b'"');
                }
                return Some((i, true));
            }
            return None;
        };
        match b {
            b'\\' => {
                let Some(&n) = buf.get(i + 1) else {
                    if !eof {
                        return None;
                    }
                    dirty = true;
                    if R {
                        out.extend_from_slice(b"\\\\");
                    }
                    i += 1;
                    continue;
                };
                match n {
                    b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                        if R {
                            out.extend_from_slice(&buf[i..i + 2]);
                        }
                        i += 2;
                    }
                    b'u' => {
                        if i + 6 > buf.len() && !eof {
                            return None;
                        }
                        if i + 6 <= buf.len() && buf[i + 2..i + 6].iter().all(|&h| is_hex(h)) {
                            if R {
                                push_unicode_escape(buf, i, out);
                            }
                            i += 6;
                        } else {
                            dirty = true;
                            if R {
                                out.extend_from_slice(b"\\\\");
                            }
                            i += 1;
                        }
                    }
                    _ => {
                        dirty = true;
                        if R {
                            out.extend_from_slice(b"\\\\");
                        }
                        i += 1;
                    }
                }
            }
            b'"' => match closes(buf, i, eof, ctx) {
                None => return None,
                Some(true) => {
                    if R {
                        out.push(b'"');
                    }
                    return Some((i + 1, dirty));
                }
                Some(false) => {
                    dirty = true;
                    if R {
                        out.extend_from_slice(b"\\\"");
                    }
                    i += 1;
                }
            },
            c => {
                dirty = true;
                if R {
                    match c {
                        b'\n' => out.extend_from_slice(b"\\n"),
                        b'\r' => out.extend_from_slice(b"\\r"),
                        b'\t' => out.extend_from_slice(b"\\t"),
                        _ => out.extend_from_slice(format!("\\u{:04x}", c).as_bytes()),
                    }
                }
                i += 1;
            }
        }
    }
}

/// Copies the `\uXXXX` escape at `i`, replacing an unpaired surrogate (which serde_json
/// rejects) with U+FFFD.
fn push_unicode_escape(buf: &[u8], i: usize, out: &mut Vec<u8>) {
    let code = hex4(&buf[i + 2..i + 6]);
    let paired_low = |j: usize| {
        buf.len() >= j + 6
            && buf[j] == b'\\'
            && buf[j + 1] == b'u'
            && buf[j + 2..j + 6].iter().all(|&h| is_hex(h))
            && (0xDC00..0xE000).contains(&hex4(&buf[j + 2..j + 6]))
    };
    let prev_high = |j: usize| {
        j >= 6
            && buf[j - 6] == b'\\'
            && buf[j - 5] == b'u'
            && buf[j - 4..j].iter().all(|&h| is_hex(h))
            && (0xD800..0xDC00).contains(&hex4(&buf[j - 4..j]))
    };
    let ok = match code {
        0xD800..=0xDBFF => paired_low(i + 6),
        0xDC00..=0xDFFF => prev_high(i),
        _ => true,
    };
    if ok {
        out.extend_from_slice(&buf[i..i + 6]);
    } else {
        out.extend_from_slice(b"\\ufffd");
    }
}

/// Scans one JSON value starting at `start` (after any whitespace) in position `ctx`.
///
/// Returns `None` when the buffer ends before the value does and `eof` is false. At the end
/// of input an incomplete value is returned as ending there, marked dirty. With `R`, the
/// repaired bytes of the value are appended to `out`. `stack` is scratch space.
pub(crate) fn scan_value<const R: bool>(
    buf: &[u8],
    start: usize,
    eof: bool,
    ctx: Ctx,
    stack: &mut Vec<u8>,
    out: &mut Vec<u8>,
) -> Option<Scanned> {
    stack.clear();
    let mut i = start;
    let mut dirty = false;
    let mut expect_key = false;
    // a scalar at the top: number, literal or string
    match buf.get(i) {
        None => {
            return if eof {
                Some(Scanned {
                    end: i,
                    dirty: true,
                })
            } else {
                None
            }
        }
        Some(b'"') => {
            let (end, d) = scan_string::<R>(buf, i, eof, ctx, out)?;
            return Some(Scanned { end, dirty: d });
        }
        Some(b'{' | b'[') => {}
        Some(_) => {
            while i < buf.len() && !matches!(buf[i], b',' | b'}' | b']') && !is_ws(buf[i]) {
                i += 1;
            }
            if i == buf.len() && !eof {
                return None;
            }
            if R {
                out.extend_from_slice(&buf[start..i]);
            }
            return Some(Scanned {
                end: i,
                dirty: false,
            });
        }
    }
    loop {
        let Some(&b) = buf.get(i) else {
            return if eof {
                Some(Scanned {
                    end: i,
                    dirty: true,
                })
            } else {
                None
            };
        };
        match b {
            b'"' => {
                let here = match stack.last() {
                    Some(b'{') if expect_key => Ctx::Key,
                    Some(b'{') => Ctx::ObjValue,
                    _ => Ctx::ArrValue,
                };
                let (next, d) = scan_string::<R>(buf, i, eof, here, out)?;
                dirty |= d;
                i = next;
                continue;
            }
            b'{' => {
                stack.push(b'{');
                expect_key = true;
            }
            b'[' => stack.push(b'['),
            b'}' | b']' => {
                stack.pop();
                if stack.is_empty() {
                    if R {
                        out.push(b);
                    }
                    return Some(Scanned { end: i + 1, dirty });
                }
            }
            b',' if stack.last() == Some(&b'{') => expect_key = true,
            b':' => expect_key = false,
            _ => {}
        }
        if R {
            out.push(b);
        }
        i += 1;
    }
}

/// Scans and repairs one value: the repaired bytes are in `out` (cleared first), decoded
/// lossily as UTF-8 (invalid sequences become U+FFFD).
pub(crate) fn repair_value(buf: &[u8], ctx: Ctx, stack: &mut Vec<u8>, out: &mut Vec<u8>) {
    out.clear();
    if scan_value::<true>(buf, 0, true, ctx, stack, out).is_none() {
        // unreachable with eof = true; keep the input as is
        out.clear();
        out.extend_from_slice(buf);
    }
    if std::str::from_utf8(out).is_err() {
        let fixed = String::from_utf8_lossy(out).into_owned();
        *out = fixed.into_bytes();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(s: &[u8]) -> Scanned {
        scan_value::<false>(s, 0, true, Ctx::ArrValue, &mut vec![], &mut vec![]).unwrap()
    }

    fn repaired(s: &[u8]) -> String {
        let mut out = vec![];
        repair_value(s, Ctx::ArrValue, &mut vec![], &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn valid_json_is_clean_and_unchanged() {
        let s = br#"{"a":"x\"y\\z\u00e9","b":[1,"q",{"c":"}"}],"d":{}} tail"#;
        let r = scan(s);
        assert_eq!(r.end, s.len() - 5);
        assert!(!r.dirty);
        assert_eq!(repaired(&s[..r.end]).as_bytes(), &s[..r.end]);
    }

    #[test]
    fn raw_quotes_and_newlines_in_a_name_are_escaped() {
        let s = b"{\"name\":\"lib = Library(\"x\", \"IMPL\")\n(1): <module>\",\"pid\":1}";
        let r = scan(s);
        assert_eq!(r.end, s.len());
        assert!(r.dirty);
        let fixed = repaired(s);
        let v: serde_json::Value = serde_json::from_str(&fixed).unwrap();
        assert_eq!(v["name"], "lib = Library(\"x\", \"IMPL\")\n(1): <module>");
        assert_eq!(v["pid"], 1);
    }

    #[test]
    fn lone_backslashes_are_doubled() {
        let s = br#"{"name":"C:\work\kern.py(3): run","n":"\u12"}"#;
        let fixed = repaired(s);
        let v: serde_json::Value = serde_json::from_str(&fixed).unwrap();
        assert_eq!(v["name"], "C:\\work\\kern.py(3): run");
        assert_eq!(v["n"], "\\u12");
    }

    #[test]
    fn lone_surrogates_become_replacement_characters() {
        let s = br#"{"a":"x\ud800y","b":"\ud83d\ude00"}"#;
        let v: serde_json::Value = serde_json::from_str(&repaired(s)).unwrap();
        assert_eq!(v["a"], "x\u{fffd}y");
        assert_eq!(v["b"], "\u{1f600}");
    }

    #[test]
    fn invalid_utf8_is_decoded_lossily() {
        let s = b"{\"a\":\"run\xff\"}";
        let v: serde_json::Value = serde_json::from_str(&repaired(s)).unwrap();
        assert_eq!(v["a"], "run\u{fffd}");
    }

    #[test]
    fn an_incomplete_value_asks_for_more_input() {
        let s = br#"{"a":"abc"#;
        assert!(
            scan_value::<false>(s, 0, false, Ctx::ArrValue, &mut vec![], &mut vec![]).is_none()
        );
        // a quote whose meaning depends on bytes not read yet
        let s = br#"{"a":"abc","#;
        assert!(
            scan_value::<false>(s, 0, false, Ctx::ArrValue, &mut vec![], &mut vec![]).is_none()
        );
    }

    #[test]
    fn scalars_end_at_a_delimiter() {
        assert_eq!(scan(b"123 ,").end, 3);
        assert_eq!(scan(b"true]").end, 4);
        assert_eq!(scan(b"\"s\",1").end, 3);
    }
}
