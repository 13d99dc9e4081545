//! The CLI as the host on a terminal: servers' elicitation and sampling
//! requests become prompts for the person at the keyboard.
//!
//! Used when stdin and stderr are terminals and no `--on-*` policy flag is
//! given. Prompts run on a blocking thread, one at a time, and draw on
//! stderr (stdout keeps the command's output). Esc or Ctrl-C during a
//! prompt cancels an elicitation and declines a sampling request.

use std::io::IsTerminal as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use indexmap::IndexMap;
use inquire::validator::Validation;
use inquire::{Confirm, Editor, InquireError, MultiSelect, Select, Text};
use mcphost::client::{Host, HostRequest};
use mcphost::protocol::capabilities::{ElicitationCap, Empty, SamplingCap};
use mcphost::protocol::{
    ClientCapabilities, ErrorObject, RawValue, error_codes, methods, raw_field, set_fields, to_raw,
};
use mcphost::transport::BoxFuture;
use serde::Deserialize;
use serde_json::Value;

/// `_meta` key naming the server a request comes from when it reaches us
/// through the daemon.
const SERVER_META: &str = "dev.mcphost/server";

/// Overrides how a consented URL is opened: a command line that gets the URL
/// as its last argument (tests use it to see the URL without a browser).
pub const OPEN_URL_COMMAND_ENV: &str = "MCPHOST_OPEN_URL_COMMAND";

/// A [`Host`] that asks the person at the terminal.
pub struct TerminalHost {
    /// One prompt at a time: requests from several servers queue up.
    turn: Arc<tokio::sync::Mutex<()>>,
    /// Set while a prompt holds the terminal (in raw mode).
    prompting: Arc<AtomicBool>,
    /// The terminal's settings before any prompt.
    saved: Option<libc::termios>,
}

impl TerminalHost {
    pub fn new() -> Self {
        // SAFETY: tcgetattr only writes the struct we pass; a zeroed termios
        // is a valid value of this plain C struct.
        let saved = unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            (libc::tcgetattr(libc::STDIN_FILENO, &mut t) == 0).then_some(t)
        };
        TerminalHost {
            turn: Arc::default(),
            prompting: Arc::default(),
            saved,
        }
    }

    /// Put the terminal back if the command ends while a prompt is still
    /// open (its server died, the call timed out): the prompt's thread
    /// dies with the process and would leave the terminal raw. True when a
    /// prompt was open.
    pub fn restore_terminal(&self) -> bool {
        if !self.prompting.load(Ordering::SeqCst) {
            return false;
        }
        if let Some(t) = &self.saved {
            // SAFETY: tcsetattr reads the struct tcgetattr filled in.
            unsafe { libc::tcsetattr(libc::STDIN_FILENO, libc::TCSANOW, t) };
        }
        // Show the cursor, end bracketed paste, leave the prompt's line.
        eprint!("\x1b[?25h\x1b[?2004l\r\n");
        true
    }

    /// Whether a person can answer prompts: stdin and stderr are terminals.
    pub fn available() -> bool {
        std::io::stdin().is_terminal() && std::io::stderr().is_terminal()
    }

    /// The answer to one server→client request from `server` (the daemon's
    /// `_meta` name, when present, wins: through the daemon `server` is the
    /// daemon itself).
    pub fn answer(
        &self,
        server: &str,
        method: &str,
        params: Option<&RawValue>,
    ) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        let request = match Request::parse(server, method, params) {
            Ok(r) => r,
            Err(e) => return Box::pin(std::future::ready(Err(e))),
        };
        let turn = self.turn.clone();
        let prompting = self.prompting.clone();
        Box::pin(async move {
            let turn = turn.lock_owned().await;
            tokio::task::spawn_blocking(move || {
                let _turn = turn;
                prompting.store(true, Ordering::SeqCst);
                let answer = request.ask();
                prompting.store(false, Ordering::SeqCst);
                answer
            })
            .await
            .unwrap_or_else(|e| Err(internal(format!("the prompt failed: {e}"))))
        })
    }
}

impl Host for TerminalHost {
    fn capabilities(&self) -> ClientCapabilities {
        ClientCapabilities {
            roots: None,
            sampling: Some(SamplingCap::default()),
            elicitation: Some(ElicitationCap {
                form: Some(Empty::default()),
                url: Some(Empty::default()),
            }),
        }
    }

    fn handle(&self, r: HostRequest) -> BoxFuture<'static, Result<Box<RawValue>, ErrorObject>> {
        self.answer(&r.server, &r.method, r.params.as_deref())
    }
}

fn invalid_params(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(error_codes::INVALID_PARAMS, message)
}

fn internal(message: impl Into<String>) -> ErrorObject {
    ErrorObject::new(error_codes::INTERNAL_ERROR, message)
}

fn user_rejected() -> ErrorObject {
    ErrorObject::new(error_codes::USER_REJECTED, "User rejected sampling request")
}

/// One request, parsed and checked before anyone is asked.
#[derive(Debug)]
enum Request {
    Form(FormRequest),
    Url(UrlRequest),
    Sampling(SamplingRequest),
}

impl Request {
    fn parse(
        server: &str,
        method: &str,
        params: Option<&RawValue>,
    ) -> Result<Request, ErrorObject> {
        let server = asking_server(server, params);
        match method {
            methods::ELICITATION_CREATE => {
                let params =
                    params.ok_or_else(|| invalid_params("elicitation/create without params"))?;
                let p: ElicitParams = serde_json::from_str(params.get())
                    .map_err(|e| invalid_params(format!("elicitation/create: {e}")))?;
                match p.mode.as_deref() {
                    None | Some("form") => Ok(Request::Form(FormRequest::new(server, p)?)),
                    Some("url") => Ok(Request::Url(UrlRequest::new(server, p)?)),
                    Some(other) => Err(invalid_params(format!(
                        "elicitation mode {other:?} is not supported (form and url are)"
                    ))),
                }
            }
            methods::SAMPLING_CREATE_MESSAGE => {
                let params = params
                    .ok_or_else(|| invalid_params("sampling/createMessage without params"))?;
                let p: SamplingParams = serde_json::from_str(params.get())
                    .map_err(|e| invalid_params(format!("sampling/createMessage: {e}")))?;
                Ok(Request::Sampling(SamplingRequest::new(server, p)))
            }
            other => Err(ErrorObject::method_not_found(other)),
        }
    }

