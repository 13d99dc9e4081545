//! The top-level `audit` key: whether the engine keeps an audit log of the
//! calls it routes, how much of each call it records, and how large the
//! log may grow.
//!
//! `true` (the default), `false`, `"full"`, or an object
//! `{"mode": true | false | "full", "maxFileSize": "10MB", "keep": 5}`.

/// How much the audit log records.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// No log at all.
    Off,
    /// One line per call, with a hash and the size of its arguments.
    #[default]
    On,
    /// As `On`, plus the arguments themselves in clear.
    Full,
}

/// Default size at which `audit.jsonl` is rotated.
pub const DEFAULT_MAX_FILE_SIZE: u64 = 10 * 1024 * 1024;
/// Default number of rotated files kept beside the current one.
pub const DEFAULT_KEEP: usize = 5;
/// Smallest size accepted: below it every line would rotate.
const MIN_FILE_SIZE: u64 = 1024;

/// The `audit` settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settings {
    pub mode: Mode,
    /// `audit.jsonl` is rotated once it has grown past this many bytes.
    pub max_file_size: u64,
    /// Rotated files kept (`audit.jsonl.1` newest … `audit.jsonl.N`).
    pub keep: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            mode: Mode::On,
            max_file_size: DEFAULT_MAX_FILE_SIZE,
            keep: DEFAULT_KEEP,
        }
    }
}

const KEYS: &[&str] = &["mode", "maxFileSize", "keep"];

fn mode_of(v: &serde_json::Value, field: &str) -> Result<Mode, String> {
    match v {
        serde_json::Value::Bool(true) => Ok(Mode::On),
        serde_json::Value::Bool(false) => Ok(Mode::Off),
        serde_json::Value::String(s) if s == "full" => Ok(Mode::Full),
        other => Err(format!(
            "{field}: expected true, false or \"full\", found {other}"
        )),
    }
}

/// `"10MB"`, `"512KB"`, `"1GB"`, `"2048"` or a number: bytes.
fn size_of(v: &serde_json::Value, field: &str) -> Result<u64, String> {
    let bad = || {
        format!(
            "{field}: expected a size such as \"10MB\", \"512KB\" or a number of bytes, found {v}"
        )
    };
    let bytes = match v {
        serde_json::Value::Number(n) => n.as_u64().ok_or_else(bad)?,
        serde_json::Value::String(s) => {
            let s = s.trim();
            let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
            let (digits, unit) = s.split_at(split);
            let n: u64 = digits.parse().map_err(|_| bad())?;
            let unit: u64 = match unit.trim().to_ascii_uppercase().as_str() {
                "" | "B" => 1,
                "KB" | "K" | "KIB" => 1024,
                "MB" | "M" | "MIB" => 1024 * 1024,
                "GB" | "G" | "GIB" => 1024 * 1024 * 1024,
                _ => return Err(bad()),
            };
            n.checked_mul(unit).ok_or_else(bad)?
        }
        _ => return Err(bad()),
    };
    if bytes < MIN_FILE_SIZE {
        return Err(format!(
            "{field}: at least {MIN_FILE_SIZE} bytes (\"1KB\"), found {bytes}"
        ));
    }
    Ok(bytes)
}

impl Settings {
    /// The `audit` value as the file has it; `field` names it in errors.
    pub fn from_json(v: &serde_json::Value, field: &str) -> Result<Settings, String> {
        let mut s = Settings::default();
        let Some(obj) = v.as_object() else {
            s.mode = mode_of(v, field)?;
            return Ok(s);
        };
        if let Some(k) = obj.keys().find(|k| !KEYS.contains(&k.as_str())) {
            return Err(format!(
                "{field}.{k}: unknown key (known: mode, maxFileSize, keep)"
            ));
        }
        if let Some(m) = obj.get("mode") {
            s.mode = mode_of(m, &format!("{field}.mode"))?;
        }
        if let Some(size) = obj.get("maxFileSize") {
            s.max_file_size = size_of(size, &format!("{field}.maxFileSize"))?;
        }
        if let Some(keep) = obj.get("keep") {
            s.keep = keep
                .as_u64()
                .and_then(|k| usize::try_from(k).ok())
                .filter(|k| *k >= 1)
                .ok_or_else(|| {
                    format!("{field}.keep: expected a whole number of at least 1, found {keep}")
                })?;
        }
        Ok(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn true_false_and_full_are_the_three_modes() {
        let of = |v| Settings::from_json(&v, "audit").map(|s| s.mode);
        assert_eq!(of(json!(true)), Ok(Mode::On));
        assert_eq!(of(json!(false)), Ok(Mode::Off));
        assert_eq!(of(json!("full")), Ok(Mode::Full));
        assert!(of(json!("yes")).unwrap_err().contains("audit"));
    }

    #[test]
    fn an_object_sets_mode_size_and_files_kept() {
        let s = Settings::from_json(
            &json!({"mode": "full", "maxFileSize": "2KB", "keep": 3}),
            "audit",
        )
        .unwrap();
        assert_eq!(
            s,
            Settings {
                mode: Mode::Full,
                max_file_size: 2048,
                keep: 3
            }
        );
        let s = Settings::from_json(&json!({"maxFileSize": 4096}), "audit").unwrap();
        assert_eq!((s.mode, s.max_file_size), (Mode::On, 4096));
    }

    #[test]
    fn bad_sizes_counts_and_keys_are_errors_naming_the_field() {
        for v in [
            json!({"maxFileSize": "10 parsecs"}),
            json!({"maxFileSize": 10}),
            json!({"keep": 0}),
            json!({"rotate": 1}),
        ] {
            let e = Settings::from_json(&v, "audit").unwrap_err();
            assert!(e.starts_with("audit."), "{e}");
        }
    }
}
