//! Zed's `context_servers` (in its JSONC settings): a custom command, either
//! as `"command": {"path", "args", "env"}` or flat `command`/`args`/`env`,
//! or a remote `url` with `headers`. Servers provided by a Zed extension
//! (`"source": "extension"`) cannot be imported: the extension knows its
//! command, we do not.

use super::value::{Map, Value};

use super::fields::{Field, Fields, Table};
use super::json::transport;
use super::vars::Rules;
use super::{Ctx, Found, Server, kind};

pub(super) fn read(ctx: &Ctx<'_>, root: &Map) -> Found {
    let mut found = ctx.found();
    found.servers_at = vec!["context_servers".to_owned()];
    let Some(value) = root.get("context_servers") else {
        return found;
    };
    let Value::Object(map) = value else {
        found.problem(
            None,
            format!("context_servers is {}, not an object", kind(value)),
        );
        return found;
    };
    for (name, entry) in map {
        let mut s = Server::new(name, Rules::Literal);
        match entry {
            Value::Object(obj) => fields(ctx, obj, &mut s),
            other => s.fail(format!("its entry is {}, not an object", kind(other))),
        }
        s.finish(&mut found);
    }
    found
}

const KEYS: &Table = &[
    ("source", Field::Skip),
    ("command", Field::Own),
    ("args", Field::Args),
    ("env", Field::EnvOrNull),
    ("url", Field::Url),
    ("headers", Field::Headers),
    ("enabled", Field::Enabled),
    ("settings", Field::Own),
];

fn fields(ctx: &Ctx<'_>, obj: &Map, s: &mut Server<'_>) {
    let has_command = obj.contains_key("command");
    let has_url = obj.contains_key("url");
    if !has_command && !has_url {
        let source = obj
            .get("source")
            .and_then(Value::as_str)
            .unwrap_or("extension");
        s.fail(format!(
            "is provided by a Zed extension (source {source:?}); only Zed can run it (add its command to mcphost's config by hand)"
        ));
        return;
    }
    Fields::new(ctx, KEYS).read(obj, s, |key, v, s| match key {
        "command" => command(v, s),
        // Settings go to the extension that provides a server.
        _ => {
            if v.as_object().is_some_and(|m| !m.is_empty()) {
                s.drop_field("settings", "settings are passed to Zed extensions only");
            }
        }
    });
    transport(None, s);
}

/// `command`: a string, or `{"path", "args", "env"}`.
fn command(v: &Value, s: &mut Server<'_>) {
    match v {
        Value::String(c) => s.entry.command = s.text("command", c),
        Value::Object(cmd) => {
            for (k, v) in cmd {
                match k.as_str() {
                    "path" => match v.as_str() {
                        Some(p) => s.entry.command = s.text("command.path", p),
                        None => s.fail("command.path is not a string"),
                    },
                    "args" => {
                        if let Some(a) = s.strings("command.args", v) {
                            s.entry.args = a;
                        }
                    }
                    "env" => {
                        if !v.is_null()
                            && let Some(m) = s.string_map("command.env", v)
                        {
                            s.entry.env = m;
                        }
                    }
                    other => s.drop_field(
                        &format!("command.{other}"),
                        "a Zed setting mcphost has no equivalent for",
                    ),
                }
            }
        }
        other => s.fail(format!(
            "command is {}, not a string or an object",
            kind(other)
        )),
    }
}