    fn ask(self) -> Result<Box<RawValue>, ErrorObject> {
        match self {
            Request::Form(f) => f.ask(),
            Request::Url(u) => u.ask(),
            Request::Sampling(s) => s.ask(),
        }
    }
}

fn asking_server(server: &str, params: Option<&RawValue>) -> String {
    params
        .and_then(|p| raw_field::<Value>(p, "_meta").ok().flatten())
        .and_then(|m| m.get(SERVER_META)?.as_str().map(str::to_owned))
        .unwrap_or_else(|| server.to_owned())
}

/// Why a prompt ended without an answer.
enum Stop {
    /// Esc, Ctrl-C, or the terminal went away.
    Dismissed,
}

fn stopped(e: InquireError) -> Stop {
    match e {
        InquireError::OperationCanceled | InquireError::OperationInterrupted => {}
        other => eprintln!("mcphost: the prompt failed: {other}"),
    }
    Stop::Dismissed
}

fn heading(text: &str) {
    eprintln!();
    eprintln!("── {text} ──");
}

/// Text with control characters (a server's escape sequences) made visible.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                '\u{fffd}'
            } else {
                c
            }
        })
        .collect()
}

// ------------------------------------------------------------------- forms

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct ElicitParams {
    #[serde(default)]
    mode: Option<String>,
    #[serde(default)]
    message: String,
    #[serde(default)]
    requested_schema: Option<Schema>,
    #[serde(default)]
    url: Option<String>,
    #[serde(default)]
    elicitation_id: Option<String>,
}

#[derive(Deserialize)]
struct Schema {
    #[serde(default)]
    properties: IndexMap<String, Property>,
    #[serde(default)]
    required: Vec<String>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Property {
    #[serde(rename = "type", default)]
    kind: Option<String>,
    #[serde(default)]
    title: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    default: Option<Value>,
    #[serde(rename = "enum", default)]
    options: Option<Vec<String>>,
    #[serde(default)]
    enum_names: Option<Vec<String>>,
    #[serde(default)]
    one_of: Option<Vec<ConstOption>>,
    #[serde(default)]
    format: Option<String>,
    #[serde(default)]
    minimum: Option<f64>,
    #[serde(default)]
    maximum: Option<f64>,
    #[serde(default)]
    min_length: Option<usize>,
    #[serde(default)]
    max_length: Option<usize>,
    #[serde(default)]
    items: Option<Items>,
    #[serde(default)]
    min_items: Option<usize>,
    #[serde(default)]
    max_items: Option<usize>,
}

#[derive(Deserialize)]
struct Items {
    #[serde(rename = "enum", default)]
    options: Option<Vec<String>>,
    #[serde(rename = "anyOf", default)]
    any_of: Option<Vec<ConstOption>>,
}

#[derive(Deserialize, Clone)]
struct ConstOption {
    #[serde(rename = "const")]
    value: String,
    #[serde(default)]
    title: Option<String>,
}

/// One choice of an enum: the value sent and what the person sees.
#[derive(Debug, Clone, PartialEq)]
struct Choice {
    value: String,
    label: String,
}

impl std::fmt::Display for Choice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.label)
    }
}

#[derive(Debug, Clone, PartialEq)]
enum Kind {
    Text {
        default: Option<String>,
        format: Option<String>,
        min_length: Option<usize>,
        max_length: Option<usize>,
    },
    Number {
        integer: bool,
        /// The schema's default as written.
        default: Option<String>,
        minimum: Option<f64>,
        maximum: Option<f64>,
    },
    Bool {
        default: Option<bool>,
    },
    One {
        choices: Vec<Choice>,
        default: Option<usize>,
    },
    Many {
        choices: Vec<Choice>,
        default: Vec<usize>,
        min: Option<usize>,
        max: Option<usize>,
    },
}

#[derive(Debug, Clone, PartialEq)]
struct Field {
    name: String,
    label: String,
    description: Option<String>,
    required: bool,
    kind: Kind,
}

fn choices(values: &[String], names: Option<&[String]>) -> Vec<Choice> {
    values
        .iter()
        .enumerate()
        .map(|(i, v)| Choice {
            value: v.clone(),
            label: names
                .and_then(|n| n.get(i))
                .cloned()
                .unwrap_or_else(|| v.clone()),
        })
        .collect()
}

fn const_choices(options: &[ConstOption]) -> Vec<Choice> {
    options
        .iter()
        .map(|o| Choice {
            value: o.value.clone(),
            label: o.title.clone().unwrap_or_else(|| o.value.clone()),
        })
        .collect()
}

fn position(choices: &[Choice], value: Option<&Value>) -> Option<usize> {
    let v = value?.as_str()?;
    choices.iter().position(|c| c.value == v)
}

