//! `carpool event`: what Carpool would do with each event, touching nothing.
//!
//! Each file holds a bare EventBridge event, one SQS message (`{"messageId", "body"}`)
//! or a Lambda SQS batch (`{"Records": [...]}`); a batch gives one result per record.
//! The files are read in order, and every record that reads is printed, including the
//! good records of a file that also holds a bad one (as the function handles the rest of
//! a batch). Each file, or record, that cannot be read is then reported on stderr, one
//! line each: `carpool: FILE: <what is wrong> (<how to fix>)` (with `record N (messageId
//! M)` after the file for a record of a batch), and the command exits with 2.

use std::path::PathBuf;

use anyhow::Result;
use carpool::decide::interruption::{EventError, InputRecord, InterruptionEvent, parse_input_text};
use clap::Args;
use serde::Serialize;

use crate::output::say;
use crate::usage::UsageError;

/// Arguments of `carpool event`.
#[derive(Args, Debug)]
pub struct EventArgs {
    /// Event files: a bare EventBridge event, an SQS message or a Lambda SQS batch (JSON).
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    /// Print one JSON object per record, one per line.
    #[arg(long)]
    json: bool,
}

/// One record's result, as `--json` prints it. Every key is always present.
#[derive(Serialize)]
struct JsonLine<'a> {
    file: &'a str,
    event_id: &'a str,
    kind: &'static str,
    instance_ids: &'a [String],
    /// Lower-cased, for state changes to a documented state; null otherwise.
    state: Option<&'static str>,
    action: &'static str,
    ignored: bool,
    /// Why, when ignored; null otherwise.
    reason: Option<String>,
}

/// Runs `carpool event`.
pub fn run(args: &EventArgs) -> Result<()> {
    // Each failure is one line `FILE: what (how to fix)`; main prints the last one.
    let mut failures: Vec<String> = Vec::new();
    for path in &args.files {
        let name = path.display().to_string();
        let records = match std::fs::read_to_string(path) {
            Err(e) => {
                failures.push(format!(
                    "{name}: cannot read: {e} (give the path of an event's JSON file)"
                ));
                continue;
            }
            Ok(text) => match parse_input_text(&text) {
                Err(e) => {
                    failures.push(failure(&name, None, &e));
                    continue;
                }
                Ok(records) => records,
            },
        };
        let several = records.len() > 1;
        for (i, InputRecord { message_id, event }) in records.iter().enumerate() {
            match event {
                Ok(event) => print(&name, event, args.json)?,
                Err(e) => {
                    let at = several.then(|| record_name(i, message_id.as_deref()));
                    failures.push(failure(&name, at.as_deref(), e));
                }
            }
        }
    }
    match failures.split_last() {
        None => Ok(()),
        Some((last, others)) => {
            for line in others {
                eprintln!("carpool: {line}");
            }
            Err(UsageError(last.clone()).into())
        }
    }
}

fn record_name(index: usize, message_id: Option<&str>) -> String {
    match message_id {
        Some(id) => format!("record {} (messageId {id})", index + 1),
        None => format!("record {}", index + 1),
    }
}

fn failure(file: &str, record: Option<&str>, e: &EventError) -> String {
    match record {
        Some(record) => format!("{file}: {record}: {e} ({})", e.how_to_fix()),
        None => format!("{file}: {e} ({})", e.how_to_fix()),
    }
}

fn print(file: &str, event: &InterruptionEvent, json: bool) -> Result<()> {
    let reason = event.action.ignored().map(ToString::to_string);
    if json {
        let line = JsonLine {
            file,
            event_id: &event.id,
            kind: event.kind.as_str(),
            instance_ids: &event.instance_ids,
            state: event.state.map(|s| s.as_str()),
            action: event.action_word(),
            ignored: reason.is_some(),
            reason,
        };
        say!("{}", serde_json::to_string(&line)?);
        return Ok(());
    }
    let instances = if event.instance_ids.is_empty() {
        "-".to_owned()
    } else {
        event.instance_ids.join(",")
    };
    say!("{file}: {} {} {instances}: {}", event.id, event.kind, event.action);
    Ok(())
}
