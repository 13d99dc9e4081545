//! One reader for a server entry's fields in every dialect: a dialect is a
//! table from its key names to our fields, plus code for the shapes only
//! it has ([`Field::Own`]). A key not in the table is left behind, named
//! in the server's `dropped` notes.

use std::path::PathBuf;

use super::value::{Map, Value};
use super::{Ctx, Server, kind};

/// What a dialect's key is in our entry. The key itself names the field in
/// messages (`cmd is a number, not a string`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Field {
    /// Says nothing we keep (a name, a label).
    Skip,
    /// The transport (`type`, `transport`): a string, checked once all
    /// fields are read (`json::transport`).
    Transport,
    Command,
    /// Our `args`, replacing any.
    Args,
    /// Our `args`, after those a command list gave.
    MoreArgs,
    Env,
    /// `Env`, where `null` means none.
    EnvOrNull,
    EnvFile,
    Cwd,
    Url,
    Headers,
    Disabled,
    Enabled,
    /// Tools to leave out (an empty list: no filter).
    DenyTools,
    /// The only tools to offer (an empty list: no filter).
    AllowTools,
    /// Known, with no equivalent: left behind for this reason.
    Drop(&'static str),
    /// Read by the dialect's own code: a shape only it has.
    Own,
}

/// A dialect's keys and what they are.
pub(super) type Table = [(&'static str, Field)];

/// Reads entries by a [`Table`].
pub(super) struct Fields<'t> {
    table: &'t Table,
    /// The app's name, for a key that is not in the table.
    host: &'static str,
    /// Where relative `cwd` and `envFile` point.
    base: PathBuf,
}

impl<'t> Fields<'t> {
    pub(super) fn new(ctx: &Ctx<'_>, table: &'t Table) -> Self {
        Fields {
            table,
            host: ctx.dialect.display_name(),
            base: ctx.base_dir(),
        }
    }

    /// Each field of `obj` in its order, [`Field::Own`] ones through `own`;
    /// the transport it names, if a [`Field::Transport`] key is there.
    pub(super) fn read<'a>(
        &self,
        obj: &Map,
        s: &mut Server<'a>,
        mut own: impl FnMut(&str, &Value, &mut Server<'a>),
    ) -> Option<String> {
        let mut transport = None;
        for (key, v) in obj {
            match self.field(key) {
                Some(Field::Own) => own(key, v, s),
                Some(Field::Transport) => match v.as_str() {
                    Some(t) => transport = Some(t.to_owned()),
                    None => s.fail(format!("{key} is {}, not a string", kind(v))),
                },
                Some(field) => self.apply(field, key, v, s),
                None => s.drop_field(
                    key,
                    &format!("a {} setting mcphost has no equivalent for", self.host),
                ),
            }
        }
        transport
    }

    fn field(&self, key: &str) -> Option<Field> {
        self.table
            .iter()
            .find(|(name, _)| *name == key)
            .map(|&(_, field)| field)
    }

    fn apply(&self, field: Field, key: &str, v: &Value, s: &mut Server<'_>) {
        match field {
            Field::Skip | Field::Own | Field::Transport => {}
            Field::Command => {
                if let Some(c) = string(key, v, s) {
                    s.entry.command = s.text(key, c);
                }
            }
            Field::Url => {
                if let Some(u) = string(key, v, s) {
                    s.entry.url = s.text(key, u);
                }
            }
            Field::EnvFile => {
                if let Some(p) = string(key, v, s) {
                    s.entry.env_file = s.path(key, p, &self.base);
                }
            }
            Field::Cwd => {
                if let Some(p) = string(key, v, s) {
                    s.entry.cwd = s.path(key, p, &self.base);
                }
            }
            Field::Args => {
                if let Some(a) = s.strings(key, v) {
                    s.entry.args = a;
                }
            }
            Field::MoreArgs => {
                if let Some(a) = s.strings(key, v) {
                    s.entry.args.extend(a);
                }
            }
            Field::EnvOrNull if v.is_null() => {}
            Field::Env | Field::EnvOrNull => {
                if let Some(m) = s.string_map(key, v) {
                    s.entry.env = m;
                }
            }
            Field::Headers => {
                if let Some(m) = s.string_map(key, v) {
                    s.entry.headers = m;
                }
            }
            Field::Disabled | Field::Enabled => match v.as_bool() {
                Some(b) => s.entry.disabled = b == (field == Field::Disabled),
                None => s.fail(format!("{key} is {}, not a boolean", kind(v))),
            },
            Field::DenyTools | Field::AllowTools => {
                if let Some(list) = s.strings(key, v)
                    && !list.is_empty()
                {
                    let tools = s.entry.tools.get_or_insert_with(Default::default);
                    if field == Field::DenyTools {
                        tools.deny = list;
                    } else {
                        tools.allow = list;
                    }
                }
            }
            Field::Drop(why) => s.drop_field(key, why),
        }
    }
}

/// `v` as a string, or the server fails naming `key`.
fn string<'v>(key: &str, v: &'v Value, s: &mut Server<'_>) -> Option<&'v str> {
    let text = v.as_str();
    if text.is_none() {
        s.fail(format!("{key} is {}, not a string", kind(v)));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::super::paths::{Places, Platform};
    use super::super::vars::Rules;
    use super::super::{Dialect, Scope};
    use super::*;

    const KEYS: &Table = &[
        ("kind", Field::Transport),
        ("program", Field::Command),
        ("on", Field::Enabled),
        ("odd", Field::Own),
        ("legacy", Field::Drop("no longer read")),
    ];

    fn read(obj: Map) -> (Server<'static>, Option<String>, Vec<String>) {
        let places = Places {
            platform: Platform::Linux,
            home: "/home/u".into(),
            config: "/home/u/.config".into(),
            xdg_config: "/home/u/.config".into(),
            project: "/work/p".into(),
        };
        let ctx = Ctx {
            dialect: Dialect::Goose,
            path: std::path::Path::new("/home/u/.config/goose/config.yaml"),
            scope: Scope::User,
            places: &places,
        };
        let mut s = Server::new("srv", Rules::Literal);
        let mut own = Vec::new();
        let t = Fields::new(&ctx, KEYS).read(&obj, &mut s, |k, _, _| own.push(k.to_owned()));
        (s, t, own)
    }

    fn text(s: &str) -> Value {
        Value::String(s.to_owned())
    }

    #[test]
    fn a_table_maps_each_key_to_its_field_and_leaves_the_unknown_ones_named() {
        let obj: Map = [
            ("program", text("npx")),
            ("colour", text("blue")),
            ("odd", text("x")),
            ("on", Value::Bool(false)),
            ("kind", text("sse")),
            ("legacy", text("y")),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        let (s, transport, own) = read(obj);
        assert_eq!(s.fatal, None);
        assert_eq!(s.entry.command.as_deref(), Some("npx"));
        assert!(s.entry.disabled, "on: false");
        assert_eq!(transport.as_deref(), Some("sse"));
        assert_eq!(own, ["odd"]);
        assert_eq!(
            s.dropped,
            [
                "colour: a Goose setting mcphost has no equivalent for",
                "legacy: no longer read"
            ]
        );
    }

    #[test]
    fn a_value_of_the_wrong_kind_fails_the_server_naming_the_dialects_key() {
        let obj: Map = [("program", Value::Bool(true)), ("on", text("yes"))]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        let (s, _, _) = read(obj);
        // The first reason is kept.
        assert_eq!(
            s.fatal.as_deref(),
            Some("program is a boolean, not a string")
        );
    }
}