impl Field {
    fn new(name: &str, p: Property, required: bool) -> Result<Field, ErrorObject> {
        let unsupported = |what: &str| {
            invalid_params(format!(
                "property {name:?}: {what} is not supported in a form"
            ))
        };
        let kind = match p.kind.as_deref() {
            Some("string") => {
                let listed = match (&p.one_of, &p.options) {
                    (Some(one_of), _) => Some(const_choices(one_of)),
                    (None, Some(options)) => Some(choices(options, p.enum_names.as_deref())),
                    (None, None) => None,
                };
                match listed {
                    Some(choices) => Kind::One {
                        default: position(&choices, p.default.as_ref()),
                        choices,
                    },
                    None => Kind::Text {
                        default: p
                            .default
                            .as_ref()
                            .and_then(Value::as_str)
                            .map(str::to_owned),
                        format: p.format,
                        min_length: p.min_length,
                        max_length: p.max_length,
                    },
                }
            }
            Some(kind @ ("number" | "integer")) => Kind::Number {
                integer: kind == "integer",
                default: p
                    .default
                    .as_ref()
                    .filter(|d| d.is_number())
                    .map(Value::to_string),
                minimum: p.minimum,
                maximum: p.maximum,
            },
            Some("boolean") => Kind::Bool {
                default: p.default.as_ref().and_then(Value::as_bool),
            },
            Some("array") => {
                let items = p
                    .items
                    .ok_or_else(|| unsupported("an array without items"))?;
                let choices = match (&items.any_of, &items.options) {
                    (Some(any_of), _) => const_choices(any_of),
                    (None, Some(options)) => choices(options, None),
                    (None, None) => return Err(unsupported("an array of anything but an enum")),
                };
                let default = p
                    .default
                    .as_ref()
                    .and_then(Value::as_array)
                    .map(|d| {
                        d.iter()
                            .filter_map(|v| position(&choices, Some(v)))
                            .collect()
                    })
                    .unwrap_or_default();
                Kind::Many {
                    choices,
                    default,
                    min: p.min_items,
                    max: p.max_items,
                }
            }
            Some(other) => return Err(unsupported(&format!("type {other:?}"))),
            None => return Err(unsupported("a property without a type")),
        };
        Ok(Field {
            name: name.to_owned(),
            label: p.title.unwrap_or_else(|| name.to_owned()),
            description: p.description,
            required,
            kind,
        })
    }

    /// What the person is told under the prompt: the description, the
    /// type and its bounds.
    fn help(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        if let Some(d) = &self.description {
            parts.push(printable(d));
        }
        let kind = match &self.kind {
            Kind::Text {
                format,
                min_length,
                max_length,
                ..
            } => {
                let mut k = match format.as_deref() {
                    Some("email") => "email address".to_owned(),
                    Some("uri") => "URI".to_owned(),
                    Some("date") => "date, YYYY-MM-DD".to_owned(),
                    Some("date-time") => "date and time, YYYY-MM-DDTHH:MM:SSZ".to_owned(),
                    _ => "text".to_owned(),
                };
                match (min_length, max_length) {
                    (Some(a), Some(b)) => k.push_str(&format!(", {a} to {b} characters")),
                    (Some(a), None) => k.push_str(&format!(", at least {a} characters")),
                    (None, Some(b)) => k.push_str(&format!(", at most {b} characters")),
                    (None, None) => {}
                }
                k
            }
            Kind::Number {
                integer,
                minimum,
                maximum,
                ..
            } => {
                let mut k = if *integer { "integer" } else { "number" }.to_owned();
                match (minimum, maximum) {
                    (Some(a), Some(b)) => k.push_str(&format!(", {a} to {b}")),
                    (Some(a), None) => k.push_str(&format!(", at least {a}")),
                    (None, Some(b)) => k.push_str(&format!(", at most {b}")),
                    (None, None) => {}
                }
                k
            }
            Kind::Bool { .. } => "yes or no".to_owned(),
            Kind::One { .. } => "pick one".to_owned(),
            Kind::Many { min, max, .. } => {
                let mut k = "space toggles, enter confirms".to_owned();
                match (min, max) {
                    (Some(a), Some(b)) => k.push_str(&format!("; pick {a} to {b}")),
                    (Some(a), None) => k.push_str(&format!("; pick at least {a}")),
                    (None, Some(b)) => k.push_str(&format!("; pick at most {b}")),
                    (None, None) => {}
                }
                k
            }
        };
        parts.push(kind);
        parts.push(
            if self.required {
                "required"
            } else {
                "optional"
            }
            .to_owned(),
        );
        parts.push("Esc cancels".to_owned());
        parts.join(" · ")
    }

    /// Ask for this field: its JSON value, or `None` to leave it out.
    fn ask(&self) -> Result<Option<Box<RawValue>>, Stop> {
        let label = if self.required {
            format!("{}:", printable(&self.label))
        } else {
            format!("{} (optional):", printable(&self.label))
        };
        let help = self.help();
        let raw = |v: &Value| to_raw(v).map_err(|_| Stop::Dismissed);
        match &self.kind {
            Kind::Text { default, .. } | Kind::Number { default, .. } => {
                let kind = self.kind.clone();
                let required = self.required;
                let mut prompt =
                    Text::new(&label)
                        .with_help_message(&help)
                        .with_validator(move |s: &str| {
                            Ok(match check_input(&kind, required, s) {
                                Ok(_) => Validation::Valid,
                                Err(e) => Validation::Invalid(e.into()),
                            })
                        });
                if let Some(d) = default {
                    prompt = prompt.with_default(d);
                }
                let text = prompt.prompt().map_err(stopped)?;
                check_input(&self.kind, self.required, &text).map_err(|_| Stop::Dismissed)
            }
            Kind::Bool { default } => match (default, self.required) {
                (None, false) => {
                    let options = vec!["yes", "no", "(no answer)"];
                    let picked = Select::new(&label, options)
                        .with_help_message(&help)
                        .with_starting_cursor(2)
                        .prompt()
                        .map_err(stopped)?;
                    match picked {
                        "yes" => raw(&Value::Bool(true)).map(Some),
                        "no" => raw(&Value::Bool(false)).map(Some),
                        _ => Ok(None),
                    }
                }
                (default, _) => {
                    let mut prompt = Confirm::new(&label).with_help_message(&help);
                    if let Some(d) = default {
                        prompt = prompt.with_default(*d);
                    }
                    let yes = prompt.prompt().map_err(stopped)?;
                    raw(&Value::Bool(yes)).map(Some)
                }
            },
            Kind::One { choices, default } => {
                let mut options = choices.clone();
                if !self.required {
                    options.push(Choice {
                        value: String::new(),
                        label: "(no answer)".to_owned(),
                    });
                }
                let start = default.unwrap_or(if self.required { 0 } else { choices.len() });
                let picked = Select::new(&label, options)
                    .with_help_message(&help)
                    .with_starting_cursor(start)
                    .raw_prompt()
                    .map_err(stopped)?;
                if picked.index >= choices.len() {
                    return Ok(None);
                }
                raw(&Value::String(picked.value.value)).map(Some)
            }
            Kind::Many {
                choices,
                default,
                min,
                max,
            } => {
                let (min, max, required) = (*min, *max, self.required);
                let picked = MultiSelect::new(&label, choices.clone())
                    .with_help_message(&help)
                    .with_default(default)
                    .with_validator(
                        move |picked: &[inquire::list_option::ListOption<&Choice>]| {
                            Ok(match check_count(picked.len(), min, max, required) {
                                Ok(()) => Validation::Valid,
                                Err(e) => Validation::Invalid(e.into()),
                            })
                        },
                    )
                    .prompt()
                    .map_err(stopped)?;
                if picked.is_empty() && !self.required {
                    return Ok(None);
                }
                let values: Vec<Value> =
                    picked.into_iter().map(|c| Value::String(c.value)).collect();
                raw(&Value::Array(values)).map(Some)
            }
        }
    }
}

