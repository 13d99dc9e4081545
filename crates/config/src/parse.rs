//! From JSONC text to a validated [`HostConfig`].
//!
//! Works on jsonc-parser's AST so every problem can be reported with its
//! line, and keeps going after a problem so all of them are reported at once.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::Duration;

use jsonc_parser::ast::{Object, ObjectProp, ObjectPropName, Value};
use jsonc_parser::common::Ranged;
use jsonc_parser::{CollectOptions, ParseOptions, parse_to_ast};

use super::NamingRules;
use super::dotenv::parse_dotenv;
use super::duration::{no_unit_hint, parse_duration};
use super::interpolate::interpolate;
use super::tools::glob;
use super::{
    BrokenServer, ConfigError, HostConfig, HttpMode, HttpServer, Hygiene, Issue, Issues,
    Namespacing, OAuthSetting, Offer, Pinning, Root, ServerConfig, ServerEnvLookup, Share,
    StartMode, StdioServer, Timeouts, ToolFilter, TransportConfig,
};

/// JSON plus comments and trailing commas, nothing looser: a config that
/// other tools (Claude Desktop, VS Code) also read must stay close to JSON.
pub(crate) fn json_options() -> ParseOptions {
    ParseOptions {
        allow_comments: true,
        allow_trailing_commas: true,
        allow_loose_object_property_names: false,
        allow_missing_commas: false,
        allow_single_quoted_strings: false,
        allow_hexadecimal_numbers: false,
        allow_unary_plus_numbers: false,
        allow_bare_decimal_point_numbers: false,
        allow_non_finite_numbers: false,
        allow_extended_string_escapes: false,
    }
}

const TOP_KEYS: &[&str] = &[
    "$schema",
    "mcpServers",
    "servers",
    "defaults",
    "namespacing",
    "loginShellPath",
    "roots",
    "hostTimeouts",
    "tokens",
    "profiles",
    "daemon",
    "hygiene",
    "pinning",
    "audit",
];
const TOKENS_KEYS: &[&str] = &["encoding"];
const DAEMON_KEYS: &[&str] = &["autostart"];
const HOST_TIMEOUT_KEYS: &[&str] = &["elicitation", "sampling", "roots"];
const ROOT_KEYS: &[&str] = &["uri", "name"];
const DEFAULTS_KEYS: &[&str] = &[
    "timeouts",
    "inheritEnv",
    "loginShellPath",
    "start",
    "sandbox",
];
const TIMEOUT_KEYS: &[&str] = &["request", "init", "maxRequest", "shutdown"];
const NAMESPACING_KEYS: &[&str] = &["separator", "maxLength", "reserve"];
const TOOLS_KEYS: &[&str] = &["allow", "deny"];
const SERVER_KEYS: &[&str] = &[
    "type",
    "command",
    "args",
    "env",
    "envFile",
    "cwd",
    "inheritEnv",
    "url",
    "headers",
    "oauth",
    "disabled",
    "tools",
    "timeouts",
    "alias",
    "roots",
    "share",
    "offer",
    "protocolVersion",
    "start",
    "idleTimeout",
    "sandbox",
    "hygiene",
    "pinning",
];
const OFFER_KEYS: &[&str] = &["sampling", "elicitation", "roots"];
const STDIO_ONLY: &[&str] = &["command", "args", "env", "envFile", "cwd", "inheritEnv"];
const HTTP_ONLY: &[&str] = &["url", "headers", "oauth"];
const OAUTH_KEYS: &[&str] = &[
    "clientId",
    "issuer",
    "clientSecret",
    "tokenEndpointAuthMethod",
    "grantType",
    "privateKeyPem",
    "privateKeyFile",
    "signingAlgorithm",
    "scope",
    "clientMetadataUrl",
    "workloadIdentity",
];
const WORKLOAD_KEYS: &[&str] = &["tokenFile", "tokenCommand"];

pub(crate) fn parse(
    text: &str,
    path: &Path,
    env: ServerEnvLookup<'_>,
    lenient: bool,
) -> Result<HostConfig, ConfigError> {
    let ast = parse_to_ast(text, &CollectOptions::default(), &json_options())
        .map_err(|err| ConfigError::syntax(Some(path), &err))?;
    let mut ctx = Ctx::new(text, path, env);
    let mut config = HostConfig {
        path: Some(path.to_path_buf()),
        ..HostConfig::default()
    };
    match &ast.value {
        // An empty (or comments-only) file is an empty config.
        None => {}
        Some(Value::Object(root)) => {
            ctx.root(root, &mut config);
            super::sandbox::attach_roots(&mut config);
        }
        Some(other) => ctx.error(
            other.start(),
            "",
            format!("the config must be a JSON object, found {}", kind(other)),
        ),
    }
    if lenient && ctx.errors.is_empty() {
        config.broken = std::mem::take(&mut ctx.broken);
    } else {
        // One list of everything, so a user fixes it all at once.
        ctx.errors
            .extend(ctx.broken.drain(..).flat_map(|b| b.issues));
    }
    // Cross-checks run last; report in document order.
    ctx.errors.sort_by_key(|issue| issue.line);
    config.warnings = ctx.warnings;
    if ctx.errors.is_empty() {
        tracing::debug!(
            path = %path.display(),
            servers = config.servers.len(),
            "config loaded"
        );
        Ok(config)
    } else {
        Err(ConfigError::Invalid(Issues(ctx.errors)))
    }
}

#[derive(Debug, Default)]
struct PartialTimeouts {
    request: Option<Duration>,
    init: Option<Duration>,
    max_request: Option<Duration>,
    shutdown: Option<Duration>,
}

impl PartialTimeouts {
    fn over(&self, base: &Timeouts) -> Timeouts {
        Timeouts {
            request: self.request.unwrap_or(base.request),
            init: self.init.unwrap_or(base.init),
            max_request: self.max_request.unwrap_or(base.max_request),
            shutdown: self.shutdown.unwrap_or(base.shutdown),
        }
    }
}

#[derive(Debug, Default)]
struct Defaults {
    timeouts: Timeouts,
    inherit_env: bool,
    login_shell_path: Option<(bool, usize)>,
    start: StartMode,
    /// The top-level `hygiene`.
    hygiene: Hygiene,
    /// The top-level `pinning`, which an entry's own overrides.
    pinning: Pinning,
    /// `defaults.sandbox`: for stdio servers without their own `sandbox`.
    sandbox: Option<super::sandbox::Sandbox>,
}

enum Kind {
    Stdio,
    Http(HttpMode),
}

