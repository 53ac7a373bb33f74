//! Reading a model's reply: the one-line description and the candidate `kernel.py`.
//!
//! The candidate is the **last complete** fenced code block (```` ``` ```` or `~~~`, with
//! a `python`/`py`/`python3` tag or none) that defines `kernel_fn` at module level: models
//! often show a draft first and the final file last. A reply whose final fence is never
//! closed is refused even when an earlier block is complete, because the earlier one is
//! then most likely the draft. A leading `<think>…</think>` section (some servers put
//! reasoning there instead of in `reasoning_content`) is dropped before the search.

/// The classes of reply that yield no candidate; each becomes the start of a
/// [`autokernel_core::Proposal::Invalid`] reason.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReplyError {
    /// No fenced code block at all.
    #[error("the reply has no fenced code block{0}")]
    NoCode(String),
    /// The last fence opens a block that is never closed.
    #[error("the code block opened on reply line {line} is never closed (unterminated code block); nothing was run")]
    UnterminatedFence {
        /// 1-based line of the reply where the block opens.
        line: usize,
    },
    /// Complete blocks, but none defines `kernel_fn`.
    #[error("none of the {blocks} code block(s) defines `kernel_fn` at module level")]
    MissingKernelFn {
        /// How many complete blocks there were.
        blocks: usize,
    },
}

impl ReplyError {
    /// The class of the [`autokernel_core::Proposal::Invalid`] it becomes (`no_code`,
    /// `unterminated_fence`, `missing_kernel_fn`).
    pub fn class(&self) -> autokernel_core::InvalidClass {
        use autokernel_core::InvalidClass;
        match self {
            ReplyError::NoCode(_) => InvalidClass::NoCode,
            ReplyError::UnterminatedFence { .. } => InvalidClass::UnterminatedFence,
            ReplyError::MissingKernelFn { .. } => InvalidClass::MissingKernelFn,
        }
    }
}

/// A usable reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedReply {
    /// One line saying what changed (the reply's first line of prose), at most
    /// [`MAX_DESCRIPTION_CHARS`] characters.
    pub description: String,
    /// The complete `kernel.py`, ending in a newline.
    pub source: String,
}

/// Longest description kept, in characters; longer first lines are cut with `…`.
pub const MAX_DESCRIPTION_CHARS: usize = 160;

struct Block {
    lang: String,
    body: String,
    closed: bool,
    open_line: usize,
}

/// A fence line: up to three spaces, then three or more backticks or tildes.
fn fence(line: &str) -> Option<(char, usize, &str)> {
    let indent = line.len() - line.trim_start_matches(' ').len();
    if indent > 3 {
        return None;
    }
    let rest = &line[indent..];
    let ch = rest.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let count = rest.chars().take_while(|c| *c == ch).count();
    (count >= 3).then(|| (ch, count, rest[count..].trim()))
}

fn blocks(text: &str) -> Vec<Block> {
    let mut out: Vec<Block> = Vec::new();
    let mut open: Option<(char, usize)> = None;
    for (index, raw) in text.lines().enumerate() {
        let line = raw.trim_end_matches('\r');
        match (open, fence(line)) {
            (None, Some((ch, count, info))) => {
                open = Some((ch, count));
                out.push(Block {
                    lang: info
                        .split_whitespace()
                        .next()
                        .unwrap_or("")
                        .to_ascii_lowercase(),
                    body: String::new(),
                    closed: false,
                    open_line: index + 1,
                });
            }
            (Some((ch, count)), Some((c, n, info))) if c == ch && n >= count && info.is_empty() => {
                open = None;
                if let Some(b) = out.last_mut() {
                    b.closed = true;
                }
            }
            (Some(_), _) => {
                if let Some(b) = out.last_mut() {
                    b.body.push_str(line);
                    b.body.push('\n');
                }
            }
            (None, None) => {}
        }
    }
    out
}

fn is_python(lang: &str) -> bool {
    matches!(lang, "" | "python" | "py" | "python3")
}

/// Whether `source` defines `kernel_fn` at module level (`def kernel_fn(` or
/// `kernel_fn =` at column 0).
pub fn defines_kernel_fn(source: &str) -> bool {
    source.lines().any(|l| {
        l.strip_prefix("def kernel_fn")
            .or_else(|| l.strip_prefix("async def kernel_fn"))
            .is_some_and(|r| r.trim_start().starts_with('('))
            || l.strip_prefix("kernel_fn").is_some_and(|r| {
                r.trim_start().starts_with('=') && !r.trim_start().starts_with("==")
            })
    })
}

fn strip_think(text: &str) -> &str {
    let t = text.trim_start();
    match t.strip_prefix("<think>") {
        Some(rest) => rest
            .find("</think>")
            .map_or("", |i| &rest[i + "</think>".len()..]),
        None => text,
    }
}