/// How many items a multi-select may have (an optional one may have none).
fn check_count(
    n: usize,
    min: Option<usize>,
    max: Option<usize>,
    required: bool,
) -> Result<(), String> {
    if n == 0 && !required {
        return Ok(());
    }
    if let Some(m) = min
        && n < m
    {
        return Err(format!("pick at least {m}"));
    }
    if let Some(m) = max
        && n > m
    {
        return Err(format!("pick at most {m}"));
    }
    Ok(())
}

/// Check what was typed for a text or number field: its JSON value, or
/// `None` for an optional field left empty. Numbers are sent as JSON
/// numbers, exactly as typed.
fn check_input(kind: &Kind, required: bool, input: &str) -> Result<Option<Box<RawValue>>, String> {
    let text = match kind {
        Kind::Number { .. } => input.trim(),
        _ => input,
    };
    if text.is_empty() {
        return if required {
            Err("this field is required".to_owned())
        } else {
            Ok(None)
        };
    }
    match kind {
        Kind::Text {
            format,
            min_length,
            max_length,
            ..
        } => {
            let n = text.chars().count();
            if let Some(m) = min_length
                && n < *m
            {
                return Err(format!("at least {m} characters"));
            }
            if let Some(m) = max_length
                && n > *m
            {
                return Err(format!("at most {m} characters"));
            }
            check_format(format.as_deref(), text)?;
            to_raw(text).map(Some).map_err(|e| e.to_string())
        }
        Kind::Number {
            integer,
            minimum,
            maximum,
            ..
        } => {
            let valid = if *integer {
                serde_json::from_str::<serde_json::Number>(text).is_ok()
                    && text
                        .trim_start_matches('-')
                        .bytes()
                        .all(|b| b.is_ascii_digit())
            } else {
                serde_json::from_str::<serde_json::Number>(text).is_ok()
            };
            if !valid {
                return Err(if *integer {
                    "a whole number, like 42".to_owned()
                } else {
                    "a number, like 3.14".to_owned()
                });
            }
            let value: f64 = text.parse().map_err(|_| "not a number".to_owned())?;
            if let Some(m) = minimum
                && value < *m
            {
                return Err(format!("at least {m}"));
            }
            if let Some(m) = maximum
                && value > *m
            {
                return Err(format!("at most {m}"));
            }
            RawValue::from_string(text.to_owned())
                .map(Some)
                .map_err(|e| e.to_string())
        }
        _ => Err("not a text field".to_owned()),
    }
}

fn check_format(format: Option<&str>, text: &str) -> Result<(), String> {
    match format {
        Some("email") => {
            let ok = text.split_once('@').is_some_and(|(user, domain)| {
                !user.is_empty()
                    && domain.contains('.')
                    && !domain.starts_with('.')
                    && !domain.ends_with('.')
            }) && !text.contains(char::is_whitespace);
            if ok {
                Ok(())
            } else {
                Err("an email address, like ada@example.com".to_owned())
            }
        }
        Some("uri") => match url::Url::parse(text) {
            Ok(_) => Ok(()),
            Err(_) => Err("an absolute URI, like https://example.com".to_owned()),
        },
        Some("date") => {
            if is_date(text) {
                Ok(())
            } else {
                Err("a date, like 2024-02-29".to_owned())
            }
        }
        Some("date-time") => {
            let ok = text.split_once(['T', 't']).is_some_and(|(date, time)| {
                is_date(date) && time.len() >= 5 && time.as_bytes()[2] == b':'
            });
            if ok {
                Ok(())
            } else {
                Err("a date and time, like 2024-02-29T12:00:00Z".to_owned())
            }
        }
        _ => Ok(()),
    }
}

