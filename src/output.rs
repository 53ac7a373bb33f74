//! What the command prints for the user: results on stdout, or on stderr when stdout
//! carries JSON.

/// A line of information: on stdout with the summary it belongs to, or on stderr when
/// stdout carries JSON (`--json`), which must stay one document a reader can parse.
pub fn print_info(json: bool, text: &str) {
    if json {
        #[allow(clippy::print_stderr)]
        {
            eprintln!("{}", text.trim_end_matches('\n'));
        }
    } else {
        print_stdout(text);
    }
}

/// Writes data for the user to stdout (the one place the binary prints results).
#[allow(clippy::print_stdout)]
pub fn print_stdout(text: &str) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    // a closed pipe (`| head`) is not an error worth reporting
    let _ = writeln!(out, "{}", text.trim_end_matches('\n'));
}

/// One JSON object: on one line among several evaluations (JSON lines), pretty when alone
/// (`bench`, `bench --problem`).
///
/// # Errors
/// When `out` cannot be written.
pub fn write_json(
    out: &mut impl std::io::Write,
    v: &serde_json::Value,
    several: bool,
) -> anyhow::Result<()> {
    let text = if several {
        serde_json::to_string(v)?
    } else {
        serde_json::to_string_pretty(v)?
    };
    writeln!(out, "{text}")?;
    Ok(())
}