struct Ctx<'a> {
    path: &'a Path,
    base_dir: PathBuf,
    line_starts: Vec<usize>,
    /// Asked with the server whose entry is read ("" outside any).
    env: ServerEnvLookup<'a>,
    errors: Vec<Issue>,
    warnings: Vec<Issue>,
    /// Server entries whose errors were taken out of `errors`.
    broken: Vec<BrokenServer>,
}

impl<'a> Ctx<'a> {
    fn new(text: &str, path: &'a Path, env: ServerEnvLookup<'a>) -> Self {
        let line_starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        let base_dir = match path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        };
        Ctx {
            path,
            base_dir,
            line_starts,
            env,
            errors: Vec::new(),
            warnings: Vec::new(),
            broken: Vec::new(),
        }
    }

    fn line(&self, offset: usize) -> usize {
        self.line_starts.partition_point(|&start| start <= offset)
    }

    fn issue(&self, at: usize, field: &str, message: String) -> Issue {
        Issue {
            path: self.path.to_path_buf(),
            line: self.line(at),
            field: field.to_owned(),
            message,
        }
    }

    fn error(&mut self, at: usize, field: &str, message: impl Into<String>) {
        let issue = self.issue(at, field, message.into());
        self.errors.push(issue);
    }

    fn warn(&mut self, at: usize, field: &str, message: impl Into<String>) {
        let issue = self.issue(at, field, message.into());
        self.warnings.push(issue);
    }

    // ---- document structure ----

    fn root(&mut self, root: &Object<'_>, config: &mut HostConfig) {
        self.keys(root, "", TOP_KEYS);
        let mut defaults = match root.get("defaults") {
            Some(prop) => self.defaults(&prop.value),
            None => Defaults::default(),
        };
        if let Some(prop) = root.get("hygiene") {
            defaults.hygiene = self.hygiene(&prop.value, "hygiene", Hygiene::default());
        }
        if let Some(prop) = root.get("pinning") {
            defaults.pinning = self.pinning(&prop.value, "pinning");
        }
        let top_login = root
            .get("loginShellPath")
            .and_then(|prop| self.boolean(&prop.value, "loginShellPath"));
        config.login_shell_path = match (top_login, defaults.login_shell_path) {
            (Some(top), Some((nested, at))) if top != nested => {
                self.error(
                    at,
                    "defaults.loginShellPath",
                    "contradicts the top-level loginShellPath; set it in one place",
                );
                top
            }
            (Some(top), _) => top,
            (None, Some((nested, _))) => nested,
            (None, None) => true,
        };
        if let Some(prop) = root.get("namespacing") {
            config.namespacing = self.namespacing(&prop.value);
        }
        if let Some(prop) = root.get("daemon")
            && let Some(obj) = self.object(&prop.value, "daemon")
        {
            self.keys(obj, "daemon", DAEMON_KEYS);
            if let Some(p) = obj.get("autostart")
                && let Some(on) = self.boolean(&p.value, "daemon.autostart")
            {
                config.daemon.autostart = on;
            }
        }
        if let Some(prop) = root.get("roots") {
            config.roots = self.roots(&prop.value, "roots");
        }
        if let Some(prop) = root.get("tokens") {
            self.tokens(&prop.value, &mut config.model_view);
        }
        if let Some(prop) = root.get("profiles") {
            self.profiles(&prop.value, &mut config.model_view);
        }
        if let Some(prop) = root.get("hostTimeouts")
            && let Some(obj) = self.object(&prop.value, "hostTimeouts")
        {
            self.keys(obj, "hostTimeouts", HOST_TIMEOUT_KEYS);
            let t = &mut config.host_timeouts;
            for (key, slot) in [
                ("elicitation", &mut t.elicitation),
                ("sampling", &mut t.sampling),
                ("roots", &mut t.roots),
            ] {
                if let Some(p) = obj.get(key)
                    && let Some(d) = self.duration(&p.value, &child("hostTimeouts", key))
                {
                    *slot = d;
                }
            }
        }
        if let Some(prop) = root.get("audit") {
            match super::audit::Settings::from_json(&to_json(&prop.value), "audit") {
                Ok(audit) => config.audit = audit,
                Err(e) => {
                    let e = e.strip_prefix("audit: ").unwrap_or(&e).to_owned();
                    self.error(prop.value.start(), "audit", e);
                }
            }
        }
        config.servers = self.servers(root, &defaults);
    }

    /// `roots`: `file://` URIs or absolute paths, or `{uri, name}` objects.
    fn roots(&mut self, value: &Value<'_>, field: &str) -> Vec<Root> {
        let Some(items) = self.array(value, field) else {
            return Vec::new();
        };
        let mut roots = Vec::new();
        for (i, item) in items.iter().enumerate() {
            let field = format!("{field}[{i}]");
            let (uri, name) = match item {
                Value::Object(obj) => {
                    self.keys(obj, &field, ROOT_KEYS);
                    let Some(uri) = obj
                        .get("uri")
                        .and_then(|p| self.non_empty_string(&p.value, &child(&field, "uri")))
                    else {
                        if obj.get("uri").is_none() {
                            self.error(item.start(), &field, "needs a uri");
                        }
                        continue;
                    };
                    let name = obj
                        .get("name")
                        .and_then(|p| self.string(&p.value, &child(&field, "name")))
                        .map(str::to_owned);
                    (uri.to_owned(), name)
                }
                other => match self.string(other, &field) {
                    Some(s) => (s.to_owned(), None),
                    None => continue,
                },
            };
            let uri = match interpolate(&uri, &|name| (self.env)("", name)) {
                Ok(u) => u,
                Err(err) => {
                    self.error(item.start(), &field, err.message());
                    continue;
                }
            };
            match root_uri(&uri) {
                Ok(uri) => roots.push(Root { uri, name }),
                Err(reason) => self.error(item.start(), &field, format!("{uri:?} {reason}")),
            }
        }
        roots
    }

    fn defaults(&mut self, value: &Value<'_>) -> Defaults {
        let mut defaults = Defaults::default();
        let Some(obj) = self.object(value, "defaults") else {
            return defaults;
        };
        self.keys(obj, "defaults", DEFAULTS_KEYS);
        if let Some(prop) = obj.get("timeouts") {
            let partial = self.timeouts(&prop.value, "defaults.timeouts");
            defaults.timeouts = partial.over(&Timeouts::default());
            self.check_timeouts(&defaults.timeouts, prop.value.start(), "defaults.timeouts");
        }
        if let Some(prop) = obj.get("inheritEnv") {
            defaults.inherit_env = self
                .boolean(&prop.value, "defaults.inheritEnv")
                .unwrap_or(false);
        }
        if let Some(prop) = obj.get("loginShellPath") {
            defaults.login_shell_path = self
                .boolean(&prop.value, "defaults.loginShellPath")
                .map(|b| (b, prop.value.start()));
        }
        if let Some(prop) = obj.get("start") {
            defaults.start = self.start_mode(&prop.value, "defaults.start");
        }
        if let Some(prop) = obj.get("sandbox") {
            defaults.sandbox = self.sandbox(&prop.value, "defaults.sandbox", "", false);
        }
        defaults
    }

    fn timeouts(&mut self, value: &Value<'_>, field: &str) -> PartialTimeouts {
        let mut partial = PartialTimeouts::default();
        let Some(obj) = self.object(value, field) else {
            return partial;
        };
        self.keys(obj, field, TIMEOUT_KEYS);
        for prop in &obj.properties {
            let key = prop_name(prop);
            let slot = match key {
                "request" => &mut partial.request,
                "init" => &mut partial.init,
                "maxRequest" => &mut partial.max_request,
                "shutdown" => &mut partial.shutdown,
                _ => continue,
            };
            let field = child(field, key);
            let Some(duration) = self.duration(&prop.value, &field) else {
                continue;
            };
            // A zero shutdown grace is meaningful (straight to SIGKILL); a
            // zero request timeout would fail every request.
            if duration.is_zero() && key != "shutdown" {
                self.error(prop.value.start(), &field, "must be greater than zero");
                continue;
            }
            *slot = Some(duration);
        }
        partial
    }

    fn check_timeouts(&mut self, timeouts: &Timeouts, at: usize, field: &str) {
        if timeouts.request > timeouts.max_request {
            self.error(
                at,
                field,
                format!(
                    "request ({}) exceeds maxRequest ({})",
                    humantime::format_duration(timeouts.request),
                    humantime::format_duration(timeouts.max_request)
                ),
            );
        }
    }

    fn namespacing(&mut self, value: &Value<'_>) -> Namespacing {
        let mut ns = Namespacing::default();
        let Some(obj) = self.object(value, "namespacing") else {
            return ns;
        };
        self.keys(obj, "namespacing", NAMESPACING_KEYS);
        if let Some(prop) = obj.get("separator")
            && let Some(sep) = self.string(&prop.value, "namespacing.separator")
        {
            match NamingRules::check_separator(sep) {
                Ok(()) => ns.separator = sep.to_owned(),
                Err(e) => self.error(prop.value.start(), "namespacing.separator", e.to_string()),
            }
        }
        let mut sizes_ok = true;
        if let Some(prop) = obj.get("maxLength") {
            match self.uint(&prop.value, "namespacing.maxLength") {
                Some(n) => ns.max_length = n,
                None => sizes_ok = false,
            }
        }
        if let Some(prop) = obj.get("reserve") {
            match self.uint(&prop.value, "namespacing.reserve") {
                Some(n) => ns.reserve = n,
                None => sizes_ok = false,
            }
        }
        if sizes_ok && let Err(e) = NamingRules::check_budget(ns.max_length, ns.reserve) {
            self.error(value.start(), "namespacing", e.to_string());
        }
        ns
    }

    fn tokens(&mut self, value: &Value<'_>, view: &mut super::model_view::Settings) {
        let Some(obj) = self.object(value, "tokens") else {
            return;
        };
        self.keys(obj, "tokens", TOKENS_KEYS);
        if let Some(prop) = obj.get("encoding")
            && let Some(name) = self.string(&prop.value, "tokens.encoding")
        {
            match name.parse() {
                Ok(enc) => view.encoding = enc,
                Err(e) => self.error(prop.value.start(), "tokens.encoding", e),
            }
        }
    }

    /// `profiles`: name → session options (the `mcphost/session/configure`
    /// fields).
    fn profiles(&mut self, value: &Value<'_>, view: &mut super::model_view::Settings) {
        let Some(obj) = self.object(value, "profiles") else {
            return;
        };
        self.duplicates(obj, "profiles");
        for prop in &obj.properties {
            let name = prop.name.as_str().to_owned();
            let field = child("profiles", &name);
            if self.object(&prop.value, &field).is_none() {
                continue;
            }
            if prop
                .value
                .as_object()
                .is_some_and(|o| o.get("profile").is_some())
            {
                self.error(
                    prop.value.start(),
                    &field,
                    "a profile cannot name another profile",
                );
                continue;
            }
            let json = to_json(&prop.value);
            match super::model_view::Options::from_json(&json, &field) {
                Ok(options) => {
                    view.profiles.insert(name, options);
                }
                Err(e) => {
                    // The message already starts with the field.
                    let e = e
                        .strip_prefix(&format!("{field}: "))
                        .unwrap_or(&e)
                        .to_owned();
                    self.error(prop.value.start(), &field, e);
                }
            }
        }
    }

    fn servers(&mut self, root: &Object<'_>, defaults: &Defaults) -> Vec<ServerConfig> {
        let (prop, key) = match (root.get("mcpServers"), root.get("servers")) {
            (Some(_), Some(second)) => {
                self.error(
                    second.start(),
                    "servers",
                    "both \"mcpServers\" and \"servers\" are present; keep one of them",
                );
                return Vec::new();
            }
            (Some(prop), None) => (prop, "mcpServers"),
            (None, Some(prop)) => (prop, "servers"),
            (None, None) => return Vec::new(),
        };
        let Some(obj) = self.object(&prop.value, key) else {
            return Vec::new();
        };
        let mut servers = Vec::new();
        let mut seen = HashSet::new();
        // prefix → (server name); aliases must not collide with each other
        // or with other servers' names.
        let mut prefixes: HashMap<String, String> = HashMap::new();
        let mut alias_sites = Vec::new();
        for prop in &obj.properties {
            let name = prop_name(prop);
            let field = child(key, name);
            if name.trim().is_empty() {
                self.error(prop.start(), &field, "server names must be non-empty");
                continue;
            }
            if !seen.insert(name.to_owned()) {
                self.error(prop.start(), &field, "duplicate server name");
                continue;
            }
            let before = self.errors.len();
            let Some(server) = self.server(name, prop, &field, defaults) else {
                self.set_aside(name, prop, before);
                continue;
            };
            match &server.alias {
                Some(alias) => {
                    let at = prop
                        .value
                        .as_object()
                        .and_then(|o| o.get("alias"))
                        .map_or(prop.start(), |p| p.value.start());
                    alias_sites.push((
                        alias.clone(),
                        server.name.clone(),
                        at,
                        child(&field, "alias"),
                    ));
                }
                None => {
                    prefixes.insert(server.name.clone(), server.name.clone());
                }
            }
            servers.push(server);
        }
        for (alias, name, at, field) in alias_sites {
            match prefixes.get(&alias) {
                Some(other) if *other != name => {
                    let before = self.errors.len();
                    self.error(
                        at,
                        &field,
                        format!(
                            "namespace prefix \"{alias}\" is already used by server \"{other}\""
                        ),
                    );
                    if let Some(i) = servers.iter().position(|s: &ServerConfig| s.name == name) {
                        let server = servers.remove(i);
                        self.broken.push(BrokenServer {
                            name: server.name,
                            transport: match server.transport {
                                TransportConfig::Stdio(_) => "stdio",
                                TransportConfig::Http(_) => "http",
                            },
                            disabled: server.disabled,
                            issues: self.errors.split_off(before),
                        });
                    }
                }
                _ => {
                    prefixes.insert(alias, name);
                }
            }
        }
        servers
    }

    /// The errors from `before` on are server `name`'s: set them aside with it.
    fn set_aside(&mut self, name: &str, prop: &ObjectProp<'_>, before: usize) {
        if self.errors.len() <= before {
            return;
        }
        let obj = prop.value.as_object();
        let has = |key: &str| obj.is_some_and(|o| o.get(key).is_some());
        let disabled = obj
            .and_then(|o| o.get("disabled"))
            .is_some_and(|p| matches!(&p.value, Value::BooleanLit(b) if b.value));
        self.broken.push(BrokenServer {
            name: name.to_owned(),
            transport: if has("url") { "http" } else { "stdio" },
            disabled,
            issues: self.errors.split_off(before),
        });
    }

    fn server(
        &mut self,
        name: &str,
        prop: &ObjectProp<'_>,
        field: &str,
        defaults: &Defaults,
    ) -> Option<ServerConfig> {
        let obj = self.object(&prop.value, field)?;
        let errors_before = self.errors.len();
        self.keys(obj, field, SERVER_KEYS);

        let disabled = obj
            .get("disabled")
            .and_then(|p| self.boolean(&p.value, &child(field, "disabled")))
            .unwrap_or(false);

        let kind = self.transport_kind(obj, field, prop.start());
        let transport = match kind {
            Some(Kind::Stdio) => {
                self.not_for(obj, field, HTTP_ONLY, "HTTP servers");
                self.stdio(obj, field, name, disabled, defaults, prop.start())
                    .map(TransportConfig::Stdio)
            }
            Some(Kind::Http(kind)) => {
                self.not_for(obj, field, STDIO_ONLY, "stdio servers");
                self.no_sandbox_over_http(obj, field);
                self.http(obj, field, name, disabled, kind, prop.start())
                    .map(TransportConfig::Http)
            }
            None => None,
        };

        let alias = obj.get("alias").and_then(|p| self.alias(p, field));

        let tools = match obj.get("tools") {
            Some(p) => self.tools(&p.value, &child(field, "tools")),
            None => Some(ToolFilter::default()),
        };

        let timeouts = match obj.get("timeouts") {
            Some(p) => {
                let field = child(field, "timeouts");
                let timeouts = self.timeouts(&p.value, &field).over(&defaults.timeouts);
                self.check_timeouts(&timeouts, p.value.start(), &field);
                timeouts
            }
            None => defaults.timeouts,
        };

        let roots = match obj.get("roots") {
            Some(p) => self.roots(&p.value, &child(field, "roots")),
            None => Vec::new(),
        };

        let offer = match obj.get("offer") {
            Some(p) => self.offer(&p.value, &child(field, "offer")),
            None => Offer::default(),
        };

        let protocol_version = obj
            .get("protocolVersion")
            .and_then(|p| self.protocol_version(p, field));

        let share = match obj.get("share") {
            Some(p) => self.share(&p.value, &child(field, "share")),
            None => Share::Shared,
        };

        let start = match obj.get("start") {
            Some(p) => self.start_mode(&p.value, &child(field, "start")),
            None => defaults.start,
        };
        let idle_timeout = obj
            .get("idleTimeout")
            .and_then(|p| self.idle_timeout(p, field));
        let hygiene = obj.get("hygiene").map_or(defaults.hygiene, |p| {
            self.hygiene(&p.value, &child(field, "hygiene"), defaults.hygiene)
        });
        let pinning = match obj.get("pinning") {
            Some(p) => self.pinning(&p.value, &child(field, "pinning")),
            None => defaults.pinning,
        };

        if self.errors.len() > errors_before {
            return None;
        }
        Some(ServerConfig {
            name: name.to_owned(),
            alias,
            disabled,
            transport: transport?,
            tools: tools?,
            timeouts,
            roots,
            share,
            offer,
            protocol_version,
            start,
            idle_timeout,
            hygiene,
            pinning,
        })
    }

    /// `pinning`: `"warn"`, `"block"` or `"off"`.
    fn pinning(&mut self, value: &Value<'_>, field: &str) -> Pinning {
        match self.string(value, field) {
            Some("warn") => Pinning::Warn,
            Some("block") => Pinning::Block,
            Some("off") => Pinning::Off,
            Some(other) => {
                self.error(
                    value.start(),
                    field,
                    format!("{other:?} is not one of \"warn\", \"block\", \"off\""),
                );
                Pinning::Warn
            }
            None => Pinning::Warn,
        }
    }

    /// `alias`: `[A-Za-z0-9_-]+`.
    fn alias(&mut self, p: &ObjectProp<'_>, field: &str) -> Option<String> {
        let field = child(field, "alias");
        let alias = self.string(&p.value, &field)?;
        let valid = !alias.is_empty()
            && alias
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid {
            self.error(p.value.start(), &field, "must match [A-Za-z0-9_-]+");
            return None;
        }
        Some(alias.to_owned())
    }

    /// `protocolVersion`: a revision mcphost knows.
    fn protocol_version(
        &mut self,
        p: &ObjectProp<'_>,
        field: &str,
    ) -> Option<mcphost_protocol::ProtocolVersion> {
        let field = child(field, "protocolVersion");
        let text = self.string(&p.value, &field)?;
        match text.parse::<mcphost_protocol::ProtocolVersion>() {
            Ok(v) => Some(v),
            Err(_) => {
                let known: Vec<&str> = mcphost_protocol::ProtocolVersion::ALL
                    .iter()
                    .map(|v| v.as_str())
                    .collect();
                self.error(
                    p.value.start(),
                    &field,
                    format!(
                        "{text:?} is not a revision mcphost knows ({})",
                        known.join(", ")
                    ),
                );
                None
            }
        }
    }

    /// `share`: `"shared"` or `"per-session"`.
    fn share(&mut self, value: &Value<'_>, field: &str) -> Share {
        match self.string(value, field) {
            Some("shared") => Share::Shared,
            Some("per-session") => Share::PerSession,
            Some(other) => {
                self.error(
                    value.start(),
                    field,
                    format!("{other:?} is not one of \"shared\", \"per-session\""),
                );
                Share::Shared
            }
            None => Share::Shared,
        }
    }

    /// `hygiene`: `"strip"` or `"keep"`; `fallback` when it is neither.
    fn hygiene(&mut self, value: &Value<'_>, field: &str, fallback: Hygiene) -> Hygiene {
        match self.string(value, field) {
            Some("strip") => Hygiene::Strip,
            Some("keep") => Hygiene::Keep,
            Some(other) => {
                let msg = format!("{other:?} is not one of \"strip\", \"keep\"");
                self.error(value.start(), field, msg);
                fallback
            }
            None => fallback,
        }
    }

    /// `idleTimeout`: a duration longer than zero.
    fn idle_timeout(&mut self, p: &ObjectProp<'_>, field: &str) -> Option<Duration> {
        let field = child(field, "idleTimeout");
        let d = self.duration(&p.value, &field)?;
        if d.is_zero() {
            self.error(p.value.start(), &field, "must be longer than 0s");
            return None;
        }
        Some(d)
    }

    /// `start`: `"eager"` or `"lazy"`.
    fn start_mode(&mut self, value: &Value<'_>, field: &str) -> StartMode {
        match self.string(value, field) {
            Some("eager") => StartMode::Eager,
            Some("lazy") => StartMode::Lazy,
            Some(other) => {
                self.error(
                    value.start(),
                    field,
                    format!("{other:?} is not one of \"eager\", \"lazy\""),
                );
                StartMode::Eager
            }
            None => StartMode::Eager,
        }
    }

    fn transport_kind(&mut self, obj: &Object<'_>, field: &str, at: usize) -> Option<Kind> {
        let command = obj.get("command").is_some();
        let url = obj.get("url").is_some();
        if command && url {
            self.error(
                at,
                field,
                "has both \"command\" and \"url\"; keep one: command starts a stdio server, url connects to an HTTP server",
            );
            return None;
        }
        if let Some(prop) = obj.get("type") {
            let field = child(field, "type");
            return match self.string(&prop.value, &field)? {
                "stdio" => Some(Kind::Stdio),
                "http" => Some(Kind::Http(HttpMode::Auto)),
                "streamable-http" => Some(Kind::Http(HttpMode::Streamable)),
                "sse" => Some(Kind::Http(HttpMode::Sse)),
                other => {
                    self.error(
                        prop.value.start(),
                        &field,
                        format!(
                            "{other:?} is not a server type; use \"stdio\", \"http\", \"streamable-http\" or \"sse\""
                        ),
                    );
                    None
                }
            };
        }
        if command {
            Some(Kind::Stdio)
        } else if url {
            Some(Kind::Http(HttpMode::Auto))
        } else {
            self.error(
                at,
                field,
                "needs \"command\" (a stdio server) or \"url\" (an HTTP server)",
            );
            None
        }
    }

    /// Keys that belong to the other transport are mistakes, not extensions.
    fn not_for(&mut self, obj: &Object<'_>, field: &str, keys: &[&str], what: &str) {
        for prop in &obj.properties {
            let key = prop_name(prop);
            if keys.contains(&key) {
                self.error(
                    prop.start(),
                    &child(field, key),
                    format!("only applies to {what}"),
                );
            }
        }
    }

    fn stdio(
        &mut self,
        obj: &Object<'_>,
        field: &str,
        server: &str,
        lenient: bool,
        defaults: &Defaults,
        at: usize,
    ) -> Option<StdioServer> {
        let command = match obj.get("command") {
            Some(p) => {
                let field = child(field, "command");
                self.non_empty_string(&p.value, &field)
                    .and_then(|raw| {
                        self.interpolated(raw, p.value.start(), &field, server, lenient)
                    })
                    .and_then(|command| {
                        if command.is_empty() {
                            self.error(p.value.start(), &field, "is empty after interpolation");
                            None
                        } else {
                            Some(command)
                        }
                    })
            }
            None => {
                self.error(
                    at,
                    &child(field, "command"),
                    "missing; a stdio server needs a command",
                );
                None
            }
        };

        let mut args = Vec::new();
        if let Some(p) = obj.get("args") {
            let field = child(field, "args");
            if let Some(items) = self.array(&p.value, &field) {
                for (i, item) in items.iter().enumerate() {
                    let field = format!("{field}[{i}]");
                    if let Some(raw) = self.string(item, &field)
                        && let Some(arg) =
                            self.interpolated(raw, item.start(), &field, server, lenient)
                    {
                        args.push(arg);
                    }
                }
            }
        }

        let mut env = BTreeMap::new();
        if let Some(p) = obj.get("envFile") {
            let field = child(field, "envFile");
            if let Some(raw) = self.non_empty_string(&p.value, &field)
                && let Some(file) = self.interpolated(raw, p.value.start(), &field, server, lenient)
            {
                self.env_file(&file, p.value.start(), &field, lenient, &mut env);
            }
        }
        if let Some(p) = obj.get("env") {
            let field = child(field, "env");
            let map = self.string_map(&p.value, &field, server, lenient, valid_env_name);
            // env wins over envFile.
            env.extend(map);
        }

        let cwd = obj.get("cwd").and_then(|p| {
            let field = child(field, "cwd");
            let raw = self.non_empty_string(&p.value, &field)?;
            let dir = self.interpolated(raw, p.value.start(), &field, server, lenient)?;
            Some(self.base_dir.join(dir))
        });

        let inherit_env = obj
            .get("inheritEnv")
            .and_then(|p| self.boolean(&p.value, &child(field, "inheritEnv")))
            .unwrap_or(defaults.inherit_env);

        // The server's own `sandbox`, `false` included, wins over the default.
        let sandbox = match obj.get("sandbox") {
            Some(p) => self.sandbox(&p.value, &child(field, "sandbox"), server, lenient),
            None => defaults.sandbox.clone(),
        };

        Some(StdioServer {
            command: command?,
            args,
            env,
            cwd,
            inherit_env,
            sandbox,
        })
    }

    // ---- sandbox (crate::sandbox) ----

    fn sandbox(
        &mut self,
        value: &Value<'_>,
        field: &str,
        server: &str,
        lenient: bool,
    ) -> Option<super::sandbox::Sandbox> {
        let base = self.base_dir.clone();
        let mut expand =
            |raw: &str, at: usize, field: &str| self.interpolated(raw, at, field, server, lenient);
        match super::sandbox::parse(value, field, &base, &mut expand) {
            Ok(sandbox) => sandbox,
            Err(problems) => {
                for (at, field, message) in problems {
                    let message = if server.is_empty() {
                        message
                    } else {
                        format!("server \"{server}\": {message}")
                    };
                    self.error(at, &field, message);
                }
                None
            }
        }
    }

    /// mcphost starts no process for an HTTP server, so there is nothing to
    /// confine: a `sandbox` there would promise what it cannot keep.
    fn no_sandbox_over_http(&mut self, obj: &Object<'_>, field: &str) {
        if let Some(p) = obj.get("sandbox")
            && !matches!(&p.value, Value::BooleanLit(b) if !b.value)
        {
            self.error(
                p.start(),
                &child(field, "sandbox"),
                "only applies to stdio servers: an HTTP server runs elsewhere, mcphost starts no process it could confine",
            );
        }
    }

    fn env_file(
        &mut self,
        file: &str,
        at: usize,
        field: &str,
        lenient: bool,
        env: &mut BTreeMap<String, String>,
    ) {
        let path = self.base_dir.join(file);
        let report = |ctx: &mut Self, message: String| {
            if lenient {
                ctx.warn(at, field, format!("{message} (server is disabled)"));
            } else {
                ctx.error(at, field, message);
            }
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(err) => {
                report(self, format!("cannot read {}: {err}", path.display()));
                return;
            }
        };
        match parse_dotenv(&text) {
            Ok(vars) => env.extend(vars),
            Err(errors) => {
                for err in errors {
                    report(
                        self,
                        format!("{}:{}: {}", path.display(), err.line, err.message),
                    );
                }
            }
        }
    }

    fn http(
        &mut self,
        obj: &Object<'_>,
        field: &str,
        server: &str,
        lenient: bool,
        kind: HttpMode,
        at: usize,
    ) -> Option<HttpServer> {
        let url = match obj.get("url") {
            Some(p) => {
                let field = child(field, "url");
                self.non_empty_string(&p.value, &field)
                    .and_then(|raw| {
                        self.interpolated(raw, p.value.start(), &field, server, lenient)
                    })
                    .and_then(|url| {
                        let lower = url.to_ascii_lowercase();
                        // The value is not echoed: query strings carry keys. A
                        // disabled server may keep an unresolved `${VAR}`.
                        let http = lower.starts_with("http://") || lower.starts_with("https://");
                        if http || (lenient && url.contains("${")) {
                            Some(url)
                        } else {
                            self.error(
                                p.value.start(),
                                &field,
                                "must be an http:// or https:// URL",
                            );
                            None
                        }
                    })
            }
            None => {
                self.error(
                    at,
                    &child(field, "url"),
                    "missing; an HTTP server needs a url",
                );
                None
            }
        };
        let headers = match obj.get("headers") {
            Some(p) => {
                let headers = self.string_map(
                    &p.value,
                    &child(field, "headers"),
                    server,
                    lenient,
                    valid_header_name,
                );
                for (name, value) in &headers {
                    if value.contains(['\r', '\n']) {
                        self.error(
                            p.value.start(),
                            &child(&child(field, "headers"), name),
                            "must not contain line breaks",
                        );
                    }
                }
                headers
            }
            None => BTreeMap::new(),
        };
        let oauth = match obj.get("oauth") {
            Some(p) => self.oauth(&p.value, &child(field, "oauth"), server, lenient),
            None => OAuthSetting::default(),
        };
        Some(HttpServer {
            url: url?,
            headers,
            kind,
            oauth,
        })
    }

    /// `oauth`: `false` (never sign in), or the client to sign in as.
    fn oauth(
        &mut self,
        value: &Value<'_>,
        field: &str,
        server: &str,
        lenient: bool,
    ) -> OAuthSetting {
        if let Value::BooleanLit(b) = value {
            return if b.value {
                OAuthSetting::default()
            } else {
                OAuthSetting::Disabled
            };
        }
        let Some(obj) = self.object(value, field) else {
            return OAuthSetting::default();
        };
        self.keys(obj, field, OAUTH_KEYS);
        let mut c = super::oauth::OAuthConfig::default();
        for prop in &obj.properties {
            let key = prop_name(prop);
            let f = child(field, key);
            if key == "workloadIdentity" {
                c.workload = self.workload_identity(&prop.value, &f, server, lenient);
                continue;
            }
            let Some(raw) = self.non_empty_string(&prop.value, &f) else {
                continue;
            };
            let Some(v) = self.interpolated(raw, prop.value.start(), &f, server, lenient) else {
                continue;
            };
            self.oauth_field(&mut c, key, v, prop.value.start(), &f);
        }
        self.oauth_cross_checks(&mut c, obj.start(), field);
        OAuthSetting::Client(Box::new(c))
    }

    /// One string setting of `oauth`, interpolated.
    fn oauth_field(
        &mut self,
        c: &mut super::oauth::OAuthConfig,
        key: &str,
        v: String,
        start: usize,
        f: &str,
    ) {
        match key {
            "clientId" => c.client_id = Some(v),
            "issuer" => match url::Url::parse(&v) {
                Ok(u) if super::oauth::is_secure(&u) => c.issuer = Some(v),
                _ => self.error(
                    start,
                    f,
                    "must be the https:// URL of the authorization server the client is registered at (http only on loopback)",
                ),
            },
            "clientSecret" => c.client_secret = Some(v.into()),
            "tokenEndpointAuthMethod" => {
                const METHODS: [&str; 4] = [
                    "client_secret_basic",
                    "client_secret_post",
                    "none",
                    "private_key_jwt",
                ];
                if METHODS.contains(&v.as_str()) {
                    c.token_endpoint_auth_method = Some(v);
                } else {
                    self.error(
                        start,
                        f,
                        format!("must be one of {}", METHODS.join(", ")),
                    );
                }
            }
            "grantType" => {
                if v == "authorization_code" || v == "client_credentials" {
                    c.grant_type = Some(v);
                } else {
                    self.error(
                        start,
                        f,
                        "must be \"authorization_code\" or \"client_credentials\"",
                    );
                }
            }
            "privateKeyPem" => c.private_key_pem = Some(v.into()),
            "privateKeyFile" => match std::fs::read_to_string(self.base_dir.join(&v)) {
                Ok(pem) => c.private_key_pem = Some(pem.into()),
                Err(e) => self.error(start, f, format!("cannot read {v:?}: {e}")),
            },
            "signingAlgorithm" => c.signing_algorithm = Some(v),
            "scope" => c.scope = Some(v),
            "clientMetadataUrl" => {
                if v.starts_with("https://") {
                    c.client_metadata_url = Some(v);
                } else {
                    self.error(
                        start,
                        f,
                        "must be an https:// URL (a client ID metadata document)",
                    );
                }
            }
            _ => {}
        }
    }

    /// What the `oauth` settings together must be: a workload identity is
    /// its own grant and needs a client, as does `client_credentials`.
    fn oauth_cross_checks(&mut self, c: &mut super::oauth::OAuthConfig, start: usize, field: &str) {
        if c.workload.is_some() {
            if c.grant_type.is_some() {
                self.error(
                    start,
                    field,
                    "workloadIdentity is its own grant (a JWT bearer grant); leave grantType out",
                );
            }
            if c.client_id.is_none() {
                self.error(
                    start,
                    field,
                    "workloadIdentity needs the clientId its token is exchanged for",
                );
            }
            c.grant_type = Some(super::oauth::JWT_BEARER.into());
        }
        if c.grant_type.as_deref() == Some("client_credentials") && c.client_id.is_none() {
            self.error(
                start,
                field,
                "grantType \"client_credentials\" needs a clientId",
            );
        }
    }

    /// `oauth.workloadIdentity`: `{"tokenFile": PATH}` (relative to the
    /// config's directory) or `{"tokenCommand": [PROGRAM, ARGS…]}`.
    fn workload_identity(
        &mut self,
        value: &Value<'_>,
        field: &str,
        server: &str,
        lenient: bool,
    ) -> Option<super::oauth::WorkloadToken> {
        let obj = self.object(value, field)?;
        self.keys(obj, field, WORKLOAD_KEYS);
        let mut found = Vec::new();
        for prop in &obj.properties {
            let key = prop_name(prop);
            let f = child(field, key);
            match key {
                "tokenFile" => {
                    let raw = self.non_empty_string(&prop.value, &f)?;
                    let v = self.interpolated(raw, prop.value.start(), &f, server, lenient)?;
                    found.push(super::oauth::WorkloadToken::File(self.base_dir.join(v)));
                }
                "tokenCommand" => {
                    let items = self.array(&prop.value, &f)?;
                    let mut argv = Vec::new();
                    for (i, item) in items.iter().enumerate() {
                        let fi = format!("{f}[{i}]");
                        let raw = self.non_empty_string(item, &fi)?;
                        argv.push(self.interpolated(raw, item.start(), &fi, server, lenient)?);
                    }
                    if argv.is_empty() {
                        self.error(prop.value.start(), &f, "must name a program");
                        return None;
                    }
                    found.push(super::oauth::WorkloadToken::Command(argv));
                }
                _ => {}
            }
        }
        if found.len() != 1 {
            self.error(
                obj.start(),
                field,
                "must have one of tokenFile or tokenCommand",
            );
            return None;
        }
        found.pop()
    }

    /// `offer`: `{sampling, elicitation, roots}` booleans, each `true` unless set.
    fn offer(&mut self, value: &Value<'_>, field: &str) -> Offer {
        let mut offer = Offer::default();
        let Some(obj) = self.object(value, field) else {
            return offer;
        };
        self.keys(obj, field, OFFER_KEYS);
        for (key, slot) in [
            ("sampling", &mut offer.sampling),
            ("elicitation", &mut offer.elicitation),
            ("roots", &mut offer.roots),
        ] {
            if let Some(p) = obj.get(key)
                && let Some(b) = self.boolean(&p.value, &child(field, key))
            {
                *slot = b;
            }
        }
        offer
    }

    fn tools(&mut self, value: &Value<'_>, field: &str) -> Option<ToolFilter> {
        let obj = self.object(value, field)?;
        self.keys(obj, field, TOOLS_KEYS);
        let mut lists = [Vec::new(), Vec::new()];
        let mut ok = true;
        for (list, key) in lists.iter_mut().zip(["allow", "deny"]) {
            let Some(prop) = obj.get(key) else { continue };
            let field = child(field, key);
            let Some(items) = self.array(&prop.value, &field) else {
                ok = false;
                continue;
            };
            for (i, item) in items.iter().enumerate() {
                let field = format!("{field}[{i}]");
                let Some(pattern) = self.string(item, &field) else {
                    ok = false;
                    continue;
                };
                if let Err(err) = glob(pattern) {
                    self.error(item.start(), &field, format!("bad glob: {err}"));
                    ok = false;
                    continue;
                }
                list.push(pattern.to_owned());
            }
        }
        if !ok {
            return None;
        }
        let [allow, deny] = lists;
        match ToolFilter::new(allow, deny) {
            Ok(filter) => Some(filter),
            Err(err) => {
                self.error(value.start(), field, format!("bad glob: {err}"));
                None
            }
        }
    }

    // ---- values ----

    fn interpolated(
        &mut self,
        raw: &str,
        at: usize,
        field: &str,
        server: &str,
        lenient: bool,
    ) -> Option<String> {
        match interpolate(raw, &|name| (self.env)(server, name)) {
            Ok(value) => Some(value),
            Err(err) => {
                let message = format!("server \"{server}\": {}", err.message());
                if lenient {
                    // A disabled server may lack its secrets; keep the text.
                    self.warn(at, field, format!("{message} (server is disabled)"));
                    Some(raw.to_owned())
                } else {
                    self.error(at, field, message);
                    None
                }
            }
        }
    }

    fn string_map(
        &mut self,
        value: &Value<'_>,
        field: &str,
        server: &str,
        lenient: bool,
        valid_name: fn(&str) -> bool,
    ) -> BTreeMap<String, String> {
        let mut map = BTreeMap::new();
        let Some(obj) = self.object(value, field) else {
            return map;
        };
        self.duplicates(obj, field);
        for prop in &obj.properties {
            let key = prop_name(prop);
            let field = child(field, key);
            if !valid_name(key) {
                self.error(prop.start(), &field, "is not a valid name");
                continue;
            }
            if let Some(raw) = self.string(&prop.value, &field)
                && let Some(value) =
                    self.interpolated(raw, prop.value.start(), &field, server, lenient)
            {
                map.insert(key.to_owned(), value);
            }
        }
        map
    }

    fn duration(&mut self, value: &Value<'_>, field: &str) -> Option<Duration> {
        let result = match value {
            Value::StringLit(s) => parse_duration(&s.value),
            Value::NumberLit(n) => Err(no_unit_hint(n.value)),
            other => Err(format!(
                "must be a duration like \"30s\", found {}",
                kind(other)
            )),
        };
        result
            .map_err(|message| self.error(value.start(), field, message))
            .ok()
    }

    fn uint(&mut self, value: &Value<'_>, field: &str) -> Option<usize> {
        match value {
            Value::NumberLit(n) => match n.value.parse::<usize>() {
                Ok(n) => Some(n),
                Err(_) => {
                    self.error(value.start(), field, "must be a non-negative integer");
                    None
                }
            },
            other => {
                self.error(
                    value.start(),
                    field,
                    format!("must be a non-negative integer, found {}", kind(other)),
                );
                None
            }
        }
    }

    fn boolean(&mut self, value: &Value<'_>, field: &str) -> Option<bool> {
        match value {
            Value::BooleanLit(b) => Some(b.value),
            other => {
                self.error(
                    value.start(),
                    field,
                    format!("must be true or false, found {}", kind(other)),
                );
                None
            }
        }
    }

    fn string<'v>(&mut self, value: &'v Value<'_>, field: &str) -> Option<&'v str> {
        match value {
            Value::StringLit(s) => Some(&s.value),
            other => {
                self.error(
                    value.start(),
                    field,
                    format!("must be a string, found {}", kind(other)),
                );
                None
            }
        }
    }

    fn non_empty_string<'v>(&mut self, value: &'v Value<'_>, field: &str) -> Option<&'v str> {
        match value {
            Value::StringLit(s) if !s.value.trim().is_empty() => Some(&s.value),
            _ => {
                self.error(value.start(), field, "must be a non-empty string");
                None
            }
        }
    }

    fn object<'v, 't>(&mut self, value: &'v Value<'t>, field: &str) -> Option<&'v Object<'t>> {
        match value {
            Value::Object(obj) => Some(obj),
            other => {
                self.error(
                    value.start(),
                    field,
                    format!("must be an object, found {}", kind(other)),
                );
                None
            }
        }
    }

    fn array<'v, 't>(&mut self, value: &'v Value<'t>, field: &str) -> Option<&'v [Value<'t>]> {
        match value {
            Value::Array(array) => Some(&array.elements),
            other => {
                self.error(
                    value.start(),
                    field,
                    format!("must be an array, found {}", kind(other)),
                );
                None
            }
        }
    }

    /// Duplicate keys are errors (other tools silently take one or the
    /// other); unknown keys are warnings, for forward compatibility.
    fn keys(&mut self, obj: &Object<'_>, field: &str, known: &[&str]) {
        self.duplicates(obj, field);
        let has_servers = obj
            .properties
            .iter()
            .any(|p| matches!(prop_name(p), "mcpServers" | "servers"));
        for prop in &obj.properties {
            let key = prop_name(prop);
            if known.contains(&key) {
                continue;
            }
            let message = match did_you_mean(key, known) {
                Some(meant @ ("mcpServers" | "servers")) if field.is_empty() && !has_servers => {
                    format!(
                        "unknown key, ignored; did you mean \"{meant}\"? (as written, the config names no servers)"
                    )
                }
                Some(meant) => format!("unknown key, ignored; did you mean \"{meant}\"?"),
                None => "unknown key, ignored".to_owned(),
            };
            self.warn(prop.start(), &child(field, key), message);
        }
    }

    fn duplicates(&mut self, obj: &Object<'_>, field: &str) {
        let mut seen = HashSet::new();
        for prop in &obj.properties {
            let key = prop_name(prop);
            if !seen.insert(key) {
                self.error(prop.start(), &child(field, key), "duplicate key");
            }
        }
    }
}