/// `YYYY-MM-DD`, a real day of a real month.
fn is_date(text: &str) -> bool {
    let parts: Vec<&str> = text.split('-').collect();
    let [y, m, d] = parts.as_slice() else {
        return false;
    };
    if y.len() != 4 || m.len() != 2 || d.len() != 2 {
        return false;
    }
    let (Ok(y), Ok(m), Ok(d)) = (y.parse::<u32>(), m.parse::<u32>(), d.parse::<u32>()) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match m {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    (1..=days).contains(&d)
}

#[derive(Debug)]
struct FormRequest {
    server: String,
    message: String,
    fields: Vec<Field>,
}

impl FormRequest {
    fn new(server: String, p: ElicitParams) -> Result<FormRequest, ErrorObject> {
        let schema = p
            .requested_schema
            .ok_or_else(|| invalid_params("elicitation/create without requestedSchema"))?;
        let mut fields = Vec::with_capacity(schema.properties.len());
        for (name, prop) in schema.properties {
            let required = schema.required.contains(&name);
            fields.push(Field::new(&name, prop, required)?);
        }
        Ok(FormRequest {
            server,
            message: p.message,
            fields,
        })
    }

    fn ask(self) -> Result<Box<RawValue>, ErrorObject> {
        heading(&format!(
            "server '{}' asks for input",
            printable(&self.server)
        ));
        eprintln!("{}", printable(&self.message));
        let answer = match self.fill() {
            Ok(answer) => answer,
            Err(Stop::Dismissed) => Answer::Cancel,
        };
        eprintln!(
            "mcphost: answered '{}' with {}",
            printable(&self.server),
            answer.action()
        );
        answer.into_raw()
    }

    fn fill(&self) -> Result<Answer, Stop> {
        const FILL: &str = "Fill in the form";
        const DECLINE: &str = "Decline";
        const CANCEL: &str = "Cancel";
        let choice = Select::new("Your answer:", vec![FILL, DECLINE, CANCEL])
            .with_help_message(
                "Decline says no to the server; Cancel (or Esc) dismisses the request",
            )
            .prompt()
            .map_err(stopped)?;
        match choice {
            DECLINE => return Ok(Answer::Decline),
            CANCEL => return Ok(Answer::Cancel),
            _ => {}
        }
        let mut content = Vec::with_capacity(self.fields.len());
        for field in &self.fields {
            if let Some(value) = field.ask()? {
                content.push((field.name.clone(), value));
            }
        }
        let content = set_fields(None, content).map_err(|_| Stop::Dismissed)?;
        Ok(Answer::Accept(Some(content)))
    }
}

enum Answer {
    /// URL mode accepts without content.
    Accept(Option<Box<RawValue>>),
    Decline,
    Cancel,
}

impl Answer {
    fn action(&self) -> &'static str {
        match self {
            Answer::Accept(_) => "accept",
            Answer::Decline => "decline",
            Answer::Cancel => "cancel",
        }
    }

    fn into_raw(self) -> Result<Box<RawValue>, ErrorObject> {
        let action = to_raw(self.action()).map_err(|e| internal(e.to_string()))?;
        let mut fields = vec![("action".to_owned(), action)];
        if let Answer::Accept(Some(content)) = self {
            fields.push(("content".to_owned(), content));
        }
        set_fields(None, fields).map_err(|e| internal(e.to_string()))
    }
}

// --------------------------------------------------------------------- URLs

#[derive(Debug)]
struct UrlRequest {
    server: String,
    message: String,
    url: url::Url,
}

impl UrlRequest {
    fn new(server: String, p: ElicitParams) -> Result<UrlRequest, ErrorObject> {
        let text = p
            .url
            .ok_or_else(|| invalid_params("URL-mode elicitation/create without url"))?;
        if p.elicitation_id.is_none() {
            return Err(invalid_params(
                "URL-mode elicitation/create without elicitationId",
            ));
        }
        let url = url::Url::parse(&text).map_err(|e| {
            invalid_params(format!("URL-mode elicitation/create: url {text:?}: {e}"))
        })?;
        Ok(UrlRequest {
            server,
            message: p.message,
            url,
        })
    }

    /// The host as ASCII: an internationalised name shows as its punycode,
    /// so a look-alike domain cannot pass for another.
    fn domain(&self) -> &str {
        self.url.host_str().unwrap_or("(none)")
    }

    fn ask(self) -> Result<Box<RawValue>, ErrorObject> {
        heading(&format!(
            "server '{}' asks you to open a link",
            printable(&self.server)
        ));
        eprintln!("{}", printable(&self.message));
        eprintln!("  URL:    {}", self.url);
        eprintln!("  domain: {}", self.domain());
        let answer = if !matches!(self.url.scheme(), "http" | "https") {
            eprintln!("mcphost: only http and https links are opened; declining");
            Answer::Decline
        } else {
            let question = format!("Open this link to {} in your browser?", self.domain());
            match Confirm::new(&question)
                .with_default(false)
                .with_help_message("y opens it, n declines, Esc cancels")
                .prompt()
                .map_err(stopped)
            {
                Ok(true) => {
                    open_url(self.url.as_str());
                    Answer::Accept(None)
                }
                Ok(false) => Answer::Decline,
                Err(Stop::Dismissed) => Answer::Cancel,
            }
        };
        eprintln!(
            "mcphost: answered '{}' with {}",
            printable(&self.server),
            answer.action()
        );
        answer.into_raw()
    }
}

/// Open a URL the person agreed to: [`OPEN_URL_COMMAND_ENV`] if set, else
/// the system's browser. A failure is shown, not fatal: the URL is printed.
fn open_url(url: &str) {
    let opened = match std::env::var(OPEN_URL_COMMAND_ENV) {
        Ok(cmd) if !cmd.trim().is_empty() => run_opener(&cmd, url),
        _ => open::that_detached(url).map_err(|e| e.to_string()),
    };
    match opened {
        Ok(()) => eprintln!("mcphost: opened {url}"),
        Err(e) => eprintln!("mcphost: could not open a browser ({e}); open the URL yourself"),
    }
}

fn run_opener(cmd: &str, url: &str) -> Result<(), String> {
    let words = shell_words::split(cmd).map_err(|e| format!("{OPEN_URL_COMMAND_ENV}: {e}"))?;
    let (program, args) = words
        .split_first()
        .ok_or_else(|| format!("{OPEN_URL_COMMAND_ENV} is empty"))?;
    let status = std::process::Command::new(program)
        .args(args)
        .arg(url)
        .stdin(std::process::Stdio::null())
        .status()
        .map_err(|e| format!("{program}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{program} {status}"))
    }
}

