//! The commit message of an experiment: `exp <n>: <target>: <description>` and trailers.
//!
//! The trailers are the machine-readable part (`git log --format='%(trailers)'` shows them);
//! the subject line is for people. Parsing prefers the trailers and falls back to the subject.

/// Trailer naming the agent that proposed the experiment.
pub const TRAILER_AGENT: &str = "Autokernel-Agent";
/// Trailer carrying the experiment number (the `experiment` column of `results.tsv`).
pub const TRAILER_EXPERIMENT: &str = "Autokernel-Experiment";
/// Trailer carrying the target id (the folder `targets/<id>/`).
pub const TRAILER_TARGET: &str = "Autokernel-Target";

/// What an experiment commit's message says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedMessage {
    /// The experiment number.
    pub experiment: u64,
    /// The target id.
    pub target: String,
    /// The agent's one-line description.
    pub description: String,
    /// The agent's name (empty when the trailer is absent).
    pub agent: String,
}

/// Replaces line breaks and tabs so a value stays on one line of the message.
fn one_line(text: &str) -> String {
    let flat: String = text
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    flat.trim().to_string()
}

/// The full commit message of experiment `experiment` on `target`.
pub fn format_message(experiment: u64, target: &str, description: &str, agent: &str) -> String {
    format!(
        "exp {experiment}: {target}: {}\n\n{TRAILER_AGENT}: {}\n{TRAILER_EXPERIMENT}: {experiment}\n{TRAILER_TARGET}: {target}\n",
        one_line(description),
        one_line(agent),
    )
}

/// Reads an experiment commit's message; `None` when it is not one (e.g. a user's commit).
pub fn parse_message(message: &str) -> Option<ParsedMessage> {
    let mut lines = message.lines();
    let subject = lines.next().unwrap_or_default();
    let trailer = |key: &str| {
        message.lines().rev().find_map(|l| {
            l.strip_prefix(key)
                .and_then(|rest| rest.strip_prefix(':'))
                .map(|v| v.trim().to_string())
        })
    };
    // subject: `exp <n>: <target>: <description>`
    let from_subject = subject.strip_prefix("exp ").and_then(|rest| {
        let (n, rest) = rest.split_once(": ")?;
        let n: u64 = n.trim().parse().ok()?;
        let (target, description) = rest.split_once(": ").unwrap_or((rest, ""));
        Some((n, target.to_string(), description.to_string()))
    });
    let experiment = trailer(TRAILER_EXPERIMENT)
        .and_then(|v| v.parse().ok())
        .or(from_subject.as_ref().map(|s| s.0))?;
    let target = trailer(TRAILER_TARGET).or(from_subject.as_ref().map(|s| s.1.clone()))?;
    let description = from_subject.map(|s| s.2).unwrap_or_default();
    Some(ParsedMessage {
        experiment,
        target,
        description,
        agent: trailer(TRAILER_AGENT).unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_round_trips_through_the_parser() {
        let m = format_message(12, "01-softmax", "BLOCK 256\nwarps 8", "tuner");
        assert_eq!(
            m,
            "exp 12: 01-softmax: BLOCK 256 warps 8\n\nAutokernel-Agent: tuner\n\
             Autokernel-Experiment: 12\nAutokernel-Target: 01-softmax\n"
        );
        assert_eq!(
            parse_message(&m),
            Some(ParsedMessage {
                experiment: 12,
                target: "01-softmax".into(),
                description: "BLOCK 256 warps 8".into(),
                agent: "tuner".into(),
            })
        );
    }

    #[test]
    fn a_subject_without_trailers_still_parses_and_other_commits_do_not() {
        let p = parse_message("exp 3: t: a: b\n").expect("subject form");
        assert_eq!((p.experiment, p.target.as_str()), (3, "t"));
        assert_eq!(p.description, "a: b");
        assert_eq!(p.agent, "");
        assert_eq!(parse_message("initial commit\n"), None);
        assert_eq!(parse_message("exp x: t: d\n"), None);
    }
}