fn description_of(text: &str) -> String {
    let first = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .filter(|l| fence(l).is_none())
        .unwrap_or("");
    let cleaned = first
        .trim_start_matches(['#', '-', '*', '>', ' '])
        .trim_end()
        .replace("**", "")
        .replace('`', "");
    let cleaned = cleaned.trim().trim_end_matches(':').trim();
    if cleaned.is_empty() {
        return "LLM candidate (the reply gave no description)".to_string();
    }
    if cleaned.chars().count() > MAX_DESCRIPTION_CHARS {
        let cut: String = cleaned.chars().take(MAX_DESCRIPTION_CHARS - 1).collect();
        format!("{}…", cut.trim_end())
    } else {
        cleaned.to_string()
    }
}

/// Reads the description and the candidate from a reply's `content` (never from
/// `reasoning_content`).
///
/// # Errors
/// [`ReplyError`] when there is no usable candidate.
pub fn parse_reply(content: &str) -> Result<ParsedReply, ReplyError> {
    let text = strip_think(content);
    let all = blocks(text);
    if let Some(last) = all.last().filter(|b| !b.closed) {
        return Err(ReplyError::UnterminatedFence {
            line: last.open_line,
        });
    }
    if all.is_empty() {
        let hint = if text.trim().is_empty() {
            " (the reply is empty)".to_string()
        } else {
            String::new()
        };
        return Err(ReplyError::NoCode(hint));
    }
    let chosen = all
        .iter()
        .rev()
        .find(|b| is_python(&b.lang) && defines_kernel_fn(&b.body))
        .ok_or(ReplyError::MissingKernelFn { blocks: all.len() })?;
    Ok(ParsedReply {
        description: description_of(text),
        source: chosen.body.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_in_another_language_is_not_the_candidate() {
        let reply = "Run it:\n```python\ndef kernel_fn(x):\n    return x\n```\n```bash\ndef kernel_fn() { :; }\n```\n";
        let parsed = parse_reply(reply).unwrap();
        assert_eq!(parsed.source, "def kernel_fn(x):\n    return x\n");
        assert_eq!(parsed.description, "Run it");
    }

    #[test]
    fn longer_fences_and_tildes_hold_inner_backticks() {
        let reply =
            "Use tl.dot.\n````python\ndef kernel_fn(A, B):\n    s = \"```\"\n    return A\n````\n";
        assert_eq!(
            parse_reply(reply).unwrap().source,
            "def kernel_fn(A, B):\n    s = \"```\"\n    return A\n"
        );
        let reply = "x\n~~~\ndef kernel_fn(x):\n    return x\n~~~\n";
        assert!(parse_reply(reply).is_ok());
    }

    #[test]
    fn classifies_empty_prose_only_and_nameless_replies() {
        assert_eq!(parse_reply("").unwrap_err().class().label(), "no_code");
        assert_eq!(
            parse_reply("I think you should unroll.")
                .unwrap_err()
                .class()
                .label(),
            "no_code"
        );
        assert_eq!(
            parse_reply("Try:\n```python\ndef kernel(x):\n    return x\n```\n").unwrap_err(),
            ReplyError::MissingKernelFn { blocks: 1 }
        );
        // a call or a nested definition does not count
        assert!(!defines_kernel_fn(
            "    def kernel_fn(x):\nkernel_fn(x)\nkernel_fn == 1\n"
        ));
        assert!(defines_kernel_fn("kernel_fn = _impl\n"));
    }

    #[test]
    fn a_think_section_is_never_searched_for_code() {
        let reply =
            "<think>\n```python\ndef kernel_fn(x):\n    return x\n```\n</think>\nNo change needed.";
        assert_eq!(parse_reply(reply).unwrap_err().class().label(), "no_code");
        let reply = "<think>plan</think>\nFuse the passes.\n```python\ndef kernel_fn(x):\n    return x\n```";
        assert_eq!(parse_reply(reply).unwrap().description, "Fuse the passes.");
    }

    #[test]
    fn long_or_decorated_first_lines_become_a_short_description() {
        let reply = format!(
            "**{}**\n```python\ndef kernel_fn(x):\n    return x\n```",
            "a".repeat(300)
        );
        let d = parse_reply(&reply).unwrap().description;
        assert_eq!(d.chars().count(), MAX_DESCRIPTION_CHARS);
        assert!(d.ends_with('…'));
        let reply = "```python\ndef kernel_fn(x):\n    return x\n```";
        assert_eq!(
            parse_reply(reply).unwrap().description,
            "LLM candidate (the reply gave no description)"
        );
    }
}