// ----------------------------------------------------------------- sampling

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SamplingParams {
    #[serde(default)]
    messages: Vec<SamplingMessage>,
    #[serde(default)]
    system_prompt: Option<String>,
    #[serde(default)]
    max_tokens: Option<Value>,
    #[serde(default)]
    model_preferences: Option<ModelPreferences>,
}

#[derive(Deserialize)]
struct SamplingMessage {
    #[serde(default)]
    role: String,
    #[serde(default)]
    content: Option<Value>,
}

#[derive(Deserialize)]
struct ModelPreferences {
    #[serde(default)]
    hints: Vec<ModelHint>,
}

#[derive(Deserialize)]
struct ModelHint {
    #[serde(default)]
    name: Option<String>,
}

#[derive(Debug)]
struct SamplingRequest {
    server: String,
    system_prompt: Option<String>,
    max_tokens: Option<String>,
    model_hints: Vec<String>,
    /// (role, each content block as shown)
    messages: Vec<(String, Vec<String>)>,
}

/// One content block as shown: text as itself, anything else summarised.
fn describe_content(block: &Value) -> String {
    let field = |k: &str| block.get(k).and_then(Value::as_str).unwrap_or("");
    let size = |k: &str| block.get(k).and_then(Value::as_str).map_or(0, str::len);
    match field("type") {
        "text" => printable(field("text")),
        "image" => format!(
            "[image, {}, {} bytes of base64]",
            field("mimeType"),
            size("data")
        ),
        "audio" => format!(
            "[audio, {}, {} bytes of base64]",
            field("mimeType"),
            size("data")
        ),
        "resource" => format!(
            "[embedded resource {}]",
            block
                .pointer("/resource/uri")
                .and_then(Value::as_str)
                .unwrap_or("")
        ),
        "resource_link" => format!("[resource link {}]", field("uri")),
        "tool_use" => format!("[tool call {}]", field("name")),
        "tool_result" => "[tool result]".to_owned(),
        "" => "[content without a type]".to_owned(),
        other => format!("[{other} content]"),
    }
}

impl SamplingRequest {
    fn new(server: String, p: SamplingParams) -> SamplingRequest {
        let messages = p
            .messages
            .into_iter()
            .map(|m| {
                let blocks = match m.content {
                    Some(Value::Array(items)) => items.iter().map(describe_content).collect(),
                    Some(block) => vec![describe_content(&block)],
                    None => Vec::new(),
                };
                (m.role, blocks)
            })
            .collect();
        SamplingRequest {
            server,
            system_prompt: p.system_prompt,
            max_tokens: p.max_tokens.map(|v| v.to_string()),
            model_hints: p
                .model_preferences
                .map(|m| m.hints.into_iter().filter_map(|h| h.name).collect())
                .unwrap_or_default(),
            messages,
        }
    }

    fn show(&self) {
        heading(&format!(
            "server '{}' asks for a model reply (sampling)",
            printable(&self.server)
        ));
        if let Some(s) = &self.system_prompt {
            eprintln!("system prompt: {}", printable(s));
        }
        if let Some(n) = &self.max_tokens {
            eprintln!("max tokens: {n}");
        }
        if !self.model_hints.is_empty() {
            eprintln!("model hints: {}", self.model_hints.join(", "));
        }
        for (role, blocks) in &self.messages {
            for b in blocks {
                eprintln!("[{}] {b}", printable(role));
            }
        }
    }

    fn ask(self) -> Result<Box<RawValue>, ErrorObject> {
        self.show();
        match self.reply() {
            Ok(Some(text)) => {
                eprintln!("mcphost: sent your reply to '{}'", printable(&self.server));
                let result = serde_json::json!({
                    "role": "assistant",
                    "content": {"type": "text", "text": text},
                    "model": "human",
                    "stopReason": "endTurn",
                });
                to_raw(&result).map_err(|e| internal(e.to_string()))
            }
            Ok(None) | Err(Stop::Dismissed) => {
                eprintln!("mcphost: declined '{}'", printable(&self.server));
                Err(user_rejected())
            }
        }
    }