/// The known name closest to `name`, when it is close enough to be a typo
/// (a letter or two off, or only its case).
pub fn did_you_mean<'k>(name: &str, known: &[&'k str]) -> Option<&'k str> {
    known
        .iter()
        .map(|k| {
            (
                strsim::jaro_winkler(&name.to_lowercase(), &k.to_lowercase()),
                *k,
            )
        })
        .filter(|(score, _)| *score >= 0.85)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k)
}

/// A root as a `file://` URI: the spec allows only those. An absolute path
/// is turned into one.
fn root_uri(text: &str) -> Result<String, &'static str> {
    if text.starts_with('/') {
        return url::Url::from_file_path(text)
            .map(String::from)
            .map_err(|()| "is not a usable absolute path");
    }
    match url::Url::parse(text) {
        Ok(u) if u.scheme() == "file" => Ok(text.to_owned()),
        Ok(_) => Err("is not a file:// URI (roots must be file:// URIs or absolute paths)"),
        Err(_) => Err("is neither a file:// URI nor an absolute path"),
    }
}

fn prop_name<'v>(prop: &'v ObjectProp<'_>) -> &'v str {
    match &prop.name {
        ObjectPropName::String(s) => &s.value,
        ObjectPropName::Word(w) => w.value,
    }
}

/// `parent.key`, or `parent["odd key"]` when the key is not a plain word.
fn child(parent: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '$');
    match (parent.is_empty(), plain) {
        (true, true) => key.to_owned(),
        (true, false) => format!("[{key:?}]"),
        (false, true) => format!("{parent}.{key}"),
        (false, false) => format!("{parent}[{key:?}]"),
    }
}

fn kind(value: &Value<'_>) -> &'static str {
    match value {
        Value::StringLit(_) => "a string",
        Value::NumberLit(_) => "a number",
        Value::BooleanLit(_) => "a boolean",
        Value::Object(_) => "an object",
        Value::Array(_) => "an array",
        Value::NullKeyword(_) => "null",
    }
}

fn valid_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

/// RFC 9110 token characters.
fn valid_header_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

/// A checked AST value as JSON (profiles are read by the same code as
/// `mcphost/session/configure` params).
fn to_json(value: &Value<'_>) -> serde_json::Value {
    match value {
        Value::StringLit(s) => serde_json::Value::String(s.value.to_string()),
        Value::NumberLit(n) => serde_json::from_str(n.value).unwrap_or(serde_json::Value::Null),
        Value::BooleanLit(b) => serde_json::Value::Bool(b.value),
        Value::NullKeyword(_) => serde_json::Value::Null,
        Value::Array(a) => serde_json::Value::Array(a.elements.iter().map(to_json).collect()),
        Value::Object(o) => serde_json::Value::Object(
            o.properties
                .iter()
                .map(|p| (p.name.as_str().to_owned(), to_json(&p.value)))
                .collect(),
        ),
    }
}
