//! Logging setup: text by default, JSON lines when asked.

use std::fmt::{self, Write as _};

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt as _};
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, fmt as tsfmt};

/// How log lines are printed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Installs the global tracing subscriber. `RUST_LOG` overrides `default_level`.
pub fn init(format: LogFormat, default_level: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default_level));
    // Colour codes only on a terminal: log files and tests read plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let builder = tsfmt().with_env_filter(filter).with_writer(std::io::stderr).with_ansi(ansi);
    match format {
        LogFormat::Text => builder.finish().with(DropResponseBodies).init(),
        LogFormat::Json => builder.json().flatten_event(true).finish().with(DropResponseBodies).init(),
    }
}

/// The module of kube's client that, when a response does not decode, logs the whole response
/// body at WARN (`"{body}, {error:?}"` in `Client::request`): for a list of CloneSets, every
/// CloneSet's spec, on every retry. The error itself still reaches us (and our log line) as
/// `Error deserializing response: <serde error>`, so the body line adds nothing.
const KUBE_CLIENT_TARGET: &str = "kube_client::client";

/// Drops kube's response-body log lines (see [`KUBE_CLIENT_TARGET`]); every other line passes.
pub(crate) struct DropResponseBodies;

impl<S: Subscriber> Layer<S> for DropResponseBodies {
    fn event_enabled(&self, event: &Event<'_>, _ctx: Context<'_, S>) -> bool {
        let meta = event.metadata();
        if meta.target() != KUBE_CLIENT_TARGET || *meta.level() != Level::WARN {
            return true;
        }
        let mut first = FirstChar::default();
        event.record(&mut first);
        // A response body is a JSON object or array; kube's own messages start with a word.
        !matches!(first.0, Some('{' | '['))
    }
}

/// The first non-blank character of an event's message, read without formatting the rest.
#[derive(Default)]
struct FirstChar(Option<char>);

impl Visit for FirstChar {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" && self.0.is_none() {
            // Stops formatting at the first non-blank character (the writer's error ends `write!`).
            let _ = write!(StopAtFirst(&mut self.0), "{value:?}");
        }
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        if field.name() == "message" && self.0.is_none() {
            self.0 = value.chars().find(|c| !c.is_whitespace());
        }
    }
}

struct StopAtFirst<'a>(&'a mut Option<char>);

impl fmt::Write for StopAtFirst<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        match s.chars().find(|c| !c.is_whitespace()) {
            Some(c) => {
                *self.0 = Some(c);
                Err(fmt::Error)
            }
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// Log lines written by a subscriber set up as `init` does, for the duration of `f`.
    fn captured(f: impl FnOnce()) -> String {
        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0.lock().unwrap().extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tsfmt()
            .with_env_filter(EnvFilter::new("info"))
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .finish()
            .with(DropResponseBodies);
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(buf.0.lock().unwrap().clone()).unwrap()
    }

    #[test]
    fn kube_response_bodies_are_not_logged_but_its_other_warnings_and_ours_are() {
        let body = r#"{"kind":"CloneSetList","items":[{"spec":{"replicas":"three","template":{"image":"secret:1"}}}]}"#;
        let out = captured(|| {
            // What kube-client's `Client::request` logs when a list does not decode.
            tracing::warn!(target: "kube_client::client", "{}, {:?}", body, "Error(\"invalid type\")");
            tracing::warn!(target: "kube_client::client", "eof in poll: {:?}", "UnexpectedEof");
            tracing::warn!(error = "Error deserializing response: invalid type", "watch error; retrying");
        });
        assert!(!out.contains("secret:1"), "{out}");
        assert!(out.contains("eof in poll"), "{out}");
        assert!(out.contains("watch error; retrying"), "{out}");
    }
}