    fn reply(&self) -> Result<Option<String>, Stop> {
        const TYPE: &str = "Type a reply";
        const EDITOR: &str = "Write the reply in an editor ($VISUAL / $EDITOR)";
        const DECLINE: &str = "Decline";
        let choice = Select::new("Your answer:", vec![TYPE, EDITOR, DECLINE])
            .with_help_message("you answer as the model; Decline (or Esc) refuses")
            .prompt()
            .map_err(stopped)?;
        match choice {
            TYPE => {
                let mut lines: Vec<String> = Vec::new();
                loop {
                    let label = if lines.is_empty() { "Reply:" } else { "…" };
                    let first = lines.is_empty();
                    let line = Text::new(label)
                        .with_help_message("an empty line ends the reply; Esc declines")
                        .with_validator(move |s: &str| {
                            Ok(if first && s.trim().is_empty() {
                                Validation::Invalid("type at least one line (Esc declines)".into())
                            } else {
                                Validation::Valid
                            })
                        })
                        .prompt()
                        .map_err(stopped)?;
                    if line.is_empty() {
                        break;
                    }
                    lines.push(line);
                }
                Ok(Some(lines.join("\n")))
            }
            EDITOR => {
                let text = Editor::new("Reply:")
                    .with_help_message("save and close the editor to send; Esc declines")
                    .prompt()
                    .map_err(stopped)?;
                let text = text.trim_end().to_owned();
                Ok((!text.is_empty()).then_some(text))
            }
            _ => Ok(None),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(s: &str) -> Box<RawValue> {
        RawValue::from_string(s.to_owned()).unwrap()
    }

    fn form(params: &str) -> FormRequest {
        match Request::parse("srv", methods::ELICITATION_CREATE, Some(&raw(params))).unwrap() {
            Request::Form(f) => f,
            other => panic!("not a form: {other:?}"),
        }
    }

    #[test]
    fn capabilities_are_forms_urls_and_sampling_not_roots() {
        let caps = serde_json::to_string(&TerminalHost::new().capabilities()).unwrap();
        assert_eq!(
            caps,
            r#"{"sampling":{},"elicitation":{"form":{},"url":{}}}"#
        );
    }

    #[test]
    fn the_daemon_names_the_asking_server_in_meta() {
        let p = raw(
            r#"{"message":"m","requestedSchema":{"properties":{}},"_meta":{"dev.mcphost/server":"github"}}"#,
        );
        assert_eq!(asking_server("daemon", Some(&p)), "github");
        assert_eq!(
            asking_server("direct", Some(&raw(r#"{"message":"m"}"#))),
            "direct"
        );
        assert_eq!(asking_server("direct", None), "direct");
    }

    #[test]
    fn a_schema_becomes_typed_fields() {
        let f = form(
            r#"{"message":"Who?","requestedSchema":{"type":"object","properties":{
                "name":{"type":"string","title":"Name","minLength":2},
                "email":{"type":"string","format":"email"},
                "age":{"type":"integer","minimum":0,"maximum":150,"default":36},
                "score":{"type":"number","default":9.50},
                "ok":{"type":"boolean","default":true},
                "tier":{"type":"string","enum":["free","pro"],"enumNames":["Free","Pro"],"default":"pro"},
                "hero":{"type":"string","oneOf":[{"const":"h1","title":"Superman"},{"const":"h2"}]},
                "tags":{"type":"array","items":{"anyOf":[{"const":"a","title":"A"},{"const":"b","title":"B"}]},"minItems":1,"maxItems":2,"default":["b"]}
            },"required":["name","tags"]}}"#,
        );
        assert_eq!(f.message, "Who?");
        let names: Vec<&str> = f.fields.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "name", "email", "age", "score", "ok", "tier", "hero", "tags"
            ]
        );
        assert!(f.fields[0].required && !f.fields[1].required && f.fields[7].required);
        assert_eq!(f.fields[0].label, "Name");
        assert_eq!(
            f.fields[2].kind,
            Kind::Number {
                integer: true,
                default: Some("36".into()),
                minimum: Some(0.0),
                maximum: Some(150.0)
            }
        );
        assert_eq!(
            f.fields[4].kind,
            Kind::Bool {
                default: Some(true)
            }
        );
        let Kind::One { choices, default } = &f.fields[5].kind else {
            panic!()
        };
        assert_eq!(
            choices[1],
            Choice {
                value: "pro".into(),
                label: "Pro".into()
            }
        );
        assert_eq!(*default, Some(1));
        let Kind::One { choices, default } = &f.fields[6].kind else {
            panic!()
        };
        assert_eq!(choices[0].label, "Superman");
        assert_eq!(choices[1].label, "h2");
        assert_eq!(*default, None);
        let Kind::Many {
            default, min, max, ..
        } = &f.fields[7].kind
        else {
            panic!()
        };
        assert_eq!(
            (default.as_slice(), *min, *max),
            (&[1][..], Some(1), Some(2))
        );
        assert!(f.fields[1].help().contains("email address"));
        assert!(f.fields[2].help().contains("integer, 0 to 150"));
    }

