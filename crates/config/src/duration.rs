//! Durations in the config file always carry a unit.

use std::time::Duration;

/// The longest duration accepted: one (Julian) year, `"1y"`. A wait that
/// long is as good as none, and anything larger is a typo, or would
/// overflow the clock arithmetic of a deadline.
pub const MAX_DURATION: Duration = Duration::from_secs(31_557_600);

/// Parses `"500ms"`, `"30s"`, `"5m"`, `"1h"`, `"1m30s"` (humantime syntax),
/// up to [`MAX_DURATION`].
///
/// A unitless value is refused rather than guessed: `30` meaning seconds in
/// one tool and milliseconds in another is how timeouts end up 1000× off.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if is_number(trimmed) {
        return Err(no_unit_hint(trimmed));
    }
    let d = parse_any(text, trimmed)?;
    if d > MAX_DURATION {
        return Err(format!(
            "\"{text}\" is longer than the maximum of {}; \"1y\" is as good as no limit",
            humantime::format_duration(MAX_DURATION)
        ));
    }
    Ok(d)
}

fn parse_any(text: &str, trimmed: &str) -> Result<Duration, String> {
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
        assert_eq!(parse_duration("1y"), Ok(MAX_DURATION));
        assert_eq!(parse_duration("365d"), Ok(Duration::from_secs(365 * 86400)));
        assert!(
            parse_duration("1y 1s")
                .unwrap_err()
                .contains("longer than the maximum of 1year")
        );
        // Past u64 seconds humantime itself refuses.
        assert!(parse_duration("99999999999999999999y").is_err());
        assert!(
            parse_duration("1m30")
                .unwrap_err()
                .contains("30 has no unit")
        );
    }
}
