//! What the interruption function is invoked with, read into records: a bare EventBridge
//! event, one SQS message whose `body` is the event, or a Lambda SQS batch.
//!
//! A batch gives one record per message, and a message that cannot be read is that
//! record's error, not the batch's: the function reports it as a batch item failure and
//! handles the others. The input as a whole is an error only when no record can be made
//! of it (not an object, or `Records` not a list).

use aws_lambda_events::sqs::SqsMessage;
use serde_json::Value;

use super::error::{EventError, json_type};
use super::parse::{InterruptionEvent, parse_event};

/// One event of an input, with its SQS message id when it came through SQS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InputRecord {
    /// The SQS `messageId` (the batch item failure's identifier); `None` for a bare event.
    pub message_id: Option<String>,
    /// The event, or why it cannot be read.
    pub event: Result<InterruptionEvent, EventError>,
}

/// The instances a batch's spot warnings name: the burst replaced together
/// (the interruption function's shared snapshot plans them at once).
pub fn spot_warnings(records: &[InputRecord]) -> std::collections::BTreeSet<String> {
    records
        .iter()
        .filter_map(|r| r.event.as_ref().ok())
        .filter(|e| {
            matches!(
                e.action,
                super::Action::Disrupt {
                    cause: super::Cause::SpotInterruption
                }
            )
        })
        .flat_map(|e| e.instance_ids.iter().cloned())
        .collect()
}

/// Reads an input (see the module doc) into its records, in order.
///
/// An object with `Records` is a Lambda SQS batch; one with `body` and no `detail-type`
/// is one SQS message; anything else is read as a bare event, whose error, if any, is its
/// record's.
pub fn parse_input(json: &Value) -> Result<Vec<InputRecord>, EventError> {
    let Some(object) = json.as_object() else {
        return Err(EventError::NotAnObject { found: json_type(json) });
    };
    if let Some(records) = object.get("Records") {
        let Some(records) = records.as_array() else {
            return Err(EventError::BadBatch {
                found: json_type(records),
            });
        };
        return Ok(records.iter().map(sqs_record).collect());
    }
    if object.contains_key("body") && !object.contains_key("detail-type") {
        return Ok(vec![sqs_record(json)]);
    }
    Ok(vec![InputRecord {
        message_id: None,
        event: parse_event(json),
    }])
}

/// [`parse_input`] of a text, which must be JSON.
pub fn parse_input_text(text: &str) -> Result<Vec<InputRecord>, EventError> {
    let json: Value = serde_json::from_str(text)?;
    parse_input(&json)
}

/// One SQS message: its body is the event's JSON, as a string.
fn sqs_record(record: &Value) -> InputRecord {
    // The id is read on its own first, so that a record broken elsewhere still names it.
    let message_id = record.get("messageId").and_then(Value::as_str).map(str::to_owned);
    let event = serde_path_to_error::deserialize::<_, SqsMessage>(record)
        .map_err(|e| EventError::BadSqsMessage {
            path: e.path().to_string(),
            message: e.into_inner().to_string(),
        })
        .and_then(|message| {
            let body = message.body.ok_or(EventError::MissingBody)?;
            let event: Value = serde_json::from_str(&body)?;
            parse_event(&event)
        });
    InputRecord { message_id, event }
}
