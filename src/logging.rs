//! Log lines that no client or operator input can forge: every field value and every message of
//! the plain-text log goes through one field formatter ([`EscapedFields`]) that writes control
//! characters (and the Unicode line and paragraph separators) as escapes, so a `\n` in an
//! operator's `node_id` stays on its line. The JSON log is escaped by its encoder already.

use std::fmt::{self, Write};

use tracing::field::{Field, Visit};
use tracing_subscriber::field::RecordFields;
use tracing_subscriber::fmt::FormatFields;
use tracing_subscriber::fmt::format::Writer;

/// Writes `s` with control characters escaped (`\n`, `\r`, `\t`, else `\u{…}`).
pub fn write_escaped(w: &mut impl Write, s: &str) -> fmt::Result {
    for c in s.chars() {
        match c {
            '\n' => w.write_str("\\n")?,
            '\r' => w.write_str("\\r")?,
            '\t' => w.write_str("\\t")?,
            c if c.is_control() || c == '\u{2028}' || c == '\u{2029}' => write!(w, "\\u{{{:x}}}", c as u32)?,
            c => w.write_char(c)?,
        }
    }
    Ok(())
}

/// The plain-text log's field formatter: `message field=value …`, every value escaped.
#[derive(Debug, Clone, Copy, Default)]
pub struct EscapedFields;

impl<'writer> FormatFields<'writer> for EscapedFields {
    fn format_fields<R: RecordFields>(&self, writer: Writer<'writer>, fields: R) -> fmt::Result {
        let mut v = Visitor { writer, result: Ok(()), first: true };
        fields.record(&mut v);
        v.result
    }
}

struct Visitor<'w> {
    writer: Writer<'w>,
    result: fmt::Result,
    first: bool,
}

impl Visitor<'_> {
    fn field(&mut self, field: &Field, value: &str) {
        if self.result.is_err() {
            return;
        }
        let w = &mut self.writer;
        let sep = if self.first { "" } else { " " };
        self.first = false;
        self.result = (|| {
            w.write_str(sep)?;
            if field.name() != "message" {
                write!(w, "{}=", field.name())?;
            }
            write_escaped(w, value)
        })();
    }
}

impl Visit for Visitor<'_> {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.field(field, value);
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.field(field, &format!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0.lock().unwrap_or_else(|p| p.into_inner()).extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn control_characters_never_start_a_line() {
        let buf = Buf::default();
        let out = buf.clone();
        let sub = tracing_subscriber::fmt()
            .with_writer(move || buf.clone())
            .with_ansi(false)
            .fmt_fields(EscapedFields)
            .finish();
        tracing::subscriber::with_default(sub, || {
            let node = "gpu-1\n2026-01-01T00:00:00Z  INFO gshare: admin password reset\r\x1b[2K";
            tracing::warn!(node = %node, kind = "xid\u{2028}x", n = 3, "health {}", "a\nb");
        });
        let text = String::from_utf8(out.0.lock().unwrap().clone()).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
        assert!(
            text.contains("node=gpu-1\\n2026-01-01T00:00:00Z  INFO gshare: admin password reset\\r\\u{1b}[2K"),
            "{text}"
        );
        assert!(text.contains("health a\\nb"), "{text}");
        assert!(text.contains("kind=xid\\u{2028}x n=3"), "{text}");
    }
}