    #[test]
    fn unsupported_schemas_are_invalid_params() {
        for schema in [
            r#"{"properties":{"o":{"type":"object"}}}"#,
            r#"{"properties":{"a":{"type":"array","items":{"type":"string"}}}}"#,
            r#"{"properties":{"x":{}}}"#,
        ] {
            let p = raw(&format!(r#"{{"message":"m","requestedSchema":{schema}}}"#));
            let e = Request::parse("s", methods::ELICITATION_CREATE, Some(&p)).unwrap_err();
            assert_eq!(e.code, error_codes::INVALID_PARAMS, "{schema}: {e}");
        }
        let e = Request::parse(
            "s",
            methods::ELICITATION_CREATE,
            Some(&raw(r#"{"message":"m"}"#)),
        )
        .unwrap_err();
        assert_eq!(e.code, error_codes::INVALID_PARAMS);
        let e = Request::parse(
            "s",
            methods::ELICITATION_CREATE,
            Some(&raw(r#"{"mode":"telepathy"}"#)),
        )
        .unwrap_err();
        assert_eq!(e.code, error_codes::INVALID_PARAMS);
        let e = Request::parse("s", methods::ROOTS_LIST, None).unwrap_err();
        assert_eq!(e.code, error_codes::METHOD_NOT_FOUND);
    }

    fn number(integer: bool, minimum: Option<f64>, maximum: Option<f64>) -> Kind {
        Kind::Number {
            integer,
            default: None,
            minimum,
            maximum,
        }
    }

    fn checked(kind: &Kind, required: bool, input: &str) -> Result<Option<String>, String> {
        check_input(kind, required, input).map(|v| v.map(|r| r.get().to_owned()))
    }

    #[test]
    fn numbers_are_sent_as_json_numbers_as_typed() {
        let int = number(true, Some(0.0), Some(150.0));
        assert_eq!(checked(&int, true, " 36 "), Ok(Some("36".into())));
        assert_eq!(checked(&int, true, "-7"), Err("at least 0".into()));
        assert!(checked(&int, true, "36.5").is_err());
        assert!(checked(&int, true, "1e2").is_err());
        assert!(checked(&int, true, "151").is_err());
        assert!(checked(&int, true, "abc").is_err());
        let num = number(false, None, Some(1000.0));
        assert_eq!(checked(&num, true, "9.50"), Ok(Some("9.50".into())));
        assert_eq!(checked(&num, true, "1e3"), Ok(Some("1e3".into())));
        assert!(checked(&num, true, "1e4").is_err());
        assert!(checked(&num, true, "+5").is_err());
        assert!(checked(&num, true, ".5").is_err());
        assert!(checked(&num, true, "NaN").is_err());
        // Empty: required refuses, optional leaves the field out.
        assert!(checked(&num, true, "").is_err());
        assert_eq!(checked(&num, false, " "), Ok(None));
    }

    #[test]
    fn text_formats_and_lengths_are_checked() {
        let text = |format: Option<&str>, min: Option<usize>, max: Option<usize>| Kind::Text {
            default: None,
            format: format.map(str::to_owned),
            min_length: min,
            max_length: max,
        };
        assert_eq!(
            checked(&text(None, None, None), true, "Ada \"L\""),
            Ok(Some(r#""Ada \"L\"""#.into()))
        );
        assert!(checked(&text(None, Some(2), None), true, "A").is_err());
        assert!(checked(&text(None, None, Some(3)), true, "Adaa").is_err());
        assert!(checked(&text(None, None, Some(3)), true, "Ädä").is_ok());
        let email = text(Some("email"), None, None);
        assert!(checked(&email, true, "ada@example.com").is_ok());
        for bad in [
            "ada",
            "@example.com",
            "ada@example",
            "ada@.com",
            "a da@example.com",
        ] {
            assert!(checked(&email, true, bad).is_err(), "{bad}");
        }
        let uri = text(Some("uri"), None, None);
        assert!(checked(&uri, true, "https://example.com/x").is_ok());
        assert!(checked(&uri, true, "example.com").is_err());
        let date = text(Some("date"), None, None);
        assert!(checked(&date, true, "2024-02-29").is_ok());
        for bad in [
            "2023-02-29",
            "2024-13-01",
            "2024-1-01",
            "29.02.2024",
            "2024-04-31",
        ] {
            assert!(checked(&date, true, bad).is_err(), "{bad}");
        }
        let dt = text(Some("date-time"), None, None);
        assert!(checked(&dt, true, "2024-02-29T12:00:00Z").is_ok());
        assert!(checked(&dt, true, "2024-02-29").is_err());
        assert_eq!(checked(&text(None, None, None), false, ""), Ok(None));
    }

    #[test]
    fn multi_select_counts() {
        assert!(check_count(0, Some(1), None, false).is_ok());
        assert!(check_count(0, Some(1), None, true).is_err());
        assert!(check_count(2, Some(1), Some(2), true).is_ok());
        assert!(check_count(3, Some(1), Some(2), true).is_err());
    }

    #[test]
    fn answers_are_elicit_results() {
        let content = raw(r#"{"name":"Ada","age":36}"#);
        assert_eq!(
            Answer::Accept(Some(content)).into_raw().unwrap().get(),
            r#"{"action":"accept","content":{"name":"Ada","age":36}}"#
        );
        assert_eq!(
            Answer::Accept(None).into_raw().unwrap().get(),
            r#"{"action":"accept"}"#
        );
        assert_eq!(
            Answer::Decline.into_raw().unwrap().get(),
            r#"{"action":"decline"}"#
        );
        assert_eq!(
            Answer::Cancel.into_raw().unwrap().get(),
            r#"{"action":"cancel"}"#
        );
    }

    #[test]
    fn url_requests_show_the_ascii_domain() {
        let p = raw(
            r#"{"mode":"url","message":"Sign in","url":"https://bücher.example/login?x=1","elicitationId":"e1"}"#,
        );
        let Request::Url(u) = Request::parse("s", methods::ELICITATION_CREATE, Some(&p)).unwrap()
        else {
            panic!()
        };
        assert_eq!(u.domain(), "xn--bcher-kva.example");
        assert_eq!(u.url.as_str(), "https://xn--bcher-kva.example/login?x=1");
        for bad in [
            r#"{"mode":"url","message":"m","elicitationId":"e1"}"#,
            r#"{"mode":"url","message":"m","url":"https://example.com"}"#,
            r#"{"mode":"url","message":"m","url":"not a url","elicitationId":"e1"}"#,
        ] {
            let e = Request::parse("s", methods::ELICITATION_CREATE, Some(&raw(bad))).unwrap_err();
            assert_eq!(e.code, error_codes::INVALID_PARAMS, "{bad}");
        }
    }

    #[test]
    fn sampling_requests_summarise_what_is_not_text() {
        let p = raw(r#"{"messages":[
                {"role":"user","content":{"type":"text","text":"Hi\u001b[31m"}},
                {"role":"user","content":[{"type":"image","mimeType":"image/png","data":"AAAA"},{"type":"audio","mimeType":"audio/wav","data":"AA"}]},
                {"role":"assistant","content":{"type":"resource","resource":{"uri":"file:///x"}}}
            ],"systemPrompt":"Be brief.","maxTokens":100,"modelPreferences":{"hints":[{"name":"claude"}]}}"#);
        let Request::Sampling(s) =
            Request::parse("s", methods::SAMPLING_CREATE_MESSAGE, Some(&p)).unwrap()
        else {
            panic!()
        };
        assert_eq!(s.system_prompt.as_deref(), Some("Be brief."));
        assert_eq!(s.max_tokens.as_deref(), Some("100"));
        assert_eq!(s.model_hints, ["claude"]);
        assert_eq!(
            s.messages[0],
            ("user".to_owned(), vec!["Hi\u{fffd}[31m".to_owned()])
        );
        assert_eq!(
            s.messages[1].1,
            [
                "[image, image/png, 4 bytes of base64]",
                "[audio, audio/wav, 2 bytes of base64]"
            ]
        );
        assert_eq!(s.messages[2].1, ["[embedded resource file:///x]"]);
    }
}
