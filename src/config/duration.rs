//! Durations in the config file always carry a unit.

use std::time::Duration;

/// Parses `"500ms"`, `"30s"`, `"5m"`, `"1h"`, `"1m30s"` (humantime syntax).
///
/// A unitless value is refused rather than guessed: `30` meaning seconds in
/// one tool and milliseconds in another is how timeouts end up 1000× off.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if is_number(trimmed) {
        return Err(no_unit_hint(trimmed));
    }
    humantime::parse_duration(trimmed).map_err(|err| match err {
        humantime::DurationError::UnknownUnit { unit, value, .. } if unit.is_empty() => {
            format!("\"{text}\": {value} has no unit; write \"{value}s\" or \"{value}ms\"")
        }
        other => format!("\"{text}\" is not a duration ({other}); write e.g. \"500ms\", \"30s\", \"5m\" or \"1h\""),
    })
}

/// The message for a bare JSON number where a duration belongs.
pub(crate) fn no_unit_hint(number: &str) -> String {
    match number.parse::<u64>() {
        Ok(n) => format!(
            "{number} has no unit; write \"{n}s\" or \"{}ms\"",
            n.saturating_mul(1000)
        ),
        Err(_) => format!("{number} has no unit; write e.g. \"{number}s\""),
    }
}

fn is_number(text: &str) -> bool {
    !text.is_empty() && text.parse::<f64>().is_ok() && text.bytes().any(|b| b.is_ascii_digit())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
    }

    #[test]
    fn refusals() {
        assert_eq!(
            parse_duration("30").unwrap_err(),
            "30 has no unit; write \"30s\" or \"30000ms\""
        );
        assert!(
            parse_duration("30x")
                .unwrap_err()
                .contains("unknown time unit")
        );
        assert!(parse_duration("").is_err());
        assert!(
            parse_duration("1m30")
                .unwrap_err()
                .contains("30 has no unit")
        );
    }
}
